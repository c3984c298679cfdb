"""GET /api/me/: who the caller is, and the token they signed in with (never its secret)."""

import datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts.models import ApiToken
from accounts.roles import Role

ME = "/api/me/"


def test_a_token_answers_its_user_roles_and_the_token_but_not_its_secret(
        make_user, api_token, clock):
    user = make_user(roles=(Role.SUPERVISOR, Role.WORKER), email="sam@example.com")
    secret = api_token(user, scope="work", days=30, name="laptop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")

    response = client.get(ME)

    assert response.status_code == 200, response.content
    token = ApiToken.objects.get(user=user)
    assert response.json() == {
        "email": "sam@example.com",
        "roles": ["worker", "supervisor"],  # Role's order, not the order they were given
        "capacity": user.capacity,
        "availability": user.availability,
        "token": {"name": "laptop", "scope": "work",
                  "expires_at": token.expiry.isoformat().replace("+00:00", "Z")},
    }
    assert token.expiry - clock() == datetime.timedelta(days=30)
    body = response.content.decode()
    assert secret not in body and secret[:15] not in body and token.digest not in body


@pytest.mark.parametrize("scope", ["read", "work"])
def test_a_token_of_any_scope_may_ask(make_user, api_token, scope):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(make_user(), scope=scope)}")
    response = client.get(ME)
    assert response.status_code == 200, response.content
    assert response.json()["token"]["scope"] == scope


def test_a_session_answers_the_user_and_no_token(worker, browser_for):
    response = browser_for(worker).get(ME)
    assert response.status_code == 200, response.content
    assert response.json()["email"] == worker.email
    assert response.json()["roles"] == ["worker"]
    assert response.json()["token"] is None


def test_no_or_a_revoked_token_is_401(make_user, api_token):
    assert APIClient().get(ME).status_code == 401
    secret = api_token(make_user())
    ApiToken.objects.all().delete()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    response = client.get(ME)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"


def test_it_asks_nothing_but_the_sign_in(make_user, api_token):
    """The token, its user and the user's roles come in the sign-in's one statement."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(make_user(roles=(Role.WORKER,)))}")
    client.get(ME)  # the token's first use writes its last_used_at note
    with CaptureQueriesContext(connection) as queries:
        response = client.get(ME)
    assert response.status_code == 200
    assert len(queries.captured_queries) == 1, queries.captured_queries
    assert "accounts_apitoken" in queries.captured_queries[0]["sql"]


def test_the_answer_is_the_one_its_schema_serializer_gives(make_user, api_token):
    """me_data builds the answer as a dict; MeSerializer, which documents it, agrees."""
    from accounts.api import MeSerializer, me_data

    user = make_user(roles=(Role.ADMIN, Role.WORKER))
    api_token(user, scope="admin", name="ci")
    token = ApiToken.objects.get(user=user)
    for answered in (token, None):
        expected = MeSerializer({
            "email": user.email, "roles": ["worker", "admin"], "capacity": user.capacity,
            "availability": user.availability,
            "token": answered and {"name": "ci", "scope": "admin",
                                   "expires_at": answered.expiry}}).data
        assert me_data(user=user, token=answered) == expected
