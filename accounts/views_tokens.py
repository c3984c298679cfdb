"""Page of a user's API tokens: list them, create one (its secret shown once), revoke one.

Every signed-in user has this page (/team/tokens/) for their own tokens. Admins also create
tokens for other users there, visibly: the token shows in that user's own list as created
by the admin, and the audit log records it. accounts.api_tokens does the writes.

The secret is rendered only in the answer to the POST that created it (never stored, not
even in the session, and the answer is not cached); a later view of the page lists the
token without it.
"""

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from accounts.api_tokens import (
    NAME_MAX,
    api_scopes_allowed,
    api_token_create,
    api_token_revoke,
    api_tokens_of,
)
from accounts.decorators import admin_only, recent_auth_required
from accounts.models import ApiScope, ApiToken, User
from accounts.roles import Role
from accounts.selectors import user_has_role
from config.errors import InboxError, NotFound


class TokenForm(forms.Form):
    """A token of one's own: a name, a scope the user's roles allow, a lifetime in days."""

    name = forms.CharField(max_length=NAME_MAX, help_text="What it is for, e.g. ci or laptop.")
    scope = forms.ChoiceField()
    days = forms.IntegerField()  # bounded in __init__, by the settings of the moment

    def __init__(self, *args: Any, scopes: list[ApiScope], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        most = settings.INBOX_API_TOKEN_MAX_DAYS
        self.fields["scope"].choices = [(scope.value, scope.label) for scope in scopes]
        self.fields["scope"].error_messages["invalid_choice"] = (
            f"Choose one of {', '.join(scopes)}: the scopes your roles allow.")
        self.fields["days"] = forms.IntegerField(
            min_value=1, max_value=most, help_text=f"Days until it expires, 1 to {most}.",
            error_messages={"max_value": f"A token lasts at most {most} days.",
                            "min_value": "A token lasts at least 1 day.",
                            "invalid": "Enter a whole number of days."})
        self.initial.setdefault("days", settings.INBOX_API_TOKEN_DAYS)
        self.initial.setdefault("scope", scopes[min(1, len(scopes) - 1)].value)


class TokenForUserForm(TokenForm):
    """A token an admin makes for another user, named by e-mail address."""

    email = forms.EmailField(label="User's e-mail address")
    field_order = ["email", "name", "scope", "days"]

    def clean_email(self) -> User:
        email = self.cleaned_data["email"]
        user = User.objects.filter(email__iexact=email, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"No active user {email}.")
        return user


def _page(request: HttpRequest, *, form: TokenForm | None = None,
          for_form: TokenForUserForm | None = None, created: ApiToken | None = None,
          secret: str = "", status: int = 200) -> HttpResponse:
    user = request.user
    scopes = api_scopes_allowed(user=user)
    is_admin = user_has_role(user=user, role=Role.ADMIN)
    return render(request, "accounts/tokens.html", {
        "tokens": list(api_tokens_of(user=user)),
        "now": timezone.now(),
        "form": form or TokenForm(scopes=scopes),
        "for_form": (for_form or TokenForUserForm(scopes=list(ApiScope))) if is_admin else None,
        "created": created,
        "secret": secret,
    }, status=status)


@require_safe
def tokens(request: HttpRequest) -> HttpResponse:
    """List the user's API tokens, with the form that creates one."""
    return _page(request)


@never_cache
@require_POST
@recent_auth_required  # a new credential: only from a session that proved its password lately
def token_create(request: HttpRequest) -> HttpResponse:
    """Create a token for the user; the answer shows its secret, this once."""
    form = TokenForm(request.POST, scopes=api_scopes_allowed(user=request.user))
    if not form.is_valid():
        return _page(request, form=form, status=400)
    data = form.cleaned_data
    try:
        token, secret = api_token_create(user=request.user, name=data["name"],
                                         scope=data["scope"], days=data["days"],
                                         actor=request.user, request=request)
    except InboxError as exc:
        form.add_error(None, exc.message)
        return _page(request, form=form, status=400)
    return _page(request, created=token, secret=secret)


@never_cache
@require_POST
@admin_only  # a change of an admin's: it needs a recent sign-in too (recent_auth_required)
def token_create_for(request: HttpRequest) -> HttpResponse:
    """Create a token for another user (admins): audited, and listed as made by the admin."""
    form = TokenForUserForm(request.POST, scopes=list(ApiScope))
    if not form.is_valid():
        return _page(request, for_form=form, status=400)
    data = form.cleaned_data
    try:
        token, secret = api_token_create(user=data["email"], name=data["name"],
                                         scope=data["scope"], days=data["days"],
                                         actor=request.user, request=request)
    except InboxError as exc:
        form.add_error(None, exc.message)
        return _page(request, for_form=form, status=400)
    return _page(request, created=token, secret=secret)


@require_POST
def token_revoke(request: HttpRequest, token_id: int) -> HttpResponse:
    """Revoke one of the user's tokens: from now on it is refused (401)."""
    try:
        token = api_token_revoke(token_id=token_id, user=request.user, actor=request.user,
                                 request=request)
    except NotFound:
        messages.info(request, "That token was already revoked.")
    else:
        messages.success(request, f"Revoked the token {token.name}: it no longer works.")
    return redirect("team:tokens")
