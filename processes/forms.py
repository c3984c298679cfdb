"""Forms a human stage asks its worker to fill: definitions, parsing and validation.

A form definition is a small list of typed fields. Built-in forms are defined here; a
process spec may define more under ``forms:``. Each definition builds a Django form
(``answer_form_class``) that validates a worker's answer, from the API or the task page;
``form_validate`` runs it before anything is sent to Step Functions.
"""

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from django import forms
from django.core.exceptions import ValidationError

from config.errors import InboxError
from processes.answer_fields import (
    CheckboxAnswerField,
    ChoiceAnswerField,
    DateAnswerField,
    NumberAnswerField,
    TextAnswerField,
)

FIELD_TYPES = ("text", "textarea", "number", "choice", "checkbox", "date")
FORM_NAME = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
TEXT_LIMIT = 10_000


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    label: str
    required: bool = False
    # Required when another field has one of these values: {"decision": ["reject"]}.
    required_if: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    help: str = ""
    min: float | None = None
    max: float | None = None
    max_length: int | None = None
    choices: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Form:
    name: str
    title: str
    fields: tuple[Field, ...] = field(default_factory=tuple)

    def field(self, name: str) -> Field | None:
        return next((f for f in self.fields if f.name == name), None)


class FormInvalid(InboxError):
    """An answer does not fit its form; errors maps each field to what is wrong."""

    code = "invalid_answer"

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {message}" for name, message in errors.items()))
        self.errors = errors


BUILTIN_FORMS: dict[str, Form] = {
    "approve-reject": Form(
        name="approve-reject",
        title="Approve or reject",
        fields=(
            Field(
                name="decision",
                type="choice",
                label="Decision",
                required=True,
                choices=(("approve", "Approve"), ("reject", "Reject")),
            ),
            Field(
                name="comment",
                type="textarea",
                label="Comment",
                required_if=(("decision", ("reject",)),),
                help="Required when you reject.",
                max_length=2000,
            ),
        ),
    ),
    "acknowledge": Form(
        name="acknowledge",
        title="Acknowledge",
        fields=(
            Field(name="done", type="checkbox", label="Done", required=True),
            Field(name="note", type="textarea", label="Note", max_length=2000),
        ),
    ),
}


# Parsing (from a spec's ``forms:`` section) ------------------------------------------

_FIELD_KEYS = {
    "name", "type", "label", "required", "required_if", "help", "min", "max",
    "max_length", "choices",
}


def form_parse(name: str, data: Any, *, path: str, problems: list[str]) -> Form | None:
    """Return the Form described by data, appending "path: message" problems for bad parts."""
    if not FORM_NAME.match(name):
        problems.append(f"{path}: form name must be lowercase letters, digits and dashes")
    if not isinstance(data, dict):
        problems.append(f"{path}: must be a mapping with title and fields")
        return None
    for key in sorted(set(data) - {"title", "fields"}):
        problems.append(f"{path}.{key}: unknown field (known: fields, title)")
    raw_fields = data.get("fields")
    if not isinstance(raw_fields, list) or not raw_fields:
        problems.append(f"{path}.fields: must be a non-empty list")
        return None
    fields: list[Field] = []
    for index, raw in enumerate(raw_fields):
        parsed = _field_parse(raw, path=f"{path}.fields[{index}]", problems=problems)
        if parsed:
            fields.append(parsed)
    names = [f.name for f in fields]
    for duplicate in sorted({n for n in names if names.count(n) > 1}):
        problems.append(f"{path}.fields: field {duplicate!r} appears more than once")
    for f in fields:
        for other, _values in f.required_if:
            if other not in names:
                problems.append(
                    f"{path}.fields: {f.name}.required_if names unknown field {other!r}"
                )
    return Form(name=name, title=str(data.get("title") or name), fields=tuple(fields))


def _field_parse(raw: Any, *, path: str, problems: list[str]) -> Field | None:
    if not isinstance(raw, dict):
        problems.append(f"{path}: must be a mapping")
        return None
    for key in sorted(set(raw) - _FIELD_KEYS):
        problems.append(f"{path}.{key}: unknown field (known: {', '.join(sorted(_FIELD_KEYS))})")
    name, kind = raw.get("name"), raw.get("type")
    if not isinstance(name, str) or not FIELD_NAME.match(name):
        problems.append(f"{path}.name: required; lowercase letters, digits and underscores")
        return None
    if kind not in FIELD_TYPES:
        problems.append(f"{path}.type: must be one of {', '.join(FIELD_TYPES)}, not {kind!r}")
        return None
    choices: tuple[tuple[str, str], ...] = ()
    if kind == "choice":
        raw_choices = raw.get("choices")
        if not isinstance(raw_choices, list) or not raw_choices:
            problems.append(f"{path}.choices: a choice field needs a non-empty list")
        else:
            choices = tuple(
                (str(c["value"]), str(c.get("label", c["value"])))
                if isinstance(c, dict) and "value" in c
                else (str(c), str(c))
                for c in raw_choices
            )
    elif "choices" in raw:
        problems.append(f"{path}.choices: only a choice field has choices")
    required_if: list[tuple[str, tuple[Any, ...]]] = []
    raw_if = raw.get("required_if", {})
    if not isinstance(raw_if, dict):
        problems.append(f"{path}.required_if: must map a field name to a value or list of values")
    else:
        for other, values in raw_if.items():
            values = values if isinstance(values, list) else [values]
            required_if.append((str(other), tuple(values)))
    numbers = {}
    for key in ("min", "max", "max_length"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            problems.append(f"{path}.{key}: must be a number")
            value = None
        numbers[key] = value
    return Field(
        name=name,
        type=kind,
        label=str(raw.get("label") or name.replace("_", " ").capitalize()),
        required=bool(raw.get("required", False)),
        required_if=tuple(required_if),
        help=str(raw.get("help", "")),
        min=numbers["min"],
        max=numbers["max"],
        max_length=int(numbers["max_length"]) if numbers["max_length"] is not None else None,
        choices=choices,
    )


# Validation of answers: a Django form per definition ----------------------------------

_FIELD_CLASSES: dict[str, Callable[..., forms.Field]] = {
    "text": functools.partial(TextAnswerField, strip=True),
    "textarea": functools.partial(TextAnswerField, strip=False, widget=forms.Textarea),
    "number": NumberAnswerField,
    "choice": ChoiceAnswerField,
    "checkbox": CheckboxAnswerField,
    "date": DateAnswerField,
}
# Codes of the errors that say a value is missing; they are listed after bad values.
_MISSING = {"required", "required_if"}


class AnswerForm(forms.Form):
    """The Django form of an answer to one form definition (see answer_form_class).

    Each field's value is checked by its Django field; clean() adds what depends on other
    fields: a field that required_if makes necessary.
    """

    definition: ClassVar[Form]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for f in self.definition.fields:
            if f.required or not f.required_if or f.name in self.errors:
                continue
            needed = any(cleaned.get(other) in values for other, values in f.required_if)
            value = cleaned.get(f.name)
            if needed and (value is None or (f.type == "checkbox" and not value)):
                when = ", ".join(f"{other} is {' or '.join(map(str, values))}"
                                 for other, values in f.required_if)
                self.add_error(f.name, ValidationError(f"required when {when}",
                                                       code="required_if"))
        return cleaned

    def answer(self) -> dict[str, Any]:
        """Return each field's value as bound, before cleaning: the answer as given."""
        return {bound.name: bound.data for bound in self}

    def problems(self) -> dict[str, str]:
        """Return each bad field's first error: bad values, then missing ones, in field order."""
        order = list(self.fields)
        found = sorted(self.errors.as_data().items(),
                       key=lambda item: (item[1][0].code in _MISSING, order.index(item[0])))
        return {name: errors[0].messages[0] for name, errors in found}


def answer_form_class(form: Form) -> type[AnswerForm]:
    """Return the Django form class of answers to form, built once per definition."""
    try:
        hash(form)
    except TypeError:  # required_if values read from YAML may be lists: nothing to key on.
        return _answer_form_build(form)
    return _answer_form_cached(form)


def _answer_form_build(form: Form) -> type[AnswerForm]:
    fields = {}
    for f in form.fields:
        options: dict[str, Any] = {"required": f.required, "label": f.label, "help_text": f.help}
        if f.type in ("text", "textarea"):
            options["max_length"] = f.max_length or TEXT_LIMIT
        elif f.type == "number":
            options.update(min_value=f.min, max_value=f.max)
        elif f.type == "choice":
            options["choices"] = f.choices
        fields[f.name] = _FIELD_CLASSES[f.type](**options)
    return type(f"AnswerForm_{form.name}", (AnswerForm,), {"definition": form, **fields})


_answer_form_cached = functools.lru_cache(maxsize=512)(_answer_form_build)


def form_validate(form: Form, answer: Any) -> dict[str, Any]:
    """Return the cleaned answer, or raise FormInvalid naming each bad field and why.

    The form's Django form (answer_form_class) cleans JSON values from the API and strings
    from HTML forms alike: "12" for a number, "on"/"true" for a checkbox. A key the form
    has no field for is refused too: a misspelt field must not pass as an empty one.
    """
    if not isinstance(answer, dict):
        raise FormInvalid({"answer": "must be an object of field values"})
    errors = {
        name: f"unknown field; the form {form.name!r} has no such field"
        for name in sorted(set(answer) - {f.name for f in form.fields})
    }
    bound = answer_form_class(form)(data=answer)
    if bound.is_valid() and not errors:
        return bound.cleaned_data
    raise FormInvalid(errors | bound.problems())
