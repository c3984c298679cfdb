"""REST API of the signed-in caller: who they are, and with what token.

``GET /api/me/`` answers the caller's email, roles, capacity and availability, and the
API token the request signed in with (its name, scope, expiry; never its secret or
digest; null for a session). A client checks a new token with it before its first real
call, as it would with GitHub's ``GET /user``. It asks no query of its own: the sign-in
reads the token, its user and the user's roles in one statement (accounts.api_auth), so
it is also the cheapest request that signs in with a token, and bench/take_next.py
measures the web's signed-in floor with it (docs/BENCHMARKS.md).
"""

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.api_auth import HasTokenScopeRead
from accounts.models import ApiToken
from accounts.roles import Role
from accounts.selectors import user_roles


class MeTokenSerializer(serializers.Serializer):
    name = serializers.CharField()
    scope = serializers.CharField()
    expires_at = serializers.DateTimeField()


class MeSerializer(serializers.Serializer):
    """The caller: never a token's secret or digest."""

    email = serializers.EmailField()
    roles = serializers.ListField(child=serializers.ChoiceField(choices=Role.choices))
    capacity = serializers.IntegerField()
    availability = serializers.CharField()
    token = MeTokenSerializer(allow_null=True, help_text=(
        "The API token this request signed in with; null when signed in by session."))


# MeSerializer describes the answer (the OpenAPI schema); me_data builds it as a plain dict:
# a serializer's instance deep-copies its fields, a quarter of this request's CPU.
_when = serializers.DateTimeField().to_representation


def me_data(*, user: Any, token: ApiToken | None) -> dict[str, Any]:
    """Return the caller as MeSerializer shows them (roles in Role's order)."""
    held = user_roles(user=user)
    return {
        "email": user.email,
        "roles": [role.value for role in Role if role in held],
        "capacity": user.capacity,
        "availability": user.availability,
        "token": None if token is None else {
            "name": token.name, "scope": token.scope, "expires_at": _when(token.expiry)},
    }


class MeApi(APIView):
    """Who the caller is; any signed-in caller, with a token of any scope."""

    permission_classes = [IsAuthenticated, HasTokenScopeRead]

    @extend_schema(responses=MeSerializer, summary="Who I am, and the token I signed in with")
    def get(self, request: Request) -> Response:
        token = request.auth if isinstance(request.auth, ApiToken) else None
        return Response(me_data(user=request.user, token=token))
