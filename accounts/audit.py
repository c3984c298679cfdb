"""The audit log: who signed in, failed, was locked out, and who changed whose access.

One append-only table (``AuditEvent``; on PostgreSQL a trigger refuses UPDATE and DELETE)
and one writer, ``audit_record``, which also writes the entry to the ``inbox.audit``
logger, so the log pipeline has every entry without reading the database. Entries say
who, what, to whom and from where; never a password, a credential or a task token.
"""

import logging
from typing import Any

from django.http import HttpRequest

from accounts.models import AuditAction, AuditEvent, User

logger = logging.getLogger("inbox.audit")

# A detail value longer than this is cut: an entry records a fact, not a payload.
_DETAIL_MAX = 200


def client_ip(request: HttpRequest | None) -> str | None:
    """Return the caller's address as the trusted-proxy settings read it (allauth's).

    ALLAUTH_TRUSTED_PROXY_COUNT / ALLAUTH_TRUSTED_CLIENT_IP_HEADER decide which address
    counts (docs/CONFIGURATION.md); without them it is REMOTE_ADDR.
    """
    if request is None:
        return None
    from allauth.account.adapter import get_adapter

    try:
        return get_adapter(request).get_client_ip(request)
    except Exception:  # allauth refuses a forwarded header that does not fit the settings
        return request.META.get("REMOTE_ADDR")


def audit_record(
    *,
    action: AuditAction,
    actor: User | None = None,
    subject: str = "",
    request: HttpRequest | None = None,
    **detail: Any,
) -> AuditEvent:
    """Append one audit entry and log it; return the entry.

    actor: who did it (None: anonymous or the system); subject: whom or what it concerns
    (an e-mail address, a skill, a token's name); detail: short facts, JSON-serialisable.
    """
    clean = {key: _short(value) for key, value in detail.items()}
    actor_user = actor if actor is not None and getattr(actor, "pk", None) else None
    event = AuditEvent.objects.create(
        action=AuditAction(action),
        actor_id=actor_user.pk if actor_user else None,
        actor_email=actor_user.email if actor_user else "",
        subject=subject[:254],
        ip=client_ip(request),
        detail=clean,
    )
    logger.info(
        "audit %s actor=%s subject=%s ip=%s %s",
        event.action, event.actor_email or "-", event.subject or "-", event.ip or "-",
        " ".join(f"{key}={value}" for key, value in clean.items()),
    )
    return event


def _short(value: Any) -> Any:
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    if isinstance(value, (list, tuple, set, frozenset)):
        return sorted(str(item)[:_DETAIL_MAX] for item in value)
    text = str(value)
    return text if len(text) <= _DETAIL_MAX else text[: _DETAIL_MAX - 1] + "…"
