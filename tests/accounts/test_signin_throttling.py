"""Every sign-in is throttled per account and per client address, the address read through
the trusted-proxy settings; lockouts say when to try again; the audit log has each event.

Each test signs in from addresses of its own (random, in 10.0.0.0/8): allauth's per-address
rate limits live in the cache, which outlives a test's database transaction.
"""

import json
import random
import re

import pytest
from django.conf import settings
from django.test import Client, RequestFactory

from accounts.models import AuditAction, AuditEvent
from accounts.roles import Role

PASSWORD = "a-long-test-password-1"
WRONG = "not-the-password-9"
LIMIT = settings.AXES_FAILURE_LIMIT


@pytest.fixture
def address():
    """Return a function giving a client address no other test (or earlier run) used."""
    base = f"10.{random.randrange(256)}.{random.randrange(256)}"
    counter = iter(range(1, 255))

    def fresh() -> str:
        return f"{base}.{next(counter)}"

    return fresh


def sign_in(email: str, password: str, *, remote: str, forwarded: str | None = None,
            path: str = "/accounts/login/"):
    """Post the sign-in form from a fresh browser; return (client, response)."""
    client = Client(REMOTE_ADDR=remote)
    headers = {"X-Forwarded-For": forwarded} if forwarded else {}
    response = client.post(path, {"login": email, "password": password}, headers=headers)
    return client, response


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def locked_out(response) -> bool:
    return response.status_code == 429 and "Too many failed sign-ins" in response.content.decode()


# The admin signs in through allauth ---------------------------------------------------------


def test_the_admin_sign_in_page_sends_to_the_sign_in_page_with_next(client, db):
    response = client.get("/admin/login/?next=/admin/accounts/user/")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=%2Fadmin%2Faccounts%2Fuser%2F"


def test_posting_a_password_to_the_admin_sign_in_page_signs_nobody_in(admin, address):
    """The admin's own form used to take passwords unthrottled; now it only redirects."""
    client, response = sign_in(admin.email, PASSWORD, remote=address(), path="/admin/login/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")
    assert not signed_in(client)


def test_thirty_wrong_admin_passwords_lock_the_account_and_refuse_the_right_one(
    admin, address, settings
):
    """allauth's burst limit of sign-in posts per address is off here, so that what refuses
    the right password is the lockout (django-axes), not that other limit."""
    settings.ACCOUNT_RATE_LIMITS = {**settings.ACCOUNT_RATE_LIMITS, "login": False}
    remote = address()
    answers = [sign_in(admin.email, WRONG, remote=remote, path=path)[1]
               for path in ["/admin/login/", "/accounts/login/"] for _ in range(15)]

    on_allauth = answers[15:]
    assert all(r.status_code == 302 for r in answers[:15])  # the admin form: a redirect
    assert [r.status_code for r in on_allauth[:LIMIT - 1]] == [200] * (LIMIT - 1)
    assert all(locked_out(r) for r in on_allauth[LIMIT - 1:])
    client, response = sign_in(admin.email, PASSWORD, remote=remote)
    assert locked_out(response)
    assert not signed_in(client)
    # From another address too: the account itself is locked.
    client, response = sign_in(admin.email, PASSWORD, remote=address())
    assert locked_out(response)
    assert not signed_in(client)


def test_the_lockout_page_says_when_to_try_again_in_the_site_layout(make_user, address):
    make_user(email="ana@example.com")
    remote = address()
    for _ in range(LIMIT):
        _, response = sign_in("ana@example.com", WRONG, remote=remote)

    page = response.content.decode()
    assert locked_out(response)
    assert re.search(r"Try again after \d\d:\d\d UTC", re.sub(r"<[^>]+>", "", page))
    # The lockout runs from the failure that reached the limit, moments before the answer.
    assert 0 < int(response["Retry-After"]) <= settings.AXES_COOLOFF_TIME.total_seconds()
    assert 'class="brand"' in page and "<script>" not in page and "style=" not in page
    assert 'href="/accounts/password/reset/"' in page


# Per account and per address ---------------------------------------------------------------


def test_wrong_passwords_from_many_addresses_lock_the_account_not_the_others(
    make_user, address
):
    make_user(email="ana@example.com")
    make_user(email="bo@example.com")
    for _ in range(LIMIT):
        sign_in("ana@example.com", WRONG, remote=address())

    _, response = sign_in("ana@example.com", PASSWORD, remote=address())
    assert locked_out(response)
    bo, response = sign_in("bo@example.com", PASSWORD, remote=address())
    assert response.status_code == 302 and signed_in(bo)


def test_the_account_is_counted_whatever_the_case_or_spaces_of_the_address(
    make_user, address
):
    make_user(email="ana@example.com")
    spellings = ["ana@example.com", "ANA@example.com", " Ana@Example.COM", "ana@EXAMPLE.com "]
    for index in range(LIMIT):
        sign_in(spellings[index % len(spellings)], WRONG, remote=address())
    _, response = sign_in("ana@example.com", PASSWORD, remote=address())
    assert locked_out(response)


def test_wrong_passwords_for_many_accounts_from_one_address_lock_that_address(
    make_user, address
):
    """Password spraying: one address, a different account each time. A forged
    X-Forwarded-For changes nothing when no proxy is trusted (the default)."""
    make_user(email="carol@example.com")
    remote = address()
    for index in range(LIMIT):
        sign_in(f"someone{index}@example.com", WRONG, remote=remote,
                forwarded=f"192.0.2.{index + 1}")

    client, response = sign_in("carol@example.com", PASSWORD, remote=remote,
                               forwarded="192.0.2.200")
    assert locked_out(response) and not signed_in(client)
    client, response = sign_in("carol@example.com", PASSWORD, remote=address())
    assert response.status_code == 302 and signed_in(client)
    assert {e.ip for e in AuditEvent.objects.filter(action=AuditAction.SIGN_IN_FAILED)} == {
        remote}


def test_behind_a_trusted_proxy_others_failures_do_not_lock_out_a_third_user(
    make_user, address, settings
):
    """All requests come from the load balancer's address; it appends the client's own to
    X-Forwarded-For. Eleven bad sign-ins from others leave carol able to sign in."""
    settings.ALLAUTH_TRUSTED_PROXY_COUNT = 1
    make_user(email="ana@example.com")
    make_user(email="carol@example.com")
    balancer = address()
    for index in range(11):
        sign_in("ana@example.com" if index % 2 else f"nobody{index}@example.com", WRONG,
                remote=balancer, forwarded=f"203.0.113.{index + 1}")

    client, response = sign_in("carol@example.com", PASSWORD, remote=balancer,
                               forwarded="198.51.100.7")
    assert response.status_code == 302 and signed_in(client)
    failed = AuditEvent.objects.filter(action=AuditAction.SIGN_IN_FAILED)
    assert {e.ip for e in failed} == {f"203.0.113.{index + 1}" for index in range(11)}
    assert AuditEvent.objects.get(action=AuditAction.SIGN_IN).ip == "198.51.100.7"


def test_behind_a_trusted_proxy_a_forged_first_address_does_not_escape_the_lockout(
    make_user, address, settings
):
    """The client may send its own X-Forwarded-For; only the entry the proxy added counts."""
    settings.ALLAUTH_TRUSTED_PROXY_COUNT = 1
    make_user(email="carol@example.com")
    balancer = address()
    for index in range(LIMIT):
        sign_in(f"someone{index}@example.com", WRONG, remote=balancer,
                forwarded=f"192.0.2.{index + 1}, 203.0.113.66")

    _, response = sign_in("carol@example.com", PASSWORD, remote=balancer,
                          forwarded="192.0.2.99, 203.0.113.66")
    assert locked_out(response)
    client, response = sign_in("carol@example.com", PASSWORD, remote=balancer,
                               forwarded="203.0.113.67")
    assert signed_in(client)


def test_a_trusted_client_address_header_names_the_client(make_user, address, settings):
    settings.ALLAUTH_TRUSTED_CLIENT_IP_HEADER = "X-Real-IP"
    make_user(email="carol@example.com")
    client = Client(REMOTE_ADDR=address())
    client.post("/accounts/login/", {"login": "carol@example.com", "password": PASSWORD},
                headers={"X-Real-IP": "198.51.100.23", "X-Forwarded-For": "192.0.2.1"})
    assert AuditEvent.objects.get(action=AuditAction.SIGN_IN).ip == "198.51.100.23"


def test_an_api_client_that_is_locked_out_gets_the_json_error_shape(db):
    """No API endpoint takes a password today; should one, its lockout answers JSON."""
    from accounts.throttle import lockout_response

    request = RequestFactory().post("/api/inbox/token/", REMOTE_ADDR="10.9.9.9")
    response = lockout_response(request, None, {"email": "ana@example.com"})
    body = json.loads(response.content)
    assert response.status_code == 429
    assert body["code"] == "locked_out"
    assert "Too many failed sign-ins" in body["detail"]
    assert 0 < int(response["Retry-After"]) <= settings.AXES_COOLOFF_TIME.total_seconds()


# Tests still sign in ---------------------------------------------------------------------


def test_the_test_clients_login_and_force_login_still_sign_in(make_user):
    ana = make_user(email="ana@example.com")
    client = Client()
    assert client.login(email="ana@example.com", password=PASSWORD)
    assert client.get("/").status_code == 200
    other = Client()
    other.force_login(ana)
    assert other.get("/").status_code == 200


# The audit log -------------------------------------------------------------------------------


def test_sign_in_failure_lockout_and_sign_out_are_audited_without_the_password(
    make_user, address
):
    ana = make_user(email="ana@example.com")
    remote = address()
    for _ in range(LIMIT + 1):
        sign_in("Ana@Example.com", WRONG, remote=remote)
    client, _ = sign_in("bo@example.com", WRONG, remote=address())

    failed = list(AuditEvent.objects.filter(action=AuditAction.SIGN_IN_FAILED).order_by("id"))
    locked, = AuditEvent.objects.filter(action=AuditAction.LOCKED_OUT)
    assert len(failed) == LIMIT + 2
    assert {(e.subject, e.ip, e.actor_id) for e in failed[:LIMIT + 1]} == {
        ("ana@example.com", remote, None)}
    # The attempt the lockout refused says so; the ones that checked the password do not.
    assert [e.detail.get("refused") for e in failed[:LIMIT + 1]] == [None] * LIMIT + [
        "locked out"]
    assert (locked.subject, locked.ip, locked.detail) == (
        "ana@example.com", remote, {"failures": LIMIT})
    every_entry = json.dumps([[e.subject, e.detail] for e in AuditEvent.objects.all()])
    assert WRONG not in every_entry and PASSWORD not in every_entry

    client, _ = sign_in("ana@example.com", PASSWORD, remote=address())  # still locked
    assert not AuditEvent.objects.filter(action=AuditAction.SIGN_IN).exists()
    worker = make_user(email="bo@example.com")
    client, _ = sign_in("bo@example.com", PASSWORD, remote=address())
    client.post("/accounts/logout/")
    signed, = AuditEvent.objects.filter(action=AuditAction.SIGN_IN)
    out, = AuditEvent.objects.filter(action=AuditAction.SIGN_OUT)
    assert (signed.actor_id, signed.subject) == (worker.pk, "bo@example.com")
    assert (out.actor_id, out.subject) == (worker.pk, "bo@example.com")
    assert ana.pk not in {signed.actor_id, out.actor_id}


def test_admins_can_see_and_lift_lockouts_in_the_admin(make_user, admin, address):
    """Axes' attempts are listed in the admin; deleting them lifts the lockout."""
    from axes.models import AccessAttempt

    make_user(email="ana@example.com", roles=(Role.WORKER,))
    remote = address()
    for _ in range(LIMIT):
        sign_in("ana@example.com", WRONG, remote=remote)
    desk = Client()
    desk.force_login(admin)
    assert "ana@example.com" in desk.get("/admin/axes/accessattempt/").content.decode()
    AccessAttempt.objects.filter(username="ana@example.com").delete()
    client, _ = sign_in("ana@example.com", PASSWORD, remote=remote)
    assert signed_in(client)
