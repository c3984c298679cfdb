"""Failed sign-ins throttled by django-axes: the pieces its settings name (config.settings).

Axes counts failures per account and per client address (the address from
accounts.audit.client_ip, the same as allauth's and the audit log's) and refuses a locked
one before any password is checked. The account is the e-mail address as typed, trimmed and
lower-cased, so "Ana@Example.com" and "ana@example.com " are counted together.
"""

import math
from datetime import datetime
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.exceptions import AxesBackendPermissionDenied
from axes.handlers.proxy import AxesProxyHandler
from django.conf import settings
from django.db.models import Max
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

LOCKED_MESSAGE = "Too many failed sign-ins for this account or from this address."
# Set on a request whose sign-in the lockout refused before any password was checked.
REFUSED_ATTRIBUTE = "inbox_signin_refused"


class SignInThrottleBackend(AxesStandaloneBackend):
    """Axes' backend, except that authenticate() without a request is let through.

    Without a request there is no client to count: Django's test client's login() and a
    shell. Every way in over the web passes its request (allauth, and with it the admin;
    DRF's authentication classes), so it is counted. A refused request is marked
    (REFUSED_ATTRIBUTE) for the audit log, which records the attempt as refused.
    """

    def authenticate(self, request: HttpRequest | None, username: str | None = None,
                     password: str | None = None, **kwargs: Any) -> None:
        if request is None:
            return None
        try:
            return super().authenticate(request, username, password, **kwargs)
        except AxesBackendPermissionDenied:
            setattr(request, REFUSED_ATTRIBUTE, True)
            raise


def signin_username(request: HttpRequest | None, credentials: dict | None) -> str | None:
    """Return the account a sign-in is for: the e-mail tried, trimmed and lower-cased.

    allauth authenticates with email=, Django's forms with username= (the e-mail here);
    without credentials it is the form's login field.
    """
    value = None
    if credentials:
        value = credentials.get("email") or credentials.get("username")
    if value is None and request is not None:
        data = getattr(request, "data", None) or request.POST
        value = data.get("login") or data.get("email") or data.get("username")
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip().lower()[:254]


def lockout_until(request: HttpRequest, credentials: dict | None) -> datetime:
    """Return when the refused account or address may sign in again (the latest of them)."""
    AxesProxyHandler.update_request(request)
    handler = AxesProxyHandler.get_implementation()
    times = [attempts.aggregate(latest=Max("attempt_time"))["latest"]
             for attempts in handler.get_user_attempts(request, credentials)]
    latest = max((at for at in times if at is not None), default=timezone.now())
    return latest + settings.AXES_COOLOFF_TIME


def lockout_response(request: HttpRequest, original_response: HttpResponse | None,
                     credentials: dict | None) -> HttpResponse:
    """Answer a refused sign-in: 429 with when to try again, as JSON under /api/.

    Named in AXES_LOCKOUT_CALLABLE; axes' middleware swaps it for the sign-in page's answer.
    """
    until = lockout_until(request, credentials)
    wait = max(math.ceil((until - timezone.now()).total_seconds()), 1)
    detail = (f"{LOCKED_MESSAGE} Try again after {until:%H:%M} UTC "
              f"({until:%Y-%m-%dT%H:%M:%SZ}).")
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(
            {"code": "locked_out", "detail": detail, "retry_after": wait}, status=429)
    else:
        response = render(request, "account/lockout.html",
                          {"message": LOCKED_MESSAGE, "until": until,
                           "minutes": settings.AXES_COOLOFF_TIME.total_seconds() // 60},
                          status=429)
    response["Retry-After"] = str(wait)
    return response
