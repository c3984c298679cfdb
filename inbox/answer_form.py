"""A stage's Django answer form as the task page shows it: its fields, values and errors.

Rendering only: processes.forms.answer_form_class builds the Django form of a definition,
the page binds it to request.POST, and inbox.services.worker.task_complete validates the answer
(with processes.forms.form_validate, the same Django form). The template keeps its own
markup (radio keys 1..9, ids, aria-describedby); each value and error comes from Django's
bound field.
"""

import json
from dataclasses import dataclass
from typing import Any

from django.forms import BoundField

from processes.forms import AnswerForm, Field

# Up to this many choices are radio buttons (picked with the keys 1..9); more are a select.
RADIO_LIMIT = 9


@dataclass(frozen=True)
class Choice:
    value: str
    label: str
    checked: bool


@dataclass(frozen=True)
class AnswerField:
    """One field of the page: its definition, Django's bound field and its first error."""

    field: Field
    bound: BoundField
    error: str
    autofocus: bool

    @property
    def value(self) -> Any:
        """Return the value to show: what was posted, or nothing on a fresh page."""
        value = self.bound.value()
        return "" if value is None else value

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
    def required_if_json(self) -> str:
        """Return the field's required_if as JSON ({"decision": ["reject"]}) for the page's
        script, which marks the field required while one of those values is picked; blank
        for a field that is always required or never."""
        if self.field.required or not self.field.required_if:
            return ""
        return json.dumps({other: list(values) for other, values in self.field.required_if})

    @property
    def required_if_message(self) -> str:
        """Return what the server says of the field left empty when required_if needs it
        (processes.forms.AnswerForm.clean), as the field's error shows it: the script shows
        the same words before anything is sent."""
        when = ", ".join(f"{other} is {' or '.join(map(str, values))}"
                         for other, values in self.field.required_if)
        return f"Required when {when}"

    @property
    def checked(self) -> bool:
        return str(self.value).lower() in ("on", "true", "1", "yes")


def answer_fields(answer_form: AnswerForm) -> list[AnswerField]:
    """Return the form's fields with the values to show and their errors.

    A bound form is validated here if it was not yet. The first field with an error gets
    autofocus, so focus lands on it when the page loads.
    """
    errors = answer_form.problems() if answer_form.is_bound else {}
    first_invalid = next((name for name in answer_form.fields if name in errors), None)
    return [
        AnswerField(field=answer_form.definition.field(bound.name), bound=bound,
                    error=errors.get(bound.name, ""), autofocus=bound.name == first_invalid)
        for bound in answer_form
    ]
