"""Forms of the accounts pages: sign-in, and a row of the team's skills matrix."""

from typing import Any

from allauth.account.forms import LoginForm as AllauthLoginForm
from django import forms
from django.core.exceptions import ValidationError
from django.http import QueryDict

from accounts.models import PROFICIENCY_MAX, PROFICIENCY_MIN, Availability, Skill

CAPACITY_MAX = 100
PROFICIENCIES = [str(level) for level in range(PROFICIENCY_MIN, PROFICIENCY_MAX + 1)]
PROFICIENCY_ERROR = f"Proficiency must be from {PROFICIENCY_MIN} to {PROFICIENCY_MAX}."
AVAILABILITY_ERROR = "Choose available or away."
CAPACITY_ERROR = f"Capacity must be a whole number from 0 to {CAPACITY_MAX}."


class LoginForm(AllauthLoginForm):
    """allauth's sign-in form with the cursor in the email field, for keyboard users."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["login"].widget.attrs["autofocus"] = True


def skill_field(skill: Skill) -> str:
    """Return the name of a skill's cell in a row of the matrix."""
    return f"skill-{skill.slug}"


class ShownStripped:
    """Show a posted value back as it was read: without the spaces around it."""

    def bound_data(self, data: Any, initial: Any) -> Any:
        return data.strip() if isinstance(data, str) else data


class ProficiencyField(ShownStripped, forms.TypedChoiceField):
    """A proficiency the page offers ("1" to "5"), or empty for a skill not held (None)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            choices=[("", "not held"), *((level, level) for level in PROFICIENCIES)],
            coerce=int, empty_value=None, required=False,
            error_messages={"invalid_choice": PROFICIENCY_ERROR}, **kwargs,
        )

    def to_python(self, value: Any) -> str:
        return super().to_python(value.strip() if isinstance(value, str) else value)


class CapacityField(ShownStripped, forms.IntegerField):
    """A whole number as int() reads it, spaces around aside: "7.0" is not one."""

    def to_python(self, value: Any) -> int:
        try:
            return int(str(value).strip())
        except ValueError:
            raise ValidationError(self.error_messages["invalid"], code="invalid") from None


class WorkerRowForm(forms.Form):
    """One row of the skills matrix: a worker's proficiency per skill, availability, capacity.

    Only the fields posted are bound: a field left out of a post is left as it is, and a
    skill's cell posted empty removes that skill.
    """

    availability = forms.TypedChoiceField(
        choices=Availability.choices, coerce=Availability,
        error_messages={"required": AVAILABILITY_ERROR, "invalid_choice": AVAILABILITY_ERROR},
    )
    capacity = CapacityField(
        min_value=0, max_value=CAPACITY_MAX,
        error_messages={code: CAPACITY_ERROR
                        for code in ("required", "invalid", "min_value", "max_value")},
    )

    def __init__(self, *, data: QueryDict, skills: list[Skill]) -> None:
        super().__init__(data=data)
        self.skills = skills
        for skill in skills:
            self.fields[skill_field(skill)] = ProficiencyField(label=skill.name)
        self.order_fields([skill_field(skill) for skill in skills])
        for name in [name for name in self.fields if name not in data]:
            del self.fields[name]

    def proficiencies(self) -> dict[Skill, int | None]:
        """Return the proficiency posted for each skill whose cell was posted (None: remove)."""
        return {skill: self.cleaned_data[skill_field(skill)] for skill in self.skills
                if skill_field(skill) in self.cleaned_data}

    def problems(self) -> dict[str, str]:
        """Return each bad field's error, in the order of the row."""
        return {name: errors[0] for name, errors in self.errors.items()}
