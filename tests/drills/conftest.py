"""What the fault drills share: real review tasks, a Celery worker subprocess, a private Redis.

Everything here is real: executions of the invoice process on the session's emulator,
tasks made by the intake, a ``celery -A config worker`` process against the test
database, a ``redis-server`` of the drill's own on a free port.
"""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from accounts.models import User
from accounts.services import skill_ensure
from config.celery import app as celery_app
from inbox.lifecycle import transition
from inbox.models import Outbox, OutboxStatus, Task
from inbox.services.intake import intake_message
from processes import aws
from tests.sfn import APPROVE, SMALL_INVOICE, invoice_machine_deploy, unique

ROOT = Path(__file__).resolve().parents[2]
SETTLED = (OutboxStatus.SENT, OutboxStatus.RECONCILED)


@dataclass
class Review:
    """A review task of a real execution (its token stays in the emulator and the vault)."""

    task: Task
    execution: str


def wait_until(condition: Callable[[], bool], *, timeout: float, what: str,
               every: float = 0.05) -> None:
    """Poll condition until it holds; fail the drill after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        time.sleep(every)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def start_reviews(private_intake) -> Callable[[int], list[Review]]:
    """Return a function starting n invoice executions and taking in their review tasks.

    The machine sends to this test's private intake queue, so every message on it is ours.
    """

    def start(n: int) -> list[Review]:
        skill_ensure(slug="invoice-review", name="Invoice review")
        machine = invoice_machine_deploy()
        executions = {
            aws.execution_start(state_machine_arn=machine, name=unique("drill"),
                                input=SMALL_INVOICE)
            for _ in range(n)
        }
        queue = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
        seen: set[str] = set()
        deadline = time.monotonic() + 60
        while seen != executions:
            assert time.monotonic() < deadline, f"{len(seen)} of {n} envelopes came"
            for message in aws.messages_receive(url=queue, wait_seconds=1):
                body = json.loads(message["Body"])
                outcome = intake_message(message={
                    "MessageId": message.get("MessageId", str(uuid.uuid4())),
                    "Body": message["Body"], "Attributes": {"ApproximateReceiveCount": "1"},
                })
                assert outcome in ("created", "duplicate"), outcome
                aws.message_delete(url=queue, receipt_handle=message["ReceiptHandle"])
                seen.add(body["execution"])
        return [Review(task=Task.objects.get(execution_arn=arn), execution=arn)
                for arn in sorted(executions)]

    return start


def complete(review: Review, worker: User) -> Outbox:
    """Take and complete the review through the lifecycle, as the pages and API do."""
    task = transition(task_id=review.task.pk, action="claim", actor=worker)
    transition(task_id=task.pk, action="complete", actor=worker, answer=APPROVE)
    return Outbox.objects.get(task=review.task)


def task_outcomes(execution: str) -> list[str]:
    """Return the types of the task outcome events in the execution's history."""
    return [e["type"] for e in aws.execution_history(execution_arn=execution)
            if e["type"] in {"TaskSucceeded", "TaskFailed", "TaskTimedOut"}]


# A Celery worker subprocess ---------------------------------------------------------------


def database_url() -> str:
    """Return a DATABASE_URL for the database this test uses (the test database)."""
    db = settings.DATABASES["default"]
    assert db["ENGINE"].endswith("postgresql"), "a worker subprocess needs PostgreSQL"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return (f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:"
            f"{db['PORT'] or 5432}/{db['NAME']}")


class CeleryWorker:
    """``celery -A config worker -B`` in its own process group, logging to a file."""

    def __init__(self, *, log: Path, env: dict[str, str]) -> None:
        self.log = log
        self.env = env
        self.process: subprocess.Popen | None = None

    def start(self, *, ready_timeout: float = 60) -> None:
        offset = self.log.stat().st_size if self.log.exists() else 0
        handle = open(self.log, "a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "config", "worker", "-B",
             "--concurrency=1", "--loglevel=INFO", "--without-gossip", "--without-mingle",
             f"--hostname=drill-{uuid.uuid4().hex[:8]}@%h"],
            cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        handle.close()
        wait_until(lambda: " ready." in self.log.read_text()[offset:] or not self.alive(),
                   timeout=ready_timeout, what="the Celery worker's start", every=0.1)
        assert self.alive(), "the worker exited:\n" + self.log.read_text()[offset:][-3000:]

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker and its pool children at once: no shutdown, no acks."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if not self.alive():
            return
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture
def celery_worker(tmp_path, emulator) -> Iterator[Callable[..., CeleryWorker]]:
    """Return a function making a worker on this test's database and the given broker."""
    workers: list[CeleryWorker] = []

    def make(*, redis_url: str, **extra: str) -> CeleryWorker:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.drills.worker_settings",
            "DATABASE_URL": database_url(),
            "REDIS_URL": redis_url,
            "CELERY_BROKER_URL": redis_url,
            "DRILL_BEAT_SCHEDULE": str(tmp_path / "celerybeat-schedule"),
            **extra,
        }
        env.pop("PYTEST_CURRENT_TEST", None)
        worker = CeleryWorker(log=tmp_path / "worker.log", env=env)
        workers.append(worker)
        return worker

    yield make
    for worker in workers:
        worker.stop()


# Brokers and Redis ---------------------------------------------------------------------


@contextlib.contextmanager
def broker_at(url: str) -> Iterator[None]:
    """Point this process's Celery app (the web's enqueues) at the broker url."""
    previous = celery_app.conf.broker_url

    def reset() -> None:
        # Drop the cached connection and producer pools, built for the old URL.
        celery_app._pool = None
        with contextlib.suppress(AttributeError, KeyError):
            celery_app.__dict__["amqp"]._producer_pool = None

    celery_app.conf.broker_url = url
    reset()
    try:
        yield
    finally:
        celery_app.conf.broker_url = previous
        reset()


class PrivateRedis:
    """A redis-server of the drill's own (never the shared one on 6379)."""

    def __init__(self, *, port: int, directory: Path) -> None:
        self.port = port
        self.directory = directory
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.directory)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        wait_until(self.answers, timeout=10, what=f"redis-server on port {self.port}")

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


@pytest.fixture
def private_redis(tmp_path) -> Iterator[PrivateRedis]:
    redis = PrivateRedis(port=free_port(), directory=tmp_path)
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


def own_connection() -> psycopg.Connection:
    """A psycopg connection of its own (autocommit) to the database Django's uses."""
    params = connection.get_connection_params()
    return psycopg.connect(dbname=params["dbname"], user=params.get("user"),
                           host=params.get("host"), port=params.get("port"),
                           password=params.get("password"), autocommit=True)


def backend_terminate(pid: int) -> None:
    """Kill backend pid from a connection of its own, as a failover or an admin would."""
    with own_connection() as other:
        killed = other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]
    assert killed


@pytest.fixture
def figures(request) -> Callable[..., None]:
    """Return a function recording a drill's figures in test-artifacts/drills.txt."""
    artifacts = Path(os.environ.get("INBOX_TEST_ARTIFACTS", ROOT / "test-artifacts"))

    def record(**values: object) -> None:
        artifacts.mkdir(parents=True, exist_ok=True)
        line = " ".join(f"{name}={value}" for name, value in values.items())
        with open(artifacts / "drills.txt", "a") as handle:
            handle.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {request.node.name} {line}\n")

    return record
