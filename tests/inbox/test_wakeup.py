"""The callbacks' sender's wake-up: PostgreSQL's NOTIFY when an answer is written.

Real PostgreSQL (the trigger of migration 0015, a listening connection of its own), real
commits (transactional tests), and, at the end, the sender's loop in a thread sending a
real execution's answer on the emulator. SQLite has no NOTIFY: its sender polls, which
the last tests check too.
"""

import datetime
import threading
import time

import pytest
from django.db import connection, transaction
from django.utils import timezone

from inbox.loops import loop_run
from inbox.models import Outbox, OutboxKind, OutboxStatus, Task, TaskState
from inbox.services import worker
from inbox.services.admin import outbox_requeue
from inbox.services.callback import outbox_relay
from inbox.wakeup import CHANNEL, LISTEN_MOST_SECONDS, Wakeup, Woken
from tests.sfn import APPROVE, execution_wait, invoice_machine_deploy

POLLING = 0.25


@pytest.fixture
def wakeup():
    wakeup = Wakeup()
    yield wakeup
    wakeup.close()


@pytest.fixture
def listening(wakeup, db) -> Wakeup:
    """A wake-up whose connection listens, with nothing pending."""
    assert wakeup.wait(0) == Woken.LISTENING  # the first wait connects, and says so
    assert wakeup.wait(0) == Woken.TIMEOUT
    return wakeup


def _row(task: Task, *, version: int = 1, status: str = OutboxStatus.PENDING) -> Outbox:
    return Outbox.objects.create(
        task=task, decision_version=version, kind=OutboxKind.SUCCESS, output={"ok": True},
        status=status, next_attempt_at=timezone.now())


def _listeners() -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE query = %s "
                       "AND datname = current_database()", [f"LISTEN {CHANNEL}"])
        return [pid for (pid,) in cursor.fetchall()]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_committed_answer_wakes_the_sender_and_a_rolled_back_one_does_not(
        listening, make_task):
    task = make_task()  # the intake's own writes (a task, its event) tell nothing
    assert listening.wait(0) == Woken.TIMEOUT

    with pytest.raises(RuntimeError), transaction.atomic():
        _row(task)
        raise RuntimeError("rolled back")
    assert listening.wait(0.2) == Woken.TIMEOUT

    _row(task)
    assert listening.wait(30) == Woken.TOLD
    assert listening.wait(0) == Woken.TIMEOUT  # one commit, one wake-up


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_transaction_writing_many_answers_wakes_the_sender_once(listening, make_task):
    tasks = [make_task() for _ in range(3)]
    with transaction.atomic():
        for task in tasks:  # three statements, one transaction
            _row(task)
        Outbox.objects.bulk_create([  # and one statement of two rows
            Outbox(task=task, decision_version=2, kind=OutboxKind.FAILURE, error="E",
                   next_attempt_at=timezone.now()) for task in tasks[:2]])

    assert listening.wait(30) == Woken.TOLD
    assert listening.wait(0) == Woken.TIMEOUT


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_requeued_dead_answer_wakes_the_sender_and_other_updates_do_not(
        listening, make_task):
    task = make_task()
    dead = _row(task, status=OutboxStatus.DEAD)
    assert listening.wait(30) == Woken.TOLD  # its insert
    Outbox.objects.filter(pk=dead.pk).update(last_error="still dead")
    sent = _row(task, version=2)
    assert listening.wait(30) == Woken.TOLD
    Outbox.objects.filter(pk=sent.pk).update(status=OutboxStatus.SENT,
                                             sent_at=timezone.now())
    assert listening.wait(0.2) == Woken.TIMEOUT

    assert outbox_requeue(outbox_id=dead.pk)
    assert listening.wait(30) == Woken.TOLD


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_lost_listening_connection_is_made_again_and_listens(listening, make_task, caplog):
    """A server restart or a killed backend: the wait says so (the caller reads the
    outbox once, since a notification may have been missed), logs it, and the next wait
    listens on a new connection; meanwhile most() falls back to polling."""
    task = make_task()
    [pid] = _listeners()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])

    assert listening.wait(30) == Woken.LISTENING
    assert "listening connection failed" in caplog.text
    assert listening.most(POLLING) == POLLING
    assert listening.wait(30) == Woken.LISTENING
    assert listening.most(POLLING) == LISTEN_MOST_SECONDS
    assert [other for other in _listeners() if other != pid]  # a new connection listens

    _row(task)
    assert listening.wait(30) == Woken.TOLD


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_sender_that_cannot_listen_says_so_once_and_polls(wakeup, monkeypatch, caplog):
    monkeypatch.setitem(connection.settings_dict, "PORT", "1")  # nothing listens there

    assert wakeup.wait(0) == Woken.TIMEOUT
    assert wakeup.wait(0) == Woken.TIMEOUT
    assert caplog.text.count("cannot listen on inbox_outbox") == 1
    assert wakeup.most(POLLING) == POLLING


def test_interrupt_ends_a_wait_at_once_and_only_once(wakeup):
    wakeup.interrupt()
    wakeup.interrupt()
    assert wakeup.wait(30) == Woken.INTERRUPTED
    assert wakeup.wait(0) in (Woken.TIMEOUT, Woken.LISTENING)


def test_without_postgresql_the_sender_polls(wakeup, settings):
    if connection.vendor == "postgresql":
        pytest.skip("SQLite's case: this run uses PostgreSQL")
    assert wakeup.most(POLLING) == POLLING
    assert wakeup.wait(0.01) == Woken.TIMEOUT
    assert wakeup.most(POLLING) == POLLING


# The sender's loop -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def invoice_machine(emulator) -> str:
    return invoice_machine_deploy()


@pytest.mark.emulator
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_sender_sends_an_answer_due_at_once_when_told_not_at_its_next_poll(
        invoice_machine, reviewer, settings, wakeup):
    """The sender's loop as callbacks_run runs it, told to poll only every 60 s: a
    completion with the undo window off is sent as soon as it commits, and interrupt()
    stops the loop in its sleep."""
    from tests.inbox.test_undo import _held

    settings.INBOX_UNDO_SECONDS = 0
    task = _held(invoice_machine, reviewer)
    stop = threading.Event()
    sender = threading.Thread(target=loop_run, args=(
        "callbacks", lambda: outbox_relay(most=wakeup.most(60)), stop),
        kwargs={"what": "sender", "sleep": wakeup.wait})
    sender.start()
    try:
        deadline = time.monotonic() + 30
        while not _listeners() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _listeners(), "the sender did not listen within 30 s"
        time.sleep(0.1)  # its round after listening has begun its long sleep

        worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
        outbox = Outbox.objects.get(task=task)
        while outbox.status == OutboxStatus.PENDING and time.monotonic() < deadline:
            time.sleep(0.01)
            outbox.refresh_from_db()
        # Polling alone would have sent it 60 s after the sender went to sleep.
        assert outbox.status == OutboxStatus.SENT
        assert outbox.sent_at - outbox.created_at < datetime.timedelta(seconds=30)
    finally:
        stop.set()
        wakeup.interrupt()
        sender.join(10)
    assert not sender.is_alive(), "interrupt() did not end the sender's sleep"
    assert Task.objects.get(pk=task.pk).state == TaskState.COMPLETED
    assert execution_wait(execution_arn=task.execution_arn)["status"] == "SUCCEEDED"
