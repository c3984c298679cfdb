"""How the REST API checks an API token: who it is (authentication) and what it may do (scope).

ApiTokenAuthentication is django-rest-knox's, first in DEFAULT_AUTHENTICATION_CLASSES: a
missing, unknown, revoked or expired token answers 401 with ``WWW-Authenticate: Token``.
HasTokenScope (a default permission) lets a token-authenticated request through only if the
token's scope covers the view: ``token_scope`` on the view for its writes, read for its
safe methods, admin for a view that declares none. The user's roles still apply on top.
"""

import datetime
import functools
import logging
from hmac import compare_digest
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import Group
from django.core.cache import cache
from django.db import connections
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from knox.auth import TokenAuthentication
from knox.crypto import hash_token
from knox.settings import CONSTANTS
from rest_framework import exceptions
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from accounts.api_tokens import scope_covers
from accounts.audit import audit_record, client_ip
from accounts.models import ApiScope, ApiToken, AuditAction, User
from accounts.roles import Role
from accounts.selectors import roles_remember
from config.rows import ModelRows

if TYPE_CHECKING:  # rest_framework.views imports this module (its default classes)
    from rest_framework.views import APIView

logger = logging.getLogger(__name__)

TOKENS_PAGE = "/team/tokens/"
# last_used_at is written at most this often per token.
LAST_USED_EVERY = datetime.timedelta(minutes=1)
# A refused token is audited at most once per window per caller address.
REFUSED_AUDIT_SECONDS = 60
# The roles in _candidates_sql's order, and their names, made once: every API request
# binds them (Role.values builds its list anew at each call).
_ROLES = tuple(Role)
_ROLE_NAMES = tuple(role.value for role in _ROLES)


class TokenRefused(exceptions.AuthenticationFailed):
    """A token that is unknown, revoked, expired or of a deactivated user (401)."""

    def __init__(self, detail: str, *, reason: str, token: ApiToken | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.token = token


class ApiTokenAuthentication(TokenAuthentication):
    """Knox's token authentication, with reasons a caller can act on and an audit trail.

    Unlike knox's own, an expired token is refused as expired (not deleted on sight), so it
    stays in its user's list until they revoke it, and each use notes last_used_at.
    """

    def authenticate(self, request: Request) -> tuple[User, ApiToken] | None:
        try:
            return super().authenticate(request)
        except exceptions.AuthenticationFailed as exc:
            _refusal_record(request=request, reason=getattr(exc, "reason", "malformed"),
                            token=getattr(exc, "token", None))
            raise

    def authenticate_credentials(self, token: bytes) -> tuple[User, ApiToken]:
        try:
            secret = token.decode("ascii")
        except UnicodeDecodeError:
            raise TokenRefused("The API token is not valid: it has characters no token has.",
                               reason="malformed") from None
        digest = hash_token(secret)
        now = timezone.now()
        for candidate in _candidates(key=secret[: CONSTANTS.TOKEN_KEY_LENGTH]):
            if not compare_digest(digest, candidate.digest):
                continue
            if candidate.expiry <= now:
                raise TokenRefused(
                    f"The API token {candidate.name!r} expired at "
                    f"{candidate.expiry.isoformat(timespec='seconds')}; create a new one "
                    f"at {TOKENS_PAGE}.", reason="expired", token=candidate)
            if not candidate.user.is_active:
                raise TokenRefused("The API token's user is deactivated.",
                                   reason="user_inactive", token=candidate)
            _use_note(candidate, now)
            return candidate.user, candidate
        raise TokenRefused(f"The API token is not valid: it was revoked or never existed. "
                           f"Create one at {TOKENS_PAGE}.", reason="unknown")


def _candidates(*, key: str) -> list[ApiToken]:
    """Return the tokens of key (one or a few), each with its user and the user's roles
    (user_roles asks no query of its own), in one statement.

    Every API request runs it, so its SQL is built once per process, not compiled by the
    ORM per request (about 1.2 ms of CPU with the roles' subqueries, more than the rest
    of a take); the rows become instances as the ORM would make them (config.rows).
    """
    connection = connections[ApiToken.objects.db]
    sql, params = _candidates_sql(connection.vendor), [*_ROLE_NAMES, key]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    tokens, users = ModelRows.of(ApiToken, connection), ModelRows.of(User, connection)
    found = []
    for row in rows:
        token = tokens.instance(row[:tokens.width], connection)
        user = users.instance(row[tokens.width:tokens.width + users.width], connection)
        roles_remember(user=user, roles=[role for role, held in zip(
            _ROLES, row[tokens.width + users.width:], strict=True) if held])
        token.user = user
        found.append(token)
    return found


@functools.cache
def _candidates_sql(vendor: str) -> str:
    """The statement of _candidates (per database vendor: its quoting): the token's and its
    user's columns in their models' order, then one EXISTS per role (Role's order)."""
    quote = connections[ApiToken.objects.db].ops.quote_name
    memberships = User.groups.through._meta
    user_id, token_user = User._meta.pk.column, ApiToken._meta.get_field("user").column
    columns = [f"t.{quote(f.column)}" for f in ApiToken._meta.concrete_fields] + [
        f"u.{quote(f.column)}" for f in User._meta.concrete_fields]
    roles = [
        f"EXISTS (SELECT 1 FROM {quote(memberships.db_table)} m JOIN "  # noqa: S608
        f"{quote(Group._meta.db_table)} g ON g.{quote('id')} = m.{quote('group_id')} "
        f"WHERE m.{quote('user_id')} = u.{quote(user_id)} AND g.{quote('name')} = %s)"
        for _ in _ROLES]
    # No ORDER BY: the key finds one row or a few, each compared by the caller.
    return (f"SELECT {', '.join(columns + roles)} "  # noqa: S608 (names from the models)
            f"FROM {quote(ApiToken._meta.db_table)} t JOIN {quote(User._meta.db_table)} u "
            f"ON u.{quote(user_id)} = t.{quote(token_user)} "
            f"WHERE t.{quote('token_key')} = %s")


def _use_note(token: ApiToken, now: datetime.datetime) -> None:
    if token.last_used_at is not None and token.last_used_at > now - LAST_USED_EVERY:
        return  # Noted within the minute, as read with the token: no statement at all.
    # Conditional: a client calling many times a second writes the row once a minute, not
    # at every request (and concurrent requests do not queue on its lock).
    ApiToken.objects.filter(pk=token.pk).exclude(
        last_used_at__gt=now - LAST_USED_EVERY).update(last_used_at=now)
    token.last_used_at = now


def _refusal_record(*, request: Request, reason: str, token: ApiToken | None) -> None:
    """Audit a refused token, at most once a minute per caller address.

    Guessing or replaying tokens would otherwise write a row per request (a log flood);
    one entry a minute per address says who is knocking. Without a cache (Redis down)
    nothing is audited and a warning is logged instead.
    """
    address = client_ip(request) or "-"
    window = int(timezone.now().timestamp() // REFUSED_AUDIT_SECONDS)
    try:
        first = cache.add(f"api-token-refused:{address}:{window}", 1,
                          timeout=REFUSED_AUDIT_SECONDS * 2)
    except Exception as exc:
        logger.warning("API token refused (%s) from %s; not audited, the cache failed: %s",
                       reason, address, exc)
        return
    if first:
        audit_record(action=AuditAction.TOKEN_REFUSED, actor=None,
                     subject=token.user.email if token else "", request=request,
                     reason=reason, name=token.name if token else "", path=request.path)


def scope_needed(*, view: "APIView", method: str, default: ApiScope = ApiScope.ADMIN) -> ApiScope:
    """Return the scope a token needs to call view with method.

    Safe methods of a view that declares a token_scope need read; everything else needs
    the declared scope, or default (admin) when the view declares none.
    """
    declared = getattr(view, "token_scope", None)
    if declared is None:
        return default
    return ApiScope.READ if method in SAFE_METHODS else ApiScope(declared)


class HasTokenScope(BasePermission):
    """Let a token through if its scope covers the view (session requests: always)."""

    default_scope = ApiScope.ADMIN
    code = "insufficient_scope"
    message = "This API token's scope does not cover this request."

    def has_permission(self, request: Request, view: "APIView") -> bool:
        token = request.auth
        if not isinstance(token, ApiToken):
            return True
        needed = scope_needed(view=view, method=request.method or "GET",
                              default=self.default_scope)
        if scope_covers(held=token.scope, needed=needed):
            return True
        self.message = (f"This API token has scope {token.scope}; {request.method} "
                        f"{request.path} needs scope {needed} (or wider). Create a token "
                        f"of scope {needed} at {TOKENS_PAGE}.")
        return False


class HasTokenScopeRead(HasTokenScope):
    """HasTokenScope for views anyone may read with any token (the API schema)."""

    default_scope = ApiScope.READ


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """Describe ApiTokenAuthentication in the OpenAPI schema: Authorization: Token <key>."""

    target_class = ApiTokenAuthentication
    name = "apiToken"

    def get_security_definition(self, auto_schema: Any) -> dict[str, Any]:
        return build_bearer_security_scheme_object(
            header_name="Authorization", token_prefix="Token")  # noqa: S106
