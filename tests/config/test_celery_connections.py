"""A Celery worker keeps its database connection from task to task, as a web worker keeps
its own from request to request (CONN_MAX_AGE), and still drops one that is too old or
unusable. Celery's Django fixup alone would close it around every task (config/celery.py).
"""

import time
from types import SimpleNamespace

import pytest
from celery.fixups.django import DjangoWorkerFixup
from celery.signals import task_postrun, task_prerun
from django.db import connection

from config.celery import app


class _Task:
    """What the fixup and our handler read of a task: its request's is_eager (a signal's
    sender must be hashable)."""

    def __init__(self, *, eager: bool) -> None:
        self.request = SimpleNamespace(is_eager=eager)


def _around_a_task(fixup: DjangoWorkerFixup, task: _Task) -> None:
    """What a worker runs before and after each task: the fixup's handlers, then the
    signals' receivers (ours among them)."""
    fixup.on_task_prerun(sender=task)
    task_prerun.send(sender=task, task=task, task_id="t", args=(), kwargs={})
    fixup.on_task_postrun(sender=task)
    task_postrun.send(sender=task, task=task, task_id="t", args=(), kwargs={},
                      retval=None, state="SUCCESS")


@pytest.mark.postgres
def test_a_task_keeps_the_worker_s_connection(transactional_db):
    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    connection.close_at = time.monotonic() + 60  # as CONN_MAX_AGE=60 set it on connect
    before = connection.connection
    for _ in range(3):
        _around_a_task(fixup, _Task(eager=False))
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    assert connection.connection is before


@pytest.mark.postgres
def test_a_connection_past_its_age_is_closed_after_a_task(transactional_db):
    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    connection.close_at = time.monotonic() - 1  # CONN_MAX_AGE elapsed
    _around_a_task(fixup, _Task(eager=False))
    assert connection.connection is None


@pytest.mark.postgres
def test_a_connection_left_in_error_and_unusable_is_closed(transactional_db):
    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    connection.close_at = time.monotonic() + 60
    connection.connection.close()  # the server went away under it
    connection.errors_occurred = True  # as Django marks it when a statement failed
    _around_a_task(fixup, _Task(eager=False))
    assert connection.connection is None


def test_an_eager_task_leaves_its_caller_s_transaction_open(db):
    """Run eagerly (inside the caller, here the test's transaction) nothing is closed."""
    fixup = DjangoWorkerFixup(app)
    connection.ensure_connection()
    before = connection.connection
    _around_a_task(fixup, _Task(eager=True))
    assert connection.connection is before
    assert connection.in_atomic_block



def test_a_worker_process_builds_its_aws_clients_as_it_starts(monkeypatch):
    from celery.signals import worker_process_init

    from processes import aws

    built: list[str] = []
    real = aws.client
    monkeypatch.setattr(aws, "client", lambda *, service, probe=False: (
        built.append(service), real(service=service, probe=probe))[1])
    worker_process_init.send(sender=None)
    assert sorted(built) == ["sqs", "stepfunctions"]
