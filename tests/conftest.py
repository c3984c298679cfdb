import datetime
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.utils import timezone

from accounts.models import Dispatch, User
from accounts.roles import Role
from accounts.services import skill_ensure, user_create, worker_skill_set
from config.celery import app as celery_app
from inbox.models import Task
from inbox.tokens import token_digest
from processes import aws
from tests.factories import envelope, sqs_message
from tests.promtool import PROMTOOL
from tests.sfn import unique

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    vendor = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    if vendor != "postgresql":
        skip_pg = pytest.mark.skip(
            reason="needs PostgreSQL: this run uses SQLite; set DATABASE_URL=postgres://... "
            "(as .ci/run does) to run it"
        )
        for item in items:
            if "postgres" in item.keywords:
                item.add_marker(skip_pg)
    if not os.path.exists(CHROMIUM):
        skip_browser = pytest.mark.skip(
            reason=f"needs Debian's Chromium at {CHROMIUM}: apt-get install chromium "
            "(.ci/run installs it)"
        )
        for item in items:
            if "browser" in item.keywords:
                item.add_marker(skip_browser)
    if not os.path.exists(PROMTOOL):
        skip_promtool = pytest.mark.skip(
            reason=f"needs promtool at {PROMTOOL}, from Debian's prometheus package: "
            "apt-get install --no-install-recommends prometheus (.ci/run installs it)"
        )
        for item in items:
            if "promtool" in item.keywords:
                item.add_marker(skip_promtool)


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [
        f"database: {settings.DATABASES['default']['ENGINE']}",
        f"celery broker: {settings.CELERY_BROKER_URL.split('@')[-1]}",
        f"emulator: {settings.AWS_ENDPOINT_URL}",
    ]


@pytest.fixture(scope="session", autouse=True)
def collected_static() -> None:
    """Collect static files once, so pages render with the production storage."""
    from django.core.management import call_command

    call_command("collectstatic", "--noinput", verbosity=0)


@pytest.fixture(scope="session")
def emulator() -> Iterator[str]:
    """Start the local Step Functions emulator with the project's own command."""
    process = subprocess.Popen(
        [sys.executable, "manage.py", "emulator"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 90
    seen: list[str] = []
    assert process.stdout is not None
    while True:
        line = process.stdout.readline()
        if line:
            seen.append(line)
        if "Emulator ready" in line:
            break
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise RuntimeError("The emulator did not start:\n" + "".join(seen))
    # Keep draining its output, so a chatty emulator never blocks on a full pipe.
    threading.Thread(target=process.stdout.read, daemon=True).start()
    try:
        yield settings.AWS_ENDPOINT_URL
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


class Clock:
    """A clock that stands still until the test moves it."""

    def __init__(self, start: datetime.datetime) -> None:
        self.now = start

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, **delta: float) -> datetime.datetime:
        self.now += datetime.timedelta(**delta)
        return self.now


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """Stop django.utils.timezone.now, which every service reads, at a whole second.

    Tests move it with clock.advance(seconds=...) instead of sleeping.
    """
    controlled = Clock(timezone.now().replace(microsecond=0))
    monkeypatch.setattr(timezone, "now", controlled)
    return controlled


@pytest.fixture
def redis_cache_of() -> Iterator[Any]:
    """Return make(backend): a Redis cache of that backend class on REDIS_URL (CI's real
    Redis) with a key prefix of its own, whose keys (only those: no FLUSHDB of the suite's
    database) are deleted after the test; skipped, with a message, where no Redis is set."""
    url = os.environ.get("REDIS_URL")
    if not url:
        pytest.skip("needs Redis: REDIS_URL is not set (CI sets it)")
    made: list[tuple[Any, str]] = []

    def make(backend: type) -> Any:
        prefix = unique("test-redis")
        cache = backend(url, {"KEY_PREFIX": prefix})
        made.append((cache, prefix))
        return cache

    yield make
    for cache, prefix in made:
        client = cache._cache.get_client(write=True)
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)


@pytest.fixture
def make_user(db):
    """Return a function that creates a user with roles through the real service."""
    counter = iter(range(1, 10_000))

    def make(*, roles: tuple[Role, ...] = (Role.WORKER,), email: str | None = None,
             password: str = "a-long-test-password-1") -> User:
        address = email or f"user{next(counter)}@example.com"
        return user_create(email=address, password=password, roles=roles)

    return make


@pytest.fixture
def db_vendor(db) -> str:
    return connection.vendor


@pytest.fixture
def review_skill(db):
    return skill_ensure(slug="invoice-review", name="Invoice review")


@pytest.fixture
def approval_skill(db):
    return skill_ensure(slug="finance-approval", name="Finance approval")


@pytest.fixture
def check_skill(db):
    return skill_ensure(slug="document-check", name="Document check", dispatch=Dispatch.PUSH)


@pytest.fixture
def make_task(db, review_skill):
    """Return a function that brings a task in through the real intake path."""
    from inbox.services.intake import intake_message

    def make(**overrides: Any) -> Task:
        body = envelope(**overrides)
        outcome = intake_message(message=sqs_message(body))
        assert outcome == "created", outcome
        return Task.objects.get(token_digest=token_digest(body["taskToken"]))

    return make


@pytest.fixture
def make_worker(make_user):
    """Return a function making a worker holding skills {slug: proficiency}."""
    from accounts.models import Skill

    def make(skills: dict[str, int] | None = None, *, roles=(Role.WORKER,), **kwargs) -> Any:
        worker = make_user(roles=roles, **kwargs)
        for slug, proficiency in (skills or {}).items():
            worker_skill_set(worker=worker, skill=Skill.objects.get(slug=slug),
                             proficiency=proficiency)
        return worker

    return make


@pytest.fixture
def worker(make_worker, review_skill):
    """An invoice reviewer at proficiency 3 (the worker of most page tests)."""
    return make_worker({"invoice-review": 3})


@pytest.fixture
def supervisor(make_worker, review_skill):
    """A supervisor who also reviews invoices at proficiency 3."""
    return make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))


@pytest.fixture
def admin(make_user) -> User:
    """An admin: manages skills and users, sees the team pages, may supervise every task."""
    return make_user(roles=(Role.ADMIN,), email="root@example.com")


@pytest.fixture
def reviewer(make_user) -> User:
    """A user holding invoice-review at 3, made without make_worker's role (callbacks)."""
    worker = make_user()
    skill = skill_ensure(slug="invoice-review", name="Invoice review")
    worker_skill_set(worker=worker, skill=skill, proficiency=3)
    return worker


@pytest.fixture
def api_token(db):
    """Return a function making an API token for a user (the real service): the secret.

    scope defaults to the widest the user's roles allow; the token is made by the user.
    """
    from accounts.api_tokens import api_scopes_allowed, api_token_create

    def make(user: User, *, scope: str | None = None, days: int | None = None,
             name: str = "test") -> str:
        scope = scope or api_scopes_allowed(user=user)[-1]
        _, secret = api_token_create(user=user, name=name, scope=scope, days=days, actor=user)
        return secret

    return make


@pytest.fixture
def api_client(api_token):
    """Return a function giving a DRF test client that sends an API token of the user."""
    from rest_framework.test import APIClient

    def signed_in(user: User, *, scope: str | None = None, **kwargs: Any) -> APIClient:
        client = APIClient(**kwargs)
        client.credentials(HTTP_AUTHORIZATION=f"Token {api_token(user, scope=scope)}")
        return client

    return signed_in


@pytest.fixture
def browser_for():
    """Return a function giving a test client signed in as the user."""

    def signed_in(user, **kwargs) -> Client:
        client = Client(**kwargs)
        client.force_login(user)
        return client

    return signed_in


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Run Celery tasks in the caller, as soon as they are enqueued."""
    previous = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    try:
        yield
    finally:
        celery_app.conf.task_always_eager = previous


@pytest.fixture
def private_intake(emulator, settings) -> None:
    """A queue of this test's own, so other tests' messages never reach its intake."""
    settings.INBOX_INTAKE_QUEUE = unique("intake")
    settings.INBOX_INTAKE_DLQ = f"{settings.INBOX_INTAKE_QUEUE}-dlq"
    aws.intake_queues_ensure()


@pytest.fixture
def take_next_in_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """Take next by the Python path of inbox.services.worker, on PostgreSQL too.

    (On PostgreSQL the database takes in one round trip, inbox.lifecycle.take_next_applied;
    the Python path is SQLite's, and PostgreSQL's when the database took nothing.)
    """
    monkeypatch.setattr("inbox.services.worker.take_next_applied", lambda **kwargs: None)


@pytest.fixture(autouse=True)
def deployed_specs_forgotten() -> Iterator[None]:
    """Each test deploys its own versions: forget what an earlier test's versions were.

    (processes.selectors keeps each deployed version once read: in production a version
    never changes; across tests the same name and version is deployed afresh.)
    """
    from processes import selectors

    selectors._VERSIONS.clear()
    yield
    selectors._VERSIONS.clear()


@pytest.fixture
def asgi_server(transactional_db) -> Iterator[str]:
    """The site served over ASGI by uvicorn, in a thread of this process, on this test's
    database: what the live stream needs (pytest-django's live_server speaks WSGI)."""
    import socket
    import threading
    import time

    import uvicorn

    from config.asgi import application

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(application, host="127.0.0.1", port=port,
                                           log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, name="asgi-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
    _wsgi_threads_disconnect()


def _wsgi_threads_disconnect() -> None:
    """Close the database connections the ASGI entry's WSGI threads keep between requests
    (as a web process does, CONN_MAX_AGE): left open, they outlive the test's server and
    the test database cannot be dropped at the end of the run ("being accessed by other
    users"). One job per thread the pool may have, each held at a barrier until all run,
    so that every thread runs one."""
    import threading

    from django.db import connections

    from config.asgi import _threads, requests

    count = _threads()
    barrier = threading.Barrier(count)

    def disconnect() -> None:
        connections.close_all()
        barrier.wait(timeout=10)

    for job in [requests.executor.submit(disconnect) for _ in range(count)]:
        job.result(timeout=15)
