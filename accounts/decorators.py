"""Decorators of views that only some roles may open, or only after a recent sign-in."""

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from allauth.account.adapter import get_adapter
from allauth.core.exceptions import ReauthenticationRequired
from django.contrib import messages
from django.contrib.auth import logout
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.utils.http import url_has_allowed_host_and_scheme

from accounts.roles import Role
from accounts.selectors import user_has_role
from accounts.sessions import session_recently_authenticated

View = Callable[..., HttpResponse]
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def admin_only(view: View) -> View:
    """Let admins in; to everyone else the page does not exist.

    A change (any method but GET, HEAD, OPTIONS) also needs a recent sign-in, as
    recent_auth_required says.
    """

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not user_has_role(user=request.user, role=Role.ADMIN):
            raise Http404("No such page.")
        if request.method not in SAFE_METHODS:
            refused = _unless_recently_authenticated(request)
            if refused is not None:
                return refused
        return view(request, *args, **kwargs)

    return wrapped


def recent_auth_required(view: View) -> View:
    """Let the view run only for a user who signed in or confirmed their password within
    ACCOUNT_REAUTHENTICATION_TIMEOUT.

    Otherwise the user confirms their password on allauth's page, which then resumes the
    request (a POST included); a user without a password (signed in through an identity
    provider) is signed out and sent to sign in again, back to the page they were on.
    """

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        refused = _unless_recently_authenticated(request)
        if refused is not None:
            return refused
        return view(request, *args, **kwargs)

    return wrapped


def changes_need_recent_auth(view: View, *,
                             unless: Callable[[HttpRequest], bool] | None = None) -> View:
    """Apply recent_auth_required to the view's changes (not GET, HEAD, OPTIONS), except
    the requests unless(request) lets through."""
    guarded = recent_auth_required(view)

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if request.method in SAFE_METHODS or (unless is not None and unless(request)):
            return view(request, *args, **kwargs)
        return guarded(request, *args, **kwargs)

    return wrapped


def _unless_recently_authenticated(request: HttpRequest) -> HttpResponse | None:
    """Return None if the sign-in is recent; else the answer that makes it so."""
    user = request.user
    if user.is_authenticated and session_recently_authenticated(request):
        return None
    if not user.is_authenticated or get_adapter(request).get_reauthentication_methods(user):
        # allauth's middleware sends to its password page and resumes this request after.
        raise ReauthenticationRequired()
    back = request.headers.get("Referer", "")
    if not url_has_allowed_host_and_scheme(back, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        back = "/"
    logout(request)
    messages.info(request, "Sign in again to confirm it is you, then repeat the change.")
    return redirect_to_login(_path_of(back))


def _path_of(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path + (f"?{parts.query}" if parts.query else "")) or "/"
