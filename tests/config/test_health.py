"""/healthz and /readyz: open to probes, honest about each dependency, and leak-free."""

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import Client

from config.celery import app as celery_app
from config.health import reason_of

ROOT = Path(__file__).resolve().parents[2]
CHECKS = {"database", "broker", "stepfunctions", "sqs"}


def _closed_port() -> int:
    """Return a loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def broker_url() -> Iterator[None]:
    """Let a test point the Celery app at another broker; the real one comes back after."""
    previous = celery_app.conf.broker_url
    try:
        yield
    finally:
        celery_app.conf.broker_url = previous


def test_healthz_answers_anonymous_callers_without_touching_the_database(
    db, django_assert_num_queries
):
    client = Client()
    with django_assert_num_queries(0):
        response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    assert "no-cache" in response["Cache-Control"]
    # The site itself still asks anonymous callers to sign in.
    assert client.get("/").status_code == 302


def test_readyz_is_ready_when_every_dependency_answers(emulator, db):
    response = Client().get("/readyz")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["status"] == "ok"
    assert set(body["checks"]) == CHECKS
    for name, check in body["checks"].items():
        assert check["ok"] is True, name
        assert isinstance(check["ms"], float)


def test_readyz_fails_naming_aws_when_the_emulator_is_unreachable(emulator, db, settings):
    settings.AWS_ENDPOINT_URL = f"http://127.0.0.1:{_closed_port()}"
    response = Client().get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    checks = body["checks"]
    assert checks["database"]["ok"] is True
    assert checks["broker"]["ok"] is True
    for name in ("stepfunctions", "sqs"):
        assert checks[name]["ok"] is False
        assert "EndpointConnectionError" in checks[name]["error"], checks[name]
    # The probe gives up quickly: one attempt with a one-second connect timeout.
    assert checks["stepfunctions"]["ms"] < 5000


def test_readyz_fails_naming_the_broker_without_leaking_its_password(
    emulator, db, broker_url
):
    celery_app.conf.broker_url = f"redis://:s3cret-broker-pass@127.0.0.1:{_closed_port()}/3"
    response = Client().get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["broker"]["ok"] is False
    assert "OperationalError" in checks["broker"]["error"]
    assert checks["database"]["ok"] is True
    assert checks["stepfunctions"]["ok"] is True
    assert b"s3cret" not in response.content


def test_reason_masks_the_password_of_a_url_in_an_error():
    error = ConnectionError("cannot reach redis://inbox:hunter2-long@cache.internal:6379/0\nmore")
    reason = reason_of(error)
    assert "hunter2" not in reason
    assert reason == "ConnectionError: cannot reach redis://inbox:***@cache.internal:6379/0"


def test_probes_are_not_redirected_to_https_when_the_rest_is(emulator, db, settings):
    settings.SECURE_SSL_REDIRECT = True
    client = Client()  # built after the change: middleware reads settings when loaded
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/metrics").status_code == 301
    assert client.get("/").status_code == 301


def test_a_short_metrics_token_stops_the_configuration(tmp_path):
    env = {
        "PATH": "/usr/bin:/bin", "DJANGO_DEBUG": "true", "INBOX_VAR_DIR": str(tmp_path),
        "INBOX_METRICS_TOKEN": "short-secret-value",
    }
    result = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "INBOX_METRICS_TOKEN is too short" in result.stderr
    assert "short-secret-value" not in result.stderr + result.stdout



@pytest.fixture
def hung_endpoint() -> Iterator[str]:
    """A loopback port that accepts connections and never answers (a hung AWS endpoint)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield f"http://127.0.0.1:{server.getsockname()[1]}"


def test_readyz_answers_503_naming_the_hung_checks_while_the_others_pass(
    emulator, db, settings, hung_endpoint
):
    """Against an endpoint that never answers, the AWS checks are cut off at the deadline
    (they run side by side, so the answer does not wait for each in turn)."""
    settings.AWS_ENDPOINT_URL = hung_endpoint
    response = Client().get("/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["database"]["ok"] is True
    assert checks["broker"]["ok"] is True
    for name in ("stepfunctions", "sqs"):
        assert checks[name] == {"ok": False, "error": "no answer within 1.8 s", "ms": 1800.0}
