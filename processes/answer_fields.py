"""Django form fields for the answer to a stage's form: one per field type of a definition.

Each field cleans a value from the API's JSON (numbers, booleans, strings) and from a
page's POST (strings) alike. Nothing, None and text of only spaces count as no value: a
checkbox is then unticked (False), any other field empty (None). Messages are lower case
and name no field; the inbox puts the field's label or name in front of them.
"""

import datetime
import math
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, MaxValueValidator, MinValueValidator

REQUIRED = {"required": "required"}


def is_blank(value: Any) -> bool:
    """Return whether value counts as no answer: None, or text of only spaces."""
    return value is None or (isinstance(value, str) and value.strip() == "")


class TextAnswerField(forms.Field):
    """Text of at most max_length characters (counted as given); a line is stripped."""

    default_error_messages = {
        **REQUIRED,
        "invalid": "must be text",
        "max_length": "at most %(limit_value)d characters, got %(show_value)d",
    }

    def __init__(self, *, max_length: int, strip: bool, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.strip = strip
        self.validators.append(MaxLengthValidator(max_length))

    def to_python(self, value: Any) -> str | None:
        if is_blank(value):
            return None
        if not isinstance(value, str):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        return value

    def clean(self, value: Any) -> str | None:
        text = super().clean(value)
        return text.strip() if self.strip and text is not None else text


class NumberAnswerField(forms.Field):
    """A finite number within min and max: "12" from a page is 12, JSON's 12.0 stays 12.0."""

    widget = forms.NumberInput
    default_error_messages = {
        **REQUIRED,
        "invalid": "must be a number",
        "not_a_number": "must be a number, not %(text)s",
        "not_finite": "must be a finite number",
        "min_value": "must be at least %(limit_value)g",
        "max_value": "must be at most %(limit_value)g",
    }

    def __init__(self, *, min_value: float | None, max_value: float | None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if min_value is not None:
            self.validators.append(MinValueValidator(min_value))
        if max_value is not None:
            self.validators.append(MaxValueValidator(max_value))

    def to_python(self, value: Any) -> int | float | None:
        if is_blank(value):
            return None
        if isinstance(value, bool):
            raise ValidationError(self.error_messages["invalid"], code="invalid")
        number = value
        if isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                raise ValidationError(self.error_messages["not_a_number"], code="not_a_number",
                                      params={"text": repr(value[:40])}) from None
        if not isinstance(number, int | float) or not math.isfinite(number):
            raise ValidationError(self.error_messages["not_finite"], code="not_finite")
        if isinstance(value, str) and isinstance(number, float) and number.is_integer():
            return int(number)
        return number


class ChoiceAnswerField(forms.ChoiceField):
    """One of the choices' values; JSON's 1 is the choice "1"."""

    default_error_messages = {**REQUIRED}

    def __init__(self, *, choices: tuple[tuple[str, str], ...], **kwargs: Any) -> None:
        values = ", ".join(value for value, _label in choices)
        # Django formats this message with the value given: a "%" in a choice is escaped.
        messages = {"invalid_choice": f"must be one of {values}".replace("%", "%%")}
        super().__init__(choices=choices, error_messages=messages, **kwargs)

    def to_python(self, value: Any) -> str | None:
        return None if is_blank(value) else str(value)


class CheckboxAnswer(forms.CheckboxInput):
    """Read a checkbox's value as given; the field, not the widget, says what it means.

    Django's CheckboxInput turns any value into a boolean ("maybe" and 1 would be ticked);
    here they are refused, and an unticked box (not posted at all) is None, no value.
    """

    def value_from_datadict(self, data: Any, files: Any, name: str) -> Any:
        return data.get(name)


class CheckboxAnswerField(forms.BooleanField):
    """Ticked or not: a boolean, or "on", "true", "1", "yes" / "off", "false", "0", "no"."""

    widget = CheckboxAnswer
    default_error_messages = {**REQUIRED, "invalid": "must be true or false"}
    TICKED = ("on", "true", "1", "yes")
    UNTICKED = ("off", "false", "0", "no")

    def to_python(self, value: Any) -> bool:
        if is_blank(value):
            return False
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in self.TICKED:
            return True
        if isinstance(value, str) and value.lower() in self.UNTICKED:
            return False
        raise ValidationError(self.error_messages["invalid"], code="invalid")


class DateAnswerField(forms.Field):
    """A date as YYYY-MM-DD (ISO 8601), cleaned to that text."""

    widget = forms.DateInput
    default_error_messages = {**REQUIRED, "invalid": "must be a date as YYYY-MM-DD"}

    def to_python(self, value: Any) -> str | None:
        if is_blank(value):
            return None
        try:
            return datetime.date.fromisoformat(str(value)).isoformat()
        except ValueError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None
