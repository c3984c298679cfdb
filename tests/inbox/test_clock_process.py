"""The clock process: sweeps when deadlines fall due, sleeps until the next, never stops."""

import datetime
import threading

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inbox import loops
from inbox.management.commands import clock_run
from inbox.models import Task, TaskState
from inbox.services import clock as clock_service
from inbox.services.clock import BATCH, deadlines_wait, next_deadline
from inbox.services.worker import task_take_next

SHORT = {"offer": 60, "work": 5, "overall": 3600}


def _seconds(**delta: float) -> datetime.timedelta:
    return datetime.timedelta(**delta)


def test_no_running_clock_means_no_next_deadline(db):
    assert next_deadline() is None


def test_the_next_deadline_is_the_earliest_running_clock(clock, make_task, worker):
    queued = make_task(timeouts=SHORT)
    assert next_deadline() == queued.overall_deadline
    make_task(timeouts=SHORT)
    taken = task_take_next(worker=worker)
    assert next_deadline() == taken.work_deadline == clock.now + _seconds(seconds=5)


def test_the_clock_sleeps_until_the_next_deadline_then_applies_it(clock, make_task, worker):
    make_task(timeouts=SHORT)
    taken = task_take_next(worker=worker)

    assert deadlines_wait(most=30) == 5.0  # the work clock, not the 30 s cap
    assert deadlines_wait(most=2) == 2.0  # a nearer deadline set elsewhere: seen within 2 s
    clock.advance(seconds=5)
    assert deadlines_wait(most=2) == 2.0
    assert Task.objects.get(pk=taken.pk).state == TaskState.QUEUED


def test_a_round_with_nothing_due_reads_the_next_deadline_and_locks_nothing(
    clock, make_task, worker
):
    """Most rounds find nothing due: they cost one read of the three clocks' earliest
    deadlines, not a sweep's transactions."""
    make_task(timeouts=SHORT)
    task_take_next(worker=worker)
    with CaptureQueriesContext(connection) as queries:
        assert deadlines_wait(most=30) == 5.0
    sql = [query["sql"] for query in queries.captured_queries]
    assert len(sql) == 1 and sql[0].startswith("SELECT (SELECT "), sql
    assert sql[0].count("SELECT ") == 4 and "FOR UPDATE" not in sql[0], sql
    clock.advance(seconds=5)
    with CaptureQueriesContext(connection) as queries:
        assert deadlines_wait(most=30) == 30.0  # swept: the overall clock, an hour away
    assert len(queries) > 2  # the earliest read, the sweep's clocks, the earliest again
    assert Task.objects.filter(state=TaskState.QUEUED).count() == 1


def test_with_nothing_running_the_clock_waits_its_longest(db):
    assert deadlines_wait(most=0.5) == 0.5


def test_a_full_batch_is_followed_at_once_by_the_next(clock, make_task, monkeypatch):
    """A backlog is worked off without sleeping between batches."""
    monkeypatch.setattr(clock_service, "BATCH", 2)
    for _ in range(3):
        make_task(timeouts={"offer": 60, "work": 60, "overall": 60})
    clock.advance(seconds=61)
    assert clock_service.deadlines_wait(most=5) == 0.0  # two handled: maybe more are due
    assert clock_service.deadlines_wait(most=5) == 5.0  # the third; nothing else runs
    assert not Task.objects.filter(state=TaskState.QUEUED).exists()
    assert BATCH > 2


@pytest.mark.emulator
def test_one_round_of_each_clock_from_the_command(emulator, clock, make_task, capsys):
    task = make_task(timeouts={"offer": 60, "work": 60, "overall": 60})
    clock.advance(seconds=61)
    call_command("clock_run", "--once")
    assert Task.objects.get(pk=task.pk).state == TaskState.ABORTING
    assert capsys.readouterr().out.splitlines() == [
        "deadlines: one round done", "heartbeats: one round done",
        "upstream: one round done", "executions: one round done"]


def test_the_clock_builds_its_aws_clients_before_its_first_round(db, monkeypatch):
    """Its first DescribeExecution, heartbeat or status poll does not pay for building a
    client (tens of milliseconds of CPU): the process does, as it starts."""
    from processes import aws

    built: list[str] = []
    seen: list[list[str]] = []
    monkeypatch.setattr(aws, "client", lambda *, service, probe=False: built.append(service))

    def step(*_: object, **__: object) -> float:
        seen.append(list(built))
        return 0.0

    for name in ("deadlines_wait", "heartbeats_send", "executions_check", "_upstream"):
        monkeypatch.setattr(clock_run, name, step)
    call_command("clock_run", "--once")
    assert seen == [["stepfunctions", "sqs"]] * 4


def test_a_failing_round_is_logged_and_the_clock_goes_on(transactional_db, caplog, monkeypatch):
    monkeypatch.setattr(loops, "ERROR_PAUSE_SECONDS", 0.01)
    stop = threading.Event()
    rounds: list[int] = []

    def step() -> float:
        rounds.append(1)
        if len(rounds) == 1:
            raise RuntimeError("the database went away")
        stop.set()
        return 0.0

    loops.loop_run("deadlines", step, stop)

    assert len(rounds) == 2
    assert "The deadlines clock failed" in caplog.text
    assert "the database went away" in caplog.text


def test_heartbeats_take_only_their_share_of_the_sendtask_budget(settings, make_task, monkeypatch,
                                                                 clock):
    """Answers first: with half the second's budget taken, heartbeats wait; nothing is lost."""
    from django.core.cache import cache

    from inbox import ratelimit
    from inbox.services.clock import heartbeats_send

    settings.INBOX_SENDTASK_RATE = 4
    settings.INBOX_HEARTBEAT_SHARE_PERCENT = 50
    sent: list[str] = []
    monkeypatch.setattr(clock_service.aws, "task_heartbeat", lambda *, token: sent.append(token))
    monkeypatch.setattr(ratelimit.time, "time", lambda: 1_000_000.5)  # one window throughout
    cache.delete("ratelimit:sendtask:1000000")
    tasks = [make_task(heartbeatSeconds=30) for _ in range(3)]

    result = heartbeats_send(now=clock.now + datetime.timedelta(seconds=10))

    assert result == {"sent": 2, "retry": 0, "expired": 0, "deferred": 1}
    assert len(sent) == 2
    # The answers still have the other half of the window.
    assert [ratelimit.rate_take(name=ratelimit.SENDTASK, limit=4).granted for _ in range(3)] == [
        True, True, False]
    due = Task.objects.filter(pk__in=[t.pk for t in tasks],
                              next_heartbeat_at__lte=clock.now + datetime.timedelta(seconds=10))
    assert due.count() == 1  # the deferred one stays due for the next round


def test_a_lesser_caller_takes_nothing_once_its_ceiling_is_reached(db, monkeypatch):
    from django.core.cache import cache

    from inbox import ratelimit

    monkeypatch.setattr(ratelimit.time, "time", lambda: 2_000_000.5)
    cache.delete("ratelimit:budget:2000000")
    take = ratelimit.rate_take
    assert take(name="budget", limit=3, ceiling=1).granted
    assert not take(name="budget", limit=3, ceiling=1).granted  # nothing taken by this
    assert [take(name="budget", limit=3).granted for _ in range(3)] == [True, True, False]


def test_the_clock_takes_the_niceness_it_is_given_or_says_it_cannot(monkeypatch, caplog):
    """os.nice is recorded, not called: the test process keeps its own priority."""
    calls: list[int] = []

    def nice(increment: int) -> int:
        calls.append(increment)
        if increment < 0:
            raise PermissionError("not permitted")
        return 0

    monkeypatch.setattr(clock_run.os, "nice", nice)
    clock_run._priority(0)
    assert calls == []
    clock_run._priority(5)
    assert calls == [0, 5]
    clock_run._priority(-10)
    assert calls == [0, 5, 0, -10]
    assert "Cannot run the clock at niceness -10" in caplog.text
