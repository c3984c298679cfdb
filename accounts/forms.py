"""Forms of the accounts pages: sign-in, a skill's settings, a row of the team's skills
matrix, and a bulk grant."""

from typing import Any

from allauth.account.forms import LoginForm as AllauthLoginForm
from allauth.account.forms import ReauthenticateForm as AllauthReauthenticateForm
from django import forms
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db.models import QuerySet
from django.http import QueryDict

from accounts.models import (
    PROFICIENCY_MAX,
    PROFICIENCY_MIN,
    Availability,
    Dispatch,
    PeerVisibility,
    Skill,
    User,
)

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


class ReauthenticateForm(AllauthReauthenticateForm):
    """allauth's password-again form with the cursor in the password field: a save that
    asks for the password again goes on with typing it and Enter."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.fields["password"].widget.attrs["autofocus"] = True


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


# The envelope schema's pattern of a skill (processes/schemas/human-task-v1.schema.json):
# a slug it refuses could never receive a task.
SKILL_SLUG = RegexValidator(
    r"^[a-z][a-z0-9-]{0,63}\Z",
    "Use lowercase letters, digits and hyphens, starting with a letter, at most 64 "
    "characters (e.g. invoice-review): process specs and task envelopes name a skill so.",
)


class SkillForm(forms.ModelForm):
    """A skill's settings; the slug only when it is created (specs and tasks name it)."""

    dispatch = forms.TypedChoiceField(
        choices=Dispatch.choices, coerce=Dispatch, widget=forms.RadioSelect,
        label="Dispatch", initial=Dispatch.PULL.value,
        help_text="Pull: tasks wait in the queue and workers take the next. Push: each task "
                  "is offered to one eligible worker at a time, who accepts or declines "
                  "before the stage's offer clock runs out.",
        error_messages={"required": "Choose pull or push.",
                        "invalid_choice": "Choose pull or push."},
    )
    peer_visibility = forms.TypedChoiceField(
        choices=PeerVisibility.choices, coerce=PeerVisibility, widget=forms.RadioSelect,
        label="Peer visibility", initial=PeerVisibility.OWN.value,
        help_text=Skill._meta.get_field("peer_visibility").help_text,
        error_messages={"required": "Choose own or team.",
                        "invalid_choice": "Choose own or team."},
    )

    class Meta:
        model = Skill
        fields = ["slug", "name", "description", "dispatch", "peer_visibility", "weight"]
        help_texts = {
            "slug": "The name process specs and task envelopes use (e.g. invoice-review); "
                    "it cannot change once the skill exists.",
            "name": "What people read on their queues and pages.",
            "description": "Optional: what the work is, for workers and supervisors.",
            "weight": "Capacity units one task of this skill uses (1 to 100): a worker of "
                      "capacity 3 holds three tasks of weight 1, or one of weight 3.",
        }
        error_messages = {
            "slug": {"required": "Give the skill a slug, e.g. invoice-review.",
                     "unique": "A skill with this slug exists already: choose another, or "
                               "edit that skill."},
            "name": {"required": "Give the skill a name, e.g. Invoice review."},
            "weight": {"required": "Give the weight: a whole number from 1 to 100.",
                       "invalid": "The weight is a whole number from 1 to 100.",
                       "min_value": "The weight is at least 1.",
                       "max_value": "The weight is at most 100."},
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            del self.fields["slug"]
        else:
            # Instead of Django's slug rule (it lets in capitals and underscores).
            self.fields["slug"].validators = [SKILL_SLUG]
        self.fields["description"].widget.attrs["rows"] = 3

    def settings(self) -> dict[str, Any]:
        """Return the settings posted (the slug aside), as the services take them."""
        return {name: self.cleaned_data[name]
                for name in ("name", "description", "dispatch", "peer_visibility", "weight")}


class BulkGrantForm(forms.Form):
    """Grant one skill at one proficiency to the workers selected on the matrix."""

    worker = forms.ModelMultipleChoiceField(
        queryset=User.objects.none(),
        error_messages={
            "required": "Select at least one worker (the boxes in the first column).",
            "invalid_choice": "A worker selected is no longer active: reload the page.",
            "invalid_pk_value": "A worker selected is not one of the matrix's.",
        },
    )
    skill = forms.ModelChoiceField(
        queryset=Skill.objects.order_by("slug"), to_field_name="slug", empty_label=None,
        label="Skill",
        error_messages={"required": "Choose the skill to grant.",
                        "invalid_choice": "That skill does not exist (any more): reload the "
                                          "page."},
    )
    proficiency = forms.TypedChoiceField(
        choices=[(level, level) for level in PROFICIENCIES], coerce=int, label="Proficiency",
        error_messages={"required": PROFICIENCY_ERROR, "invalid_choice": PROFICIENCY_ERROR},
    )

    def __init__(self, *args: Any, workers: QuerySet[User], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["worker"].queryset = workers

    def problems(self) -> dict[str, str]:
        """Return each bad field's error."""
        return {name: errors[0] for name, errors in self.errors.items()}
