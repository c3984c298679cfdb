"""Sessions end after INBOX_SESSION_IDLE_SECONDS without activity and INBOX_SESSION_MAX_SECONDS
after sign-in; admin changes need a sign-in or a password confirmation within
ACCOUNT_REAUTHENTICATION_TIMEOUT.

Time passing is simulated by moving the session's own timestamps back (the middleware
reads them against time.time()), never by sleeping.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from django.conf import settings
from django.test import Client

from accounts import sessions
from accounts.models import AuditAction, AuditEvent, Skill, WorkerSkill
from accounts.roles import Role

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "a-long-test-password-1"
IDLE = settings.INBOX_SESSION_IDLE_SECONDS


def signed_in_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def age(client: Client, **seconds_ago: float) -> None:
    """Move the named session timestamps (seen_at, signed_in_at...) that far back."""
    session = client.session
    for name, ago in seconds_ago.items():
        session[getattr(sessions, name.upper())] = time.time() - ago
    session.save()


def stamp(client: Client, name: str) -> float | None:
    return client.session.get(getattr(sessions, name.upper()))


# Idle timeout and absolute cap -----------------------------------------------------------------


def test_the_idle_timeout_is_eight_hours_and_the_session_lasts_at_most_twelve():
    assert settings.INBOX_SESSION_IDLE_SECONDS == 8 * 3600
    assert settings.INBOX_SESSION_MAX_SECONDS == 12 * 3600
    assert settings.SESSION_COOKIE_AGE == settings.INBOX_SESSION_MAX_SECONDS


def test_a_session_idle_too_long_ends_and_the_next_page_asks_to_sign_in_again(worker):
    client = signed_in_as(worker)
    age(client, seen_at=IDLE + 1)

    response = client.get("/supervisor/?skill=invoice-review")
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/supervisor/%3Fskill%3Dinvoice-review"
    assert "_auth_user_id" not in client.session
    entry, = AuditEvent.objects.filter(action=AuditAction.SESSION_EXPIRED)
    assert (entry.actor_id, entry.subject, entry.detail["reason"]) == (
        worker.pk, worker.email, "idle")
    assert not AuditEvent.objects.filter(action=AuditAction.SIGN_OUT).exists()
    page = client.get(response["Location"]).content.decode()
    assert "signed out after 8 hours without activity" in page


def test_activity_keeps_the_session_and_is_written_at_most_once_a_minute(worker):
    client = signed_in_as(worker)
    age(client, seen_at=IDLE - 120)
    assert client.get("/").status_code == 200
    refreshed = stamp(client, "seen_at")
    assert time.time() - refreshed < 5

    age(client, seen_at=30)
    before = stamp(client, "seen_at")
    assert client.get("/").status_code == 200
    assert stamp(client, "seen_at") == before  # less than a minute ago: not written again


def test_the_live_stream_and_background_refreshes_do_not_keep_a_session_alive(worker):
    """A tab left open overnight polls and streams; only what the user does counts."""
    client = signed_in_as(worker)
    age(client, seen_at=600)
    before = stamp(client, "seen_at")

    client.get("/live/")
    client.get("/", headers={"Sec-Fetch-Mode": "cors", "Sec-Fetch-Dest": "empty"})
    assert stamp(client, "seen_at") == before
    client.get("/", headers={"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"})
    assert stamp(client, "seen_at") > before


def test_a_background_refresh_after_the_idle_timeout_ends_the_session(worker):
    client = signed_in_as(worker)
    age(client, seen_at=IDLE + 1)
    response = client.get("/", headers={"Sec-Fetch-Mode": "cors"})
    assert response.status_code == 302
    assert "_auth_user_id" not in client.session


def test_a_session_ends_at_the_absolute_cap_however_active(worker):
    client = signed_in_as(worker)
    age(client, signed_in_at=settings.INBOX_SESSION_MAX_SECONDS + 1, seen_at=5)
    assert client.get("/").status_code == 302
    entry, = AuditEvent.objects.filter(action=AuditAction.SESSION_EXPIRED)
    assert entry.detail["reason"] == "maximum age"


def test_api_calls_with_an_idle_session_are_refused(worker):
    client = signed_in_as(worker)
    age(client, seen_at=IDLE + 1)
    assert client.get("/api/inbox/queues/").status_code in (401, 403)


@pytest.mark.parametrize(("variables", "expected"), [
    ({}, "28800 43200 900 0 None"),
    ({"INBOX_SESSION_IDLE_SECONDS": "900", "INBOX_SESSION_MAX_SECONDS": "3600",
      "INBOX_REAUTHENTICATE_SECONDS": "300", "INBOX_TRUSTED_PROXY_COUNT": "2",
      "INBOX_TRUSTED_CLIENT_IP_HEADER": "CF-Connecting-IP"}, "900 3600 300 2 CF-Connecting-IP"),
])
def test_the_session_and_proxy_settings_are_read_from_the_environment(variables, expected):
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("INBOX_SESSION", "INBOX_TRUSTED", "INBOX_REAUTH"))}
    env.update(variables)
    script = ("import django; django.setup(); from django.conf import settings as s; "
              "print(s.INBOX_SESSION_IDLE_SECONDS, s.SESSION_COOKIE_AGE, "
              "s.ACCOUNT_REAUTHENTICATION_TIMEOUT, s.ALLAUTH_TRUSTED_PROXY_COUNT, "
              "s.ALLAUTH_TRUSTED_CLIENT_IP_HEADER)")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == expected


def test_an_idle_timeout_longer_than_the_cap_is_refused():
    env = {**os.environ, "INBOX_SESSION_IDLE_SECONDS": "90000",
           "DJANGO_SECRET_KEY": Fernet.generate_key().decode() * 2}
    script = "import django; django.setup()"
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "INBOX_SESSION_IDLE_SECONDS=90000 is longer than INBOX_SESSION_MAX_SECONDS" in (
        result.stderr)


# Re-authentication before admin changes ----------------------------------------------------------


@pytest.fixture
def ana(make_worker, review_skill):
    return make_worker({"invoice-review": 2}, email="ana@example.com")


ROW = {"skill-invoice-review": "5", "availability": "available", "capacity": "3"}


def test_a_fresh_sign_in_lets_an_admin_change_things_at_once(admin, ana):
    client = Client()
    client.post("/accounts/login/", {"login": admin.email, "password": PASSWORD})
    response = client.post(f"/team/skills/{ana.pk}/", ROW)
    assert response.status_code == 302
    assert WorkerSkill.objects.get(worker=ana).proficiency == 5


def test_an_admin_change_long_after_sign_in_asks_for_the_password_then_is_made(admin, ana):
    client = signed_in_as(admin)
    age(client, authenticated_at=settings.ACCOUNT_REAUTHENTICATION_TIMEOUT + 1)
    path = f"/team/skills/{ana.pk}/"

    response = client.post(path, ROW)
    assert response.status_code == 302
    assert response["Location"] == f"/accounts/reauthenticate/?next={path.replace('/', '%2F')}"
    assert WorkerSkill.objects.get(worker=ana).proficiency == 2
    assert client.get("/team/skills/").status_code == 200  # reading needs no password

    wrong = client.post(response["Location"], {"password": "not-it-at-all-7"})
    assert wrong.status_code == 200
    assert WorkerSkill.objects.get(worker=ana).proficiency == 2
    done = client.post(response["Location"], {"password": PASSWORD})
    assert done.status_code == 302
    assert WorkerSkill.objects.get(worker=ana).proficiency == 5  # the change, resumed
    entry, = AuditEvent.objects.filter(action=AuditAction.REAUTHENTICATED)
    assert (entry.actor_id, entry.subject) == (admin.pk, admin.email)
    assert client.post(path, {**ROW, "capacity": "4"}).status_code == 302  # now recent
    ana.refresh_from_db()
    assert ana.capacity == 4


def test_a_django_admin_change_long_after_sign_in_asks_for_the_password(admin):
    client = signed_in_as(admin)
    age(client, authenticated_at=settings.ACCOUNT_REAUTHENTICATION_TIMEOUT + 1)
    assert client.get("/admin/accounts/skill/add/").status_code == 200

    response = client.post("/admin/accounts/skill/add/",
                           {"slug": "tax", "name": "Tax", "dispatch": "pull",
                            "worker_skills-TOTAL_FORMS": "0",
                            "worker_skills-INITIAL_FORMS": "0"})
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/reauthenticate/?next=")
    assert not Skill.objects.filter(slug="tax").exists()


def test_signing_out_of_the_admin_needs_no_password(admin):
    client = signed_in_as(admin)
    age(client, authenticated_at=settings.ACCOUNT_REAUTHENTICATION_TIMEOUT + 1)
    client.post("/admin/logout/")
    assert "_auth_user_id" not in client.session


def test_an_admin_without_a_password_signs_in_again_instead(make_user, ana):
    """An admin who signs in through the identity provider has no password to confirm."""
    admin = make_user(email="sso-admin@example.com", roles=(Role.ADMIN,))
    admin.set_unusable_password()
    admin.save()
    client = signed_in_as(admin)
    age(client, authenticated_at=settings.ACCOUNT_REAUTHENTICATION_TIMEOUT + 1)

    response = client.post(f"/team/skills/{ana.pk}/", ROW, headers={
        "Referer": "http://testserver/team/skills/?after=a"})
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/team/skills/%3Fafter%3Da"
    assert "_auth_user_id" not in client.session
    assert WorkerSkill.objects.get(worker=ana).proficiency == 2


def test_recent_auth_required_guards_any_view(admin, rf):
    """The decorator other pages use (API token creation): stale means confirm first."""
    from allauth.core.exceptions import ReauthenticationRequired
    from django.contrib.sessions.backends.db import SessionStore
    from django.http import HttpResponse

    from accounts.decorators import recent_auth_required

    view = recent_auth_required(lambda request: HttpResponse("made"))
    request = rf.post("/team/tokens/")
    request.user, request.session = admin, SessionStore()
    request.session[sessions.AUTHENTICATED_AT] = (
        time.time() - settings.ACCOUNT_REAUTHENTICATION_TIMEOUT - 1)
    with pytest.raises(ReauthenticationRequired):
        view(request)
    request.session[sessions.AUTHENTICATED_AT] = time.time() - 60
    assert view(request).content == b"made"
