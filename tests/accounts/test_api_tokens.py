"""API tokens: kept hashed, shown once, expiring, scoped, revocable, listed with their last use."""

import io
import re
import secrets
import time

import pytest
from django.core.management import call_command
from django.db import connection
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from accounts import sessions
from accounts.api_auth import HasTokenScope
from accounts.models import ApiToken, AuditAction, AuditEvent
from accounts.roles import Role
from accounts.services import user_set_roles

SECRET = re.compile(r'<textarea id="new-token"[^>]*>([^<]+)</textarea>')


def _create_on_page(client, **fields) -> tuple[int, str, str]:
    """Post the create form; return the status, the page, and the secret shown (or "")."""
    data = {"name": "laptop", "scope": "work", "days": "30", **fields}
    response = client.post("/team/tokens/new/", data)
    page = response.content.decode()
    found = SECRET.search(page)
    return response.status_code, page, found.group(1) if found else ""


def _token_client(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {secret}")
    return client


def _every_stored_value() -> list[str]:
    """Return every value of every row of every table, as text."""
    values: list[str] = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")  # noqa: S608
            values.extend(str(value) for row in cursor.fetchall() for value in row)
    return values


def test_a_token_is_stored_only_as_a_digest(worker, browser_for):
    """No column of any table holds the secret, or contains it (the audit log included)."""
    status, _, secret = _create_on_page(browser_for(worker))
    assert status == 200 and len(secret) >= 64
    assert _token_client(secret).get("/api/inbox/queues/").status_code == 200
    assert not [value for value in _every_stored_value() if secret in value]
    token = ApiToken.objects.get(user=worker)
    assert len(token.digest) == 128 and token.digest != secret


def test_the_secret_is_shown_once_and_never_again(worker, browser_for):
    page = browser_for(worker)
    status, created, secret = _create_on_page(page, name="ci")
    assert status == 200 and secret in created
    assert "no-store" in page.post("/team/tokens/new/", {"name": "x", "scope": "read",
                                                          "days": "1"})["Cache-Control"]
    listing = page.get("/team/tokens/").content.decode()
    assert "ci" in listing and secret not in listing
    assert secret[:15] not in listing  # not even the part knox looks rows up by


def test_a_request_without_a_token_is_401_with_www_authenticate(db):
    response = APIClient().get("/api/inbox/queues/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["code"] == "not_authenticated"
    assert "Authorization: Token" in response.json()["detail"]


def test_an_unknown_token_is_401_with_www_authenticate(db):
    response = _token_client("inbox_" + "0" * 64).get("/api/inbox/queues/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["code"] == "authentication_failed"


def test_a_token_that_is_not_text_is_401_not_a_500(db):
    response = APIClient().get("/api/inbox/queues/",
                               HTTP_AUTHORIZATION="Token inbox_\u00e9\u00e9")
    assert response.status_code == 401


def test_an_expired_token_is_401_saying_it_expired(worker, api_token, clock):
    secret = api_token(worker, scope="read", days=3)
    assert _token_client(secret).get("/api/inbox/queues/").status_code == 200
    clock.advance(days=3, seconds=1)
    response = _token_client(secret).get("/api/inbox/queues/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    assert response.json()["code"] == "authentication_failed"
    assert "expired" in response.json()["detail"]


def test_a_revoked_token_is_401_and_the_revocation_is_audited(worker, browser_for):
    page = browser_for(worker)
    _, _, secret = _create_on_page(page, name="old-laptop")
    token = ApiToken.objects.get(user=worker)
    assert page.post(f"/team/tokens/{token.pk}/revoke/").status_code == 302
    response = _token_client(secret).get("/api/inbox/queues/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Token"
    revoked = AuditEvent.objects.get(action=AuditAction.TOKEN_REVOKED)
    assert (revoked.actor_id, revoked.subject, revoked.detail["name"]) == (
        worker.pk, worker.email, "old-laptop")
    assert '<th scope="row">old-laptop</th>' not in page.get("/team/tokens/").content.decode()


def test_a_user_cannot_revoke_another_users_token(worker, make_worker, api_token, browser_for):
    other = make_worker({"invoice-review": 1})
    secret = api_token(other, scope="read")
    token = ApiToken.objects.get(user=other)
    browser_for(worker).post(f"/team/tokens/{token.pk}/revoke/")
    assert _token_client(secret).get("/api/inbox/queues/").status_code == 200


def test_a_read_token_can_list_but_not_act(worker, make_task, api_token):
    task = make_task()
    client = _token_client(api_token(worker, scope="read"))
    assert client.get("/api/inbox/queues/").status_code == 200
    assert client.get(f"/api/inbox/tasks/{task.pk}/").status_code == 200
    for action in ("claim", "complete"):
        response = client.post(f"/api/inbox/tasks/{task.pk}/{action}/",
                               {"answer": {"decision": "approve"}}, format="json")
        assert response.status_code == 403
        assert response.json()["code"] == "insufficient_scope"
        assert "needs scope work" in response.json()["detail"]
    task.refresh_from_db()
    assert task.version == 1  # nothing changed


@pytest.fixture
def boss(make_worker, review_skill):
    """A supervisor who also works on invoice reviews (both roles)."""
    return make_worker({"invoice-review": 3}, roles=(Role.WORKER, Role.SUPERVISOR))


def test_a_work_token_cannot_use_the_supervisor_api(boss, make_task, api_token):
    task = make_task()
    client = _token_client(api_token(boss, scope="work"))
    assert client.post(f"/api/inbox/tasks/{task.pk}/claim/", {}, format="json").status_code == 200
    response = client.post(f"/api/inbox/supervisor/tasks/{task.pk}/return/",
                           {"reason": "back"}, format="json")
    assert response.status_code == 403
    assert "needs scope supervise" in response.json()["detail"]
    bulk = client.post("/api/inbox/supervisor/tasks/bulk/",
                       {"action": "return", "task_ids": [str(task.pk)], "reason": "back"},
                       format="json")
    assert bulk.status_code == 403
    supervise = _token_client(api_token(boss, scope="supervise"))
    assert supervise.post(f"/api/inbox/supervisor/tasks/{task.pk}/return/",
                          {"reason": "back"}, format="json").status_code == 200


def test_only_an_admin_token_reaches_the_processes_api(admin, api_token):
    response = _token_client(api_token(admin, scope="supervise")).get("/api/processes/")
    assert response.status_code == 200  # reading needs only read
    response = _token_client(api_token(admin, scope="supervise")).post(
        "/api/processes/deploy/", {"spec": "x"}, format="json")
    assert response.status_code == 403
    assert "needs scope admin" in response.json()["detail"]


def test_a_token_never_gives_more_than_its_user_has(make_worker, review_skill, api_token,
                                                     make_task):
    """A supervisor's supervise token stops working on the supervisor API with the role."""
    boss = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    client = _token_client(api_token(boss, scope="supervise"))
    assert client.get("/api/inbox/supervisor/tasks/").status_code == 200
    user_set_roles(user=boss, roles=[Role.WORKER])
    assert client.get("/api/inbox/supervisor/tasks/").status_code == 403


def test_a_worker_cannot_create_a_supervise_or_admin_token(worker, browser_for):
    page = browser_for(worker)
    form = page.get("/team/tokens/").content.decode()
    assert 'value="work"' in form and 'value="supervise"' not in form
    for scope in ("supervise", "admin"):
        status, refused, secret = _create_on_page(page, scope=scope)
        assert (status, secret) == (400, "")
        assert "Choose one of read, work" in refused
    assert not ApiToken.objects.filter(user=worker).exists()


def test_a_token_lasts_at_most_the_configured_days(worker, browser_for, settings):
    settings.INBOX_API_TOKEN_MAX_DAYS = 30
    status, refused, _ = _create_on_page(browser_for(worker), days="31")
    assert status == 400 and "at most 30 days" in refused
    assert not ApiToken.objects.exists()


def test_an_admin_creates_a_token_for_another_user_visibly(admin, worker, browser_for):
    response = browser_for(admin).post("/team/tokens/for-user/", {
        "email": worker.email, "name": "ops", "scope": "work", "days": "7"})
    assert response.status_code == 200
    secret = SECRET.search(response.content.decode()).group(1)
    assert _token_client(secret).get("/api/inbox/tasks/mine/").status_code == 200
    theirs = browser_for(worker).get("/team/tokens/").content.decode()
    row = theirs[theirs.index("<th scope=\"row\">ops</th>"):]
    assert "root@example.com" in row[: row.index("</tr>")]
    created = AuditEvent.objects.get(action=AuditAction.TOKEN_CREATED)
    assert (created.actor_id, created.subject, created.detail["scope"]) == (
        admin.pk, worker.email, "work")
    assert not ApiToken.objects.filter(user=admin).exists()


def test_an_admin_cannot_give_another_user_a_scope_their_roles_do_not_allow(
    admin, worker, browser_for
):
    response = browser_for(admin).post("/team/tokens/for-user/", {
        "email": worker.email, "name": "ops", "scope": "admin", "days": "7"})
    assert response.status_code == 400
    assert "scope admin needs the role admin" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_only_admins_create_tokens_for_others(worker, make_worker, browser_for):
    other = make_worker({"invoice-review": 1})
    response = browser_for(worker).post("/team/tokens/for-user/", {
        "email": other.email, "name": "x", "scope": "read", "days": "7"})
    assert response.status_code == 404
    assert not ApiToken.objects.exists()


def test_last_used_at_is_set_on_use_and_written_at_most_once_a_minute(worker, api_token,
                                                                     clock):
    client = _token_client(api_token(worker, scope="read"))
    token = ApiToken.objects.get(user=worker)
    assert token.last_used_at is None
    client.get("/api/inbox/queues/")
    token.refresh_from_db()
    first = token.last_used_at
    assert first == clock.now
    clock.advance(seconds=30)
    client.get("/api/inbox/queues/")
    token.refresh_from_db()
    assert token.last_used_at == first
    clock.advance(seconds=31)
    client.get("/api/inbox/queues/")
    token.refresh_from_db()
    assert token.last_used_at == clock.now


def test_refused_tokens_are_audited_once_a_minute_per_address(db, clock):
    # An address of this run's own: the once-a-minute mark lives in the shared cache (Redis)
    # past the test, and the clock fixture starts every run in the same minute.
    address = f"2001:db8::{secrets.token_hex(2)}:{secrets.token_hex(2)}"
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION="Token inbox_" + "1" * 64)
    for _ in range(5):
        assert client.get("/api/inbox/queues/").status_code == 401
    refused = AuditEvent.objects.filter(action=AuditAction.TOKEN_REFUSED, ip=address)
    assert refused.count() == 1
    assert refused.get().detail["reason"] == "unknown"
    clock.advance(seconds=60)
    client.get("/api/inbox/queues/")
    assert refused.count() == 2


def test_the_command_prints_a_token_once_and_audits_it(worker):
    out, err = io.StringIO(), io.StringIO()
    call_command("api_token_create", "--email", worker.email, "--scope", "read",
                 "--days", "30", "--name", "ci", stdout=out, stderr=err)
    secret = out.getvalue().strip()
    assert _token_client(secret).get("/api/inbox/queues/").status_code == 200
    assert secret not in err.getvalue() and "ci" in err.getvalue()
    created = AuditEvent.objects.get(action=AuditAction.TOKEN_CREATED)
    assert (created.actor_id, created.subject) == (None, worker.email)
    assert ApiToken.objects.get(user=worker).created_by is None


def test_every_api_view_checks_the_token_scope():
    """No API view's own permission_classes leave HasTokenScope out (they replace the default)."""

    def views(resolver: URLResolver, prefix: str = ""):
        for pattern in resolver.url_patterns:
            route = prefix + str(pattern.pattern)
            if isinstance(pattern, URLResolver):
                yield from views(pattern, route)
            elif isinstance(pattern, URLPattern) and hasattr(pattern.callback, "cls"):
                yield route, pattern.callback.cls

    checked = dict(views(get_resolver()))
    assert any(route.startswith("api/processes/") for route in checked)
    assert any(route.startswith("api/inbox/supervisor/") for route in checked)
    missing = [route for route, cls in checked.items() if route.startswith("api/")
               and not any(isinstance(p, HasTokenScope) for p in cls().get_permissions())]
    assert missing == []


def test_session_requests_are_not_limited_by_any_scope(boss, make_task, browser_for):
    """The pages' own fetches use the session: the user's roles alone decide."""
    task = make_task()
    page = browser_for(boss)
    assert page.get("/api/inbox/supervisor/tasks/").status_code == 200
    assert page.post(f"/api/inbox/tasks/{task.pk}/claim/", {},
                     content_type="application/json").status_code == 200


@pytest.mark.parametrize(("who", "path", "fields"), [
    ("worker", "/team/tokens/new/", {"name": "ci", "scope": "work", "days": "7"}),
    ("admin", "/team/tokens/for-user/", {"name": "ops", "scope": "work", "days": "7"}),
])
def test_creating_a_token_long_after_sign_in_asks_for_the_password_first(
    who, path, fields, admin, worker, browser_for, settings
):
    """A new credential comes only from a session that proved its password lately."""
    client = browser_for(admin if who == "admin" else worker)
    session = client.session
    session[sessions.AUTHENTICATED_AT] = (time.time()
                                          - settings.ACCOUNT_REAUTHENTICATION_TIMEOUT - 1)
    session.save()
    response = client.post(path, {"email": worker.email, **fields})
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/reauthenticate/")
    assert not ApiToken.objects.exists()
    assert not AuditEvent.objects.filter(action=AuditAction.TOKEN_CREATED).exists()


@pytest.mark.parametrize("roles", [(Role.WORKER,), (Role.SUPERVISOR,),
                                   (Role.WORKER, Role.ADMIN)])
def test_a_token_s_sign_in_reads_its_user_s_roles_in_the_same_query(make_user, api_token,
                                                                     roles):
    """The views ask the roles of every API request's user: they come with the token."""
    from django.test.utils import CaptureQueriesContext

    from accounts.api_auth import ApiTokenAuthentication
    from accounts.selectors import user_roles

    user = make_user(roles=roles)
    secret = api_token(user, scope="read")
    authentication = ApiTokenAuthentication()
    authentication.authenticate_credentials(secret.encode())  # its first use, noted
    with CaptureQueriesContext(connection) as queries:
        found, _ = authentication.authenticate_credentials(secret.encode())
        assert user_roles(user=found) == set(roles)
    assert len(queries.captured_queries) == 1, queries.captured_queries
    user_set_roles(user=user, roles=[Role.WORKER])
    found, _ = authentication.authenticate_credentials(secret.encode())
    assert user_roles(user=found) == {Role.WORKER}  # read anew with each request


def test_a_token_s_sign_in_reads_the_token_and_user_as_the_orm_does(make_user, api_token):
    """The sign-in's statement is written by hand (built once per process): its token and
    user are, field by field, what the ORM reads."""
    from accounts.api_auth import ApiTokenAuthentication

    user = make_user(roles=(Role.WORKER,))
    secret = api_token(user, scope="work")
    authentication = ApiTokenAuthentication()
    authentication.authenticate_credentials(secret.encode())  # last_used_at noted
    found, token = authentication.authenticate_credentials(secret.encode())
    stored = ApiToken.objects.select_related("user").get(pk=token.pk)
    for field in ApiToken._meta.concrete_fields:
        assert getattr(token, field.attname) == getattr(stored, field.attname), field.name
    for field in type(user)._meta.concrete_fields:
        assert getattr(found, field.attname) == getattr(stored.user, field.attname), (
            field.name)
    assert token.user is found and not found._state.adding
