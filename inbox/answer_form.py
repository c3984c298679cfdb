"""A stage's form bound to what a worker posted and what was wrong, for the task page.

Rendering only: the answer is validated by processes.forms.form_validate, called from
inbox.services.worker.task_complete.
"""

from dataclasses import dataclass
from typing import Any

from django.http import QueryDict

from processes.forms import Field, Form

# Up to this many choices are radio buttons (picked with the keys 1..9); more are a select.
RADIO_LIMIT = 9


@dataclass(frozen=True)
class Choice:
    value: str
    label: str
    checked: bool


@dataclass(frozen=True)
class BoundField:
    field: Field
    value: Any
    error: str
    autofocus: bool

    @property
    def id(self) -> str:
        return f"field-{self.field.name}"

    @property
    def help_id(self) -> str:
        return f"{self.id}-help"

    @property
    def error_id(self) -> str:
        return f"{self.id}-error"

    @property
    def help(self) -> str:
        """Return the field's help, or say when it becomes required if that is all there is."""
        if self.field.help or not self.field.required_if:
            return self.field.help
        return "Required when " + "; ".join(
            f"{other} is {' or '.join(map(str, values))}"
            for other, values in self.field.required_if
        ) + "."

    @property
    def describedby(self) -> str:
        ids = [self.error_id] if self.error else []
        if self.help:
            ids.append(self.help_id)
        return " ".join(ids)

    @property
    def widget(self) -> str:
        if self.field.type == "choice":
            return "radio" if len(self.field.choices) <= RADIO_LIMIT else "select"
        return self.field.type

    @property
    def choices(self) -> list[Choice]:
        return [Choice(value=value, label=label, checked=str(self.value) == value)
                for value, label in self.field.choices]

    @property
    def checked(self) -> bool:
        return str(self.value).lower() in ("on", "true", "1", "yes")


def answer_from_post(form: Form, data: QueryDict) -> dict[str, Any]:
    """Return the answer a posted HTML form gives: one value per field of the form.

    A checkbox left unticked is not posted at all; it is absent from the answer too.
    """
    return {f.name: data[f.name] for f in form.fields if f.name in data}


def bound_fields(form: Form, *, values: dict[str, Any] | None = None,
                 errors: dict[str, str] | None = None) -> list[BoundField]:
    """Return the form's fields with the values to show and their errors.

    The first field with an error gets autofocus, so focus lands on it when the page loads.
    """
    values, errors = values or {}, errors or {}
    first_invalid = next((f.name for f in form.fields if f.name in errors), None)
    return [
        BoundField(field=f, value=values.get(f.name, ""), error=errors.get(f.name, ""),
                   autofocus=f.name == first_invalid)
        for f in form.fields
    ]
