"""Sign-in events into the audit log, from the hooks of django.contrib.auth and axes.

Connected in AccountsConfig.ready. Every way of signing in (allauth's form, an identity
provider, the password confirmation, the test client) ends in these signals, so the audit
log sees them all without each path writing its own entry.
"""

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from accounts.audit import audit_record
from accounts.models import AuditAction
from accounts.throttle import REFUSED_ATTRIBUTE, signin_username


def audit_signed_in(sender: object, request: HttpRequest | None, user: Any,
                    **kwargs: Any) -> None:
    audit_record(action=AuditAction.SIGN_IN, actor=user, subject=user.email, request=request)


def audit_signed_out(sender: object, request: HttpRequest | None, user: Any,
                     **kwargs: Any) -> None:
    if user is None:  # the session had already ended
        return
    audit_record(action=AuditAction.SIGN_OUT, actor=user, subject=user.email, request=request)


def audit_sign_in_failed(sender: object, credentials: dict, request: HttpRequest | None = None,
                         **kwargs: Any) -> None:
    """Record the address tried, never the password (Django has masked it anyway).

    An attempt the lockout refused before checking the password says so (the throttle's
    backend marked the request).
    """
    refused = getattr(request, REFUSED_ATTRIBUTE, False)
    detail = {"refused": "locked out"} if refused else {}
    audit_record(action=AuditAction.SIGN_IN_FAILED, subject=signin_username(request, credentials)
                 or "", request=request, **detail)


def audit_locked_out(sender: object, request: HttpRequest, username: str | None,
                     ip_address: str | None, **kwargs: Any) -> None:
    """Record a lockout when a failure reaches the limit.

    axes sends the signal again for every attempt it refuses during the lockout; those carry
    no failure count (they were refused before being counted) and are already recorded as
    refused sign-ins. A counted failure at the limit is the one that locked: it was let
    through below it.
    """
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is None or failures < settings.AXES_FAILURE_LIMIT:
        return
    audit_record(action=AuditAction.LOCKED_OUT, subject=username or "", request=request,
                 failures=failures)
