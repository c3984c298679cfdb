"""API tokens: which scopes a user may hold, and the one writer that makes and revokes them.

A token is made for a user by that user, by an admin (visibly: it shows in the user's own
list as made by the admin) or by a command (manage.py api_token_create); each creation and
revocation is audited. The secret is returned once, by api_token_create, and kept nowhere:
the row holds knox's SHA-512 digest of it.
"""

import datetime

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest

from accounts.audit import audit_record
from accounts.models import ApiScope, ApiToken, AuditAction, User
from accounts.roles import Role
from accounts.selectors import user_roles
from config.errors import InboxError, NotFound

NAME_MAX = 64

# The role that lets a user hold each scope (read: any signed-in user).
_SCOPE_ROLES: dict[ApiScope, set[Role]] = {
    ApiScope.READ: set(),
    ApiScope.WORK: {Role.WORKER, Role.SUPERVISOR, Role.ADMIN},
    ApiScope.SUPERVISE: {Role.SUPERVISOR, Role.ADMIN},
    ApiScope.ADMIN: {Role.ADMIN},
}
SCOPE_ORDER = [ApiScope.READ, ApiScope.WORK, ApiScope.SUPERVISE, ApiScope.ADMIN]


def scope_covers(*, held: str, needed: str) -> bool:
    """Return whether a token of scope held may do what needs scope needed."""
    return SCOPE_ORDER.index(ApiScope(held)) >= SCOPE_ORDER.index(ApiScope(needed))


def api_scopes_allowed(*, user: User) -> list[ApiScope]:
    """Return the scopes the user's roles let them hold, narrowest first."""
    roles = user_roles(user=user)
    return [scope for scope in SCOPE_ORDER
            if not _SCOPE_ROLES[scope] or _SCOPE_ROLES[scope] & roles]


def api_tokens_of(*, user: User) -> QuerySet[ApiToken]:
    """Return the user's tokens, newest first, with who made each."""
    return ApiToken.objects.filter(user=user).select_related("created_by").order_by(
        "-created", "-id")


def api_token_create(
    *,
    user: User,
    name: str,
    scope: str,
    days: int | None = None,
    actor: User | None,
    request: HttpRequest | None = None,
) -> tuple[ApiToken, str]:
    """Make a token for user and return it with its secret (audited; never stored).

    actor: who makes it (the user, an admin, or None for a command). The scope must be
    one the user's roles allow; days from 1 to settings.INBOX_API_TOKEN_MAX_DAYS (None:
    INBOX_API_TOKEN_DAYS).
    """
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise InboxError(f"A token's name must be 1 to {NAME_MAX} characters, e.g. ci.")
    if scope not in ApiScope.values:
        raise InboxError(f"Scope {scope!r} does not exist; choose one of "
                         f"{', '.join(ApiScope.values)}.")
    allowed = api_scopes_allowed(user=user)
    if ApiScope(scope) not in allowed:
        needs = " or ".join(sorted(role.value for role in _SCOPE_ROLES[ApiScope(scope)]))
        raise InboxError(f"{user.email} may hold tokens of scope "
                         f"{', '.join(allowed)}; scope {scope} needs the role {needs}.")
    days = settings.INBOX_API_TOKEN_DAYS if days is None else days
    most = settings.INBOX_API_TOKEN_MAX_DAYS
    if not 1 <= days <= most:
        raise InboxError(f"A token lasts from 1 to {most} days, not {days}.")
    if not user.is_active:
        raise InboxError(f"{user.email} is deactivated: their tokens would be refused.")
    with transaction.atomic():
        token, secret = ApiToken.objects.create(
            user=user, expiry=datetime.timedelta(days=days), name=name, scope=scope,
            created_by=actor,
        )
        audit_record(action=AuditAction.TOKEN_CREATED, actor=actor, subject=user.email,
                     request=request, name=name, scope=scope, days=days,
                     expires=token.expiry.isoformat(timespec="seconds"))
    return token, secret


def api_token_revoke(*, token_id: int, user: User | None, actor: User | None,
                     request: HttpRequest | None = None) -> ApiToken:
    """Revoke (delete) a token of user, audited; NotFound if user has no such token.

    user None: any user's token (an admin in the admin site).
    """
    tokens = ApiToken.objects.select_related("user")
    if user is not None:
        tokens = tokens.filter(user=user)
    with transaction.atomic():
        # The row lock makes a double-clicked revoke delete and audit once.
        token = tokens.select_for_update(of=("self",)).filter(pk=token_id).first()
        if token is None:
            raise NotFound(f"No API token {token_id} of yours.")
        token.delete()
        audit_record(action=AuditAction.TOKEN_REVOKED, actor=actor, subject=token.user.email,
                     request=request, name=token.name, scope=token.scope)
    return token
