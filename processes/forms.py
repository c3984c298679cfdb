"""Forms a human stage asks its worker to fill: field schemas, parsing and validation.

A form is a small list of typed fields. Built-in forms are defined here; a process spec
may define more under ``forms:``. The inbox renders a stage's form and validates the
worker's answer with ``form_validate`` before anything is sent to Step Functions.
"""

import datetime
import math
import re
from dataclasses import dataclass, field
from typing import Any

from config.errors import InboxError

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


# Validation of answers ------------------------------------------------------------------


def form_validate(form: Form, answer: Any) -> dict[str, Any]:
    """Return the cleaned answer, or raise FormInvalid naming each bad field and why.

    Accepts JSON values from the API and strings from HTML forms alike: "12" for a
    number, "on"/"true" for a checkbox.
    """
    if not isinstance(answer, dict):
        raise FormInvalid({"answer": "must be an object of field values"})
    errors: dict[str, str] = {}
    for name in sorted(set(answer) - {f.name for f in form.fields}):
        errors[name] = f"unknown field; the form {form.name!r} has no such field"
    cleaned: dict[str, Any] = {}
    for f in form.fields:
        value = answer.get(f.name)
        if _is_blank(value):
            cleaned[f.name] = False if f.type == "checkbox" else None
            continue
        try:
            cleaned[f.name] = _clean(f, value)
        except ValueError as exc:
            errors[f.name] = str(exc)
    for f in form.fields:
        if f.name in errors:
            continue
        needed = f.required or any(
            cleaned.get(other) in values for other, values in f.required_if
        )
        if needed and (cleaned[f.name] is None or (f.type == "checkbox" and not cleaned[f.name])):
            when = ", ".join(
                f"{other} is {' or '.join(map(str, values))}" for other, values in f.required_if
            )
            errors[f.name] = "required" + (f" when {when}" if when and not f.required else "")
    if errors:
        raise FormInvalid(errors)
    return cleaned


def _is_blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _clean(f: Field, value: Any) -> Any:
    if f.type in ("text", "textarea"):
        if not isinstance(value, str):
            raise ValueError("must be text")
        limit = f.max_length or TEXT_LIMIT
        if len(value) > limit:
            raise ValueError(f"at most {limit} characters, got {len(value)}")
        return value if f.type == "textarea" else value.strip()
    if f.type == "number":
        if isinstance(value, bool):
            raise ValueError("must be a number")
        try:
            number = float(value) if isinstance(value, str) else value
        except ValueError:
            raise ValueError(f"must be a number, not {str(value)[:40]!r}") from None
        if not isinstance(number, int | float) or not math.isfinite(number):
            raise ValueError("must be a finite number")
        if isinstance(number, float) and number.is_integer() and isinstance(value, str):
            number = int(number)
        if f.min is not None and number < f.min:
            raise ValueError(f"must be at least {f.min:g}")
        if f.max is not None and number > f.max:
            raise ValueError(f"must be at most {f.max:g}")
        return number
    if f.type == "choice":
        allowed = [v for v, _label in f.choices]
        if str(value) not in allowed:
            raise ValueError(f"must be one of {', '.join(allowed)}")
        return str(value)
    if f.type == "checkbox":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("on", "true", "1", "yes"):
            return True
        if isinstance(value, str) and value.lower() in ("off", "false", "0", "no"):
            return False
        raise ValueError("must be true or false")
    if f.type == "date":
        try:
            return datetime.date.fromisoformat(str(value)).isoformat()
        except ValueError:
            raise ValueError("must be a date as YYYY-MM-DD") from None
    raise ValueError(f"unsupported field type {f.type!r}")
