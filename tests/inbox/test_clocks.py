"""The clocks of a task: offer, work and overall timeouts, escalation, heartbeats,
executions that ended upstream, and what supervisors do about tasks that ran out.

Tasks enter through the real intake path (synthetic envelopes, or real executions on the
emulator). Time is not waited for: the sweeper and the heartbeat sender take ``now=``,
and the few rules that read the clock themselves (when a deadline starts, the re-offer
cool-down) run under ``clock``, a controllable clock. The only real waits are the
emulator's own heartbeat clock of a few seconds.
"""

import datetime
import json
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from botocore.exceptions import ClientError
from django.core import mail
from django.utils import timezone

from accounts.models import Availability
from accounts.roles import Role
from accounts.services import worker_set_availability, worker_set_capacity
from config.errors import Conflict, NotFound
from inbox.board import supervised_tasks
from inbox.history import events_verify
from inbox.lifecycle import StaleVersion, transition
from inbox.models import (
    Outbox,
    OutboxKind,
    OutboxStatus,
    Task,
    TaskEvent,
    TaskPass,
    TaskState,
)
from inbox.notifications import notify
from inbox.services import supervisor as supervisor_service
from inbox.services.callback import callback_send
from inbox.services.clock import deadlines_sweep, executions_check, heartbeats_send, overall_timeout
from inbox.services.dispatcher import REOFFER_COOLDOWN, task_dispatch
from inbox.services.intake import intake_poll
from inbox.services.supervisor import (
    task_abort,
    task_extend,
    task_reassign,
    task_return,
    tasks_bulk,
)
from inbox.services.worker import task_accept, task_claim, task_complete, task_take_next
from processes import aws
from processes.services import process_deploy, process_start
from tests.concurrency import race
from tests.sfn import execution_wait, unique

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
INVOICE = {"invoice_id": "INV-90", "supplier": "Initech", "amount": 800, "currency": "EUR"}
APPROVE = {"decision": "approve", "comment": "fine"}
SHORT = {"offer": 60, "work": 600, "overall": 3600}
ESCALATING = {"onTimeout": "escalate",
              "timeouts": {"offer": 60, "work": 600, "overall": 3600, "escalation": 7200}}


# Fixtures and helpers ---------------------------------------------------------------------


def _seconds(**delta: float) -> datetime.timedelta:
    return datetime.timedelta(**delta)


def _actions(task: Task) -> list[str]:
    return list(TaskEvent.objects.filter(task=task).order_by("version")
                .values_list("action", flat=True))


def _last_event(task: Task) -> TaskEvent:
    return TaskEvent.objects.filter(task=task).order_by("-version").first()


def _fresh(task: Task) -> Task:
    task.refresh_from_db()
    return task


def _nothing_handled(result: dict[str, int]) -> bool:
    return result == {"failed": 0, "offer": 0, "work": 0, "overall": 0}


def _intake(*, execution_arn: str, timeout: float = 20) -> Task:
    """Poll the (private) intake queue until the execution's task has come in."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        intake_poll(wait_seconds=1, budget_seconds=2)
        task = Task.objects.filter(execution_arn=execution_arn).first()
        if task is not None:
            return task
    raise AssertionError(f"no task of {execution_arn} arrived within {timeout} s")


def _heartbeat_spec(*, name: str, heartbeat: int) -> str:
    """A one-stage process whose human stage has a short HeartbeatSeconds."""
    return f"""
process: {name}
version: 1
stages:
  - id: check
    kind: human
    skill: invoice-review
    title: "Check {{ref}}"
    form: approve-reject
    timeouts: {{offer: 30, work: 60, overall: 120}}
    heartbeat: {heartbeat}
    show: [ref]
  - id: done
    kind: succeed
"""


def _start_heartbeat_process(*, heartbeat: int) -> tuple[str, Task]:
    name = unique("hb")
    process_deploy(text=_heartbeat_spec(name=name, heartbeat=heartbeat), source="test")
    execution, _ = process_start(name=name, input={"ref": "R-1"}, business_key=unique("R"))
    return execution.execution_arn, _intake(execution_arn=execution.execution_arn)


def _beat_for(*, seconds: float) -> int:
    """Run the heartbeat sender as beat would, only faster, for seconds; return beats sent."""
    sent = 0
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        sent += heartbeats_send()["sent"]
        time.sleep(0.2)
    return sent


# Clock rules -------------------------------------------------------------------------------


def test_intake_starts_the_overall_clock_from_the_envelope_seconds(clock, make_task):
    """The overall clock runs from when the task entered the inbox; nothing else runs yet."""
    task = make_task(timeouts={"offer": 60, "work": 600, "overall": 3600})
    assert task.overall_deadline == clock.now + _seconds(seconds=3600)
    assert (task.offer_deadline, task.work_deadline, task.next_heartbeat_at) == (None, None, None)


def test_an_offer_starts_the_offer_clock_and_accepting_starts_the_work_clock(
    clock, make_task, make_worker, check_skill
):
    """Offer and work deadlines are the envelope's seconds from the offer and the accept."""
    worker = make_worker({"document-check": 3})
    task = make_task(skill="document-check", timeouts=SHORT)
    offered_at = clock.advance(seconds=5)
    offered = task_dispatch(task_id=task.pk)
    assert offered.offer_deadline == offered_at + _seconds(seconds=60)
    assert offered.work_deadline is None
    accepted_at = clock.advance(seconds=20)
    accepted = task_accept(worker=worker, task_id=task.pk)
    assert accepted.work_deadline == accepted_at + _seconds(seconds=600)
    assert accepted.offer_deadline is None
    assert accepted.overall_deadline == task.overall_deadline  # unchanged since intake


def test_taking_a_pull_task_starts_its_work_clock(clock, make_task, make_worker):
    """Take next starts the work clock at the moment of the take."""
    worker = make_worker({"invoice-review": 3})
    make_task(timeouts=SHORT)
    taken_at = clock.advance(minutes=3)
    taken = task_take_next(worker=worker)
    assert taken.work_deadline == taken_at + _seconds(seconds=600)


def test_nothing_is_due_before_its_deadline_and_each_clock_fires_at_its_deadline(
    clock, make_task, make_worker, check_skill
):
    """A sweep a second before a deadline changes nothing; at the deadline, that clock fires."""
    worker = make_worker({"invoice-review": 3, "document-check": 3})
    offered = task_dispatch(
        task_id=make_task(skill="document-check", timeouts=SHORT).pk)
    make_task(timeouts=SHORT)
    taken = task_take_next(worker=worker)
    waiting = make_task(timeouts={"offer": 60, "work": 600, "overall": 1200})
    due = [
        (offered.offer_deadline, "offer", offered),
        (taken.work_deadline, "work", taken),
        (waiting.overall_deadline, "overall", waiting),
    ]
    assert [deadline - clock.now for deadline, _, _ in due] == [
        _seconds(seconds=60), _seconds(seconds=600), _seconds(seconds=1200)]

    for deadline, clock_name, task in due:
        before = {t.pk: (t.state, t.version) for t in Task.objects.all()}
        assert _nothing_handled(deadlines_sweep(now=deadline - _seconds(seconds=1)))
        assert {t.pk: (t.state, t.version) for t in Task.objects.all()} == before
        result = deadlines_sweep(now=deadline)
        assert result[clock_name] >= 1 and result["failed"] == 0, clock_name
        assert _fresh(task).state != before[task.pk][0], clock_name


# Each timeout applies once ------------------------------------------------------------------


def test_sweeping_twice_for_the_same_due_set_applies_each_timeout_once(
    make_task, make_worker, check_skill, supervisor
):
    """A second sweep at the same moment finds nothing left to do: no event, no outbox row twice."""
    worker = make_worker({"invoice-review": 3, "document-check": 3})
    worker_set_capacity(worker=worker, capacity=20)
    offered = [task_dispatch(task_id=make_task(skill="document-check").pk)
               for _ in range(3)]
    for _ in range(3):
        make_task()
    taken = [task_take_next(worker=worker) for _ in range(3)]
    waiting = [make_task() for _ in range(3)]
    escalating = [make_task(**ESCALATING) for _ in range(2)]
    now = timezone.now() + _seconds(days=2)

    first = deadlines_sweep(now=now)
    second = deadlines_sweep(now=now)

    assert first == {"failed": 0, "offer": 3, "work": 3, "overall": 11}
    assert _nothing_handled(second)
    per_task = Counter(
        TaskEvent.objects.exclude(action__in=["receive", "offer", "take_next"])
        .values_list("task_id", "action"))
    assert set(per_task.values()) == {1}
    assert Outbox.objects.count() == 9
    assert set(Outbox.objects.values_list("task_id", flat=True)) == {
        t.pk for t in [*offered, *taken, *waiting]}
    for task in escalating:
        # Escalated at the sweep's moment: the escalation clock runs from there.
        assert _fresh(task).state == TaskState.ESCALATED
        assert task.overall_deadline == now + _seconds(seconds=7200)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_four_sweepers_at_once_apply_each_timeout_once(make_task, make_worker, check_skill,
                                                       review_skill):
    """Sweepers racing over the same due rows (SKIP LOCKED, small batches) never double up.

    On-commit enqueues (re-offers, callbacks) go to this run's broker; nothing consumes them.
    """
    worker = make_worker({"invoice-review": 3, "document-check": 3})
    worker_set_capacity(worker=worker, capacity=40)
    offered = [task_dispatch(task_id=make_task(skill="document-check").pk)
               for _ in range(12)]
    for _ in range(12):
        make_task()
    taken = [task_take_next(worker=worker) for _ in range(12)]
    waiting = [make_task() for _ in range(12)]
    escalating = [make_task(**ESCALATING) for _ in range(6)]
    assert {t.state for t in offered} == {TaskState.OFFERED}
    now = timezone.now() + _seconds(days=2)

    def sweep_until_done(_: int) -> Counter:
        handled: Counter = Counter()
        for _round in range(100):
            result = deadlines_sweep(batch=4, now=now)
            handled.update(result)
            if result["offer"] + result["work"] + result["overall"] == 0:
                break
        return handled

    results, errors = race(sweep_until_done, range(4))

    assert errors == []
    total = sum(results, Counter())
    assert (total["offer"], total["work"], total["overall"], total["failed"]) == (12, 12, 42, 0)
    per_task = Counter(
        TaskEvent.objects.filter(action__in=["offer_timeout", "work_timeout",
                                             "overall_timeout", "escalate"])
        .values_list("task_id", "action"))
    assert set(per_task.values()) == {1}
    assert Counter(action for _task, action in per_task) == {
        "offer_timeout": 12, "work_timeout": 12, "overall_timeout": 36, "escalate": 6}
    assert Outbox.objects.count() == 36
    assert len(set(Outbox.objects.values_list("task_id", flat=True))) == 36
    assert Task.objects.filter(pk__in=[t.pk for t in escalating],
                               state=TaskState.ESCALATED).count() == 6
    assert Task.objects.filter(pk__in=[t.pk for t in [*offered, *taken, *waiting]],
                               state=TaskState.ABORTING).count() == 36


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_of_eight_racing_timeouts_for_one_seen_version_exactly_one_applies(make_task):
    """Sweepers that read the same due row (no SKIP LOCKED between them) abort it once.

    Each handler is conditioned on the version its sweeper read: the row lock makes the
    others wait, and then their version is stale.
    """
    task = make_task()

    def abort(_: int) -> Task:
        return overall_timeout(task_id=task.pk, version=task.version)

    winners, errors = race(abort, range(8))

    assert [w.state for w in winners] == [TaskState.ABORTING]
    assert len(errors) == 7 and all(isinstance(e, StaleVersion) for e in errors)
    assert _actions(task) == ["receive", "overall_timeout"]
    assert Outbox.objects.filter(task=task).count() == 1


def test_a_timeout_for_a_version_that_has_moved_on_changes_nothing(make_task, make_worker):
    """A worker accepted (or took) the task after the sweeper read it: no timeout applies."""
    worker = make_worker({"invoice-review": 3})
    task = make_task()
    seen = task.version
    task_take_next(worker=worker)
    with pytest.raises(StaleVersion):
        overall_timeout(task_id=task.pk, version=seen)
    assert _fresh(task).state == TaskState.IN_PROGRESS
    assert not Outbox.objects.exists()


# Sweeping in batches -----------------------------------------------------------------------


# Waiting tasks whose overall clock (20 min) runs out before the others' (a day).
WAITING = {"timeouts": {"offer": 300, "work": 1800, "overall": 1200}}
WAITING_ESCALATING = {"onTimeout": "escalate",
                      "timeouts": {"offer": 300, "work": 1800, "overall": 1200,
                                   "escalation": 7200}}


def _due_on_each_clock(count: int, *, make_task, worker) -> dict[str, list[Task]]:
    """count tasks due on each clock an hour from now, and no other clock of theirs:
    offers, held tasks, waiting tasks (a third escalate by policy), through the services."""
    offered = [task_dispatch(task_id=make_task(skill="document-check").pk)
               for _ in range(count)]
    for _ in range(count):
        make_task()
    taken = [task_take_next(worker=worker) for _ in range(count)]
    waiting = [make_task(**(WAITING_ESCALATING if number % 3 == 0 else WAITING))
               for number in range(count)]
    assert {task.state for task in offered} == {TaskState.OFFERED}
    return {"offer": offered, "work": taken, "overall": waiting}


@pytest.fixture
def sweep_worker(make_worker, check_skill):
    """A worker of both skills with room to hold every task these tests take."""
    worker = make_worker({"invoice-review": 3, "document-check": 3})
    worker_set_capacity(worker=worker, capacity=100)
    return worker


def _timeouts_per_task() -> Counter:
    return Counter(TaskEvent.objects.filter(
        action__in=["offer_timeout", "work_timeout", "overall_timeout", "escalate"])
        .values_list("task_id", flat=True))


def test_a_backlog_over_the_batch_is_swept_in_batches_each_deadline_once(
    make_task, sweep_worker
):
    """Seven due per clock, three per sweep: three sweeps handle each once, chains intact."""
    due = _due_on_each_clock(7, make_task=make_task, worker=sweep_worker)
    now = timezone.now() + _seconds(hours=1)

    results = [deadlines_sweep(batch=3, now=now) for _ in range(4)]

    assert results == [{"failed": 0, "offer": 3, "work": 3, "overall": 3}] * 2 + [
        {"failed": 0, "offer": 1, "work": 1, "overall": 1},
        {"failed": 0, "offer": 0, "work": 0, "overall": 0}]
    every = [task for tasks in due.values() for task in tasks]
    assert _timeouts_per_task() == {task.pk: 1 for task in every}
    for task in every:
        assert events_verify(task=task) is None
    assert [_fresh(task).state for task in due["offer"] + due["work"]] == [TaskState.QUEUED] * 14
    assert Counter(_fresh(task).state for task in due["overall"]) == {
        TaskState.ESCALATED: 3, TaskState.ABORTING: 4}
    assert Outbox.objects.count() == 4
    escalated = next(task for task in due["overall"] if task.state == TaskState.ESCALATED)
    assert _last_event(escalated).reason == (
        "The overall clock ran out; the supervisors have the escalation clock to act.")
    assert escalated.overall_deadline == now + _seconds(seconds=7200)
    aborted = next(task for task in due["overall"] if task.state == TaskState.ABORTING)
    assert _last_event(aborted).reason == "The overall clock ran out (20 min)."
    lapsed = due["offer"][0]
    assert TaskPass.objects.filter(task=lapsed, why=TaskPass.Why.LAPSED).count() == 1


def test_the_statements_of_a_sweep_do_not_grow_with_the_rows_due(make_task, sweep_worker):
    """Five due per clock or fifty: the sweep sends the same number of statements."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for count in (5, 50):
        # The first round's tasks, queued again or escalated, are not due in the second.
        _due_on_each_clock(count, make_task=make_task, worker=sweep_worker)
        with CaptureQueriesContext(connection) as queries:
            result = deadlines_sweep(now=timezone.now() + _seconds(hours=1))
        assert result == {"failed": 0, "offer": count, "work": count, "overall": count}
        counts.append(len(queries))
    assert counts[0] == counts[1], counts


def test_the_effects_of_a_batch_run_after_commit_each_task_once_in_one_message(
    make_task, sweep_worker, monkeypatch, django_capture_on_commit_callbacks
):
    """Each abort's outbox row is left due for the callbacks' sender, each lapse in a push
    queue is offered again, each escalation mails the supervisors; a pull queue's task waits
    for a take. The batch's offers go as one message (inbox.effects.batched); its callbacks
    as none (the rows are the sender's)."""
    from inbox import effects

    sent: list[tuple] = []
    monkeypatch.setattr(effects, "enqueue", lambda name, *arguments: sent.append((name,
                                                                                   arguments)))
    due = _due_on_each_clock(3, make_task=make_task, worker=sweep_worker)
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        deadlines_sweep(now=timezone.now() + _seconds(hours=1))
    assert Counter(name for name, _ in sent) == {
        "inbox.tasks.dispatch_many_task": 1, "inbox.tasks.notify_task": 1}
    [offered] = [arguments[0] for name, arguments in sent if name.endswith("dispatch_many_task")]
    assert sorted(offered) == sorted(str(task.pk) for task in due["offer"])
    outbox = Outbox.objects.filter(status=OutboxStatus.PENDING,
                                   next_attempt_at__lte=timezone.now())
    assert len(outbox) == 2 and {row.task_id for row in outbox} == set(
        Task.objects.filter(state=TaskState.ABORTING).values_list("pk", flat=True))


def test_one_broken_task_fails_alone_and_the_rest_of_its_batch_is_handled(
    make_task, sweep_worker, monkeypatch, caplog
):
    """A change that fails for one task fails the batch; its rows are then applied one at
    a time, the broken one logged and left due.

    On PostgreSQL the database applies the batch (inbox.lifecycle_sql): a trigger refuses
    the poisoned task's event, whichever path writes it. Elsewhere the Python change is
    patched to raise for it (no real row makes it fail).
    """
    import dataclasses

    from django.db import connection

    from inbox import lifecycle

    due = _due_on_each_clock(4, make_task=make_task, worker=sweep_worker)
    poison = due["work"][1]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"""
                CREATE FUNCTION test_poison() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.task_id = '{poison.pk}' THEN RAISE EXCEPTION 'a broken row'; END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER test_poison BEFORE INSERT ON inbox_taskevent
                    FOR EACH ROW EXECUTE FUNCTION test_poison();""")
        broken = "a broken row"
    else:
        row = lifecycle.TRANSITIONS["work_timeout"]

        def breaks_on_poison(task, step):
            if task.pk == poison.pk:
                raise RuntimeError("a broken row")
            return row.change(task, step)

        monkeypatch.setitem(lifecycle.TRANSITIONS, "work_timeout",
                            dataclasses.replace(row, change=breaks_on_poison))
        broken = "RuntimeError: a broken row"
    now = timezone.now() + _seconds(hours=1)

    result = deadlines_sweep(now=now)

    assert result == {"failed": 1, "offer": 4, "work": 3, "overall": 4}
    assert _fresh(poison).state == TaskState.IN_PROGRESS
    assert _timeouts_per_task() == {
        task.pk: 1 for tasks in due.values() for task in tasks if task.pk != poison.pk}
    for task in due["work"]:
        assert events_verify(task=task) is None
    failures = [record for record in caplog.records if record.levelname == "ERROR"]
    assert [record.getMessage() for record in failures] == [
        "A batch of work timeouts failed; applying them one at a time",
        f"The work timeout of task {poison.pk} failed"]
    # With the traceback (the redaction filter keeps it as the record's text).
    assert all(broken in record.exc_text for record in failures)
    # Still due: the next sweep tries it again, and says so again.
    assert deadlines_sweep(now=now) == {"failed": 1, "offer": 0, "work": 0, "overall": 0}


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_sweepers_over_a_backlog_apply_each_timeout_once(make_task, make_worker,
                                                            check_skill, review_skill):
    """Two sweepers at once over batches of five (SKIP LOCKED): each deadline once, every
    chain intact."""
    worker = make_worker({"invoice-review": 3, "document-check": 3})
    worker_set_capacity(worker=worker, capacity=100)
    due = _due_on_each_clock(15, make_task=make_task, worker=worker)
    now = timezone.now() + _seconds(hours=1)

    def sweep_until_done(_: int) -> Counter:
        handled: Counter = Counter()
        for _round in range(100):
            result = deadlines_sweep(batch=5, now=now)
            handled.update(result)
            if result["offer"] + result["work"] + result["overall"] == 0:
                break
        return handled

    results, errors = race(sweep_until_done, range(2))

    assert errors == []
    total = sum(results, Counter())
    assert (total["offer"], total["work"], total["overall"], total["failed"]) == (15, 15, 15, 0)
    every = [task for tasks in due.values() for task in tasks]
    assert _timeouts_per_task() == {task.pk: 1 for task in every}
    for task in every:
        assert events_verify(task=task) is None
    assert Outbox.objects.count() == 10


# Offer timeout ------------------------------------------------------------------------------


def test_push_task_nobody_accepts_is_offered_to_a_second_worker_after_its_offer_timeout(
    make_task, make_worker, check_skill, eager_celery, django_capture_on_commit_callbacks
):
    """The lapsed offer goes to the next worker, who is told; the first is passed over.

    The re-offer is dispatched on commit through Celery. The test runs those on-commit
    callbacks with Celery eager, so the real wiring (lapse -> on-commit enqueue ->
    dispatch_task -> offer -> on-commit notice -> notify_task) is what is tested, not a
    direct call that would pass even if the lapse forgot to dispatch.
    """
    ana = make_worker({"document-check": 3}, email="ana@example.com")
    ben = make_worker({"document-check": 3}, email="ben@example.com")
    with django_capture_on_commit_callbacks(execute=True):
        task = make_task(skill="document-check", timeouts=SHORT)
    task = _fresh(task)
    assert (task.state, task.assignee) == (TaskState.OFFERED, ana)
    assert [m.to for m in mail.outbox] == [["ana@example.com"]]

    assert _nothing_handled(deadlines_sweep(now=task.offer_deadline - _seconds(seconds=1)))
    with django_capture_on_commit_callbacks(execute=True):
        result = deadlines_sweep(now=task.offer_deadline + _seconds(seconds=1))
    assert result["offer"] == 1

    task = _fresh(task)
    assert (task.state, task.assignee) == (TaskState.OFFERED, ben)
    assert [m.to for m in mail.outbox] == [["ana@example.com"], ["ben@example.com"]]
    lapsed = TaskPass.objects.get(task=task)
    assert (lapsed.worker, lapsed.why) == (ana, TaskPass.Why.LAPSED)
    assert _actions(task) == ["receive", "offer", "offer_timeout", "offer"]
    timeout = TaskEvent.objects.get(task=task, action="offer_timeout")
    assert (timeout.actor_label, timeout.from_state, timeout.to_state) == (
        "clock", "offered", "queued")
    assert "Nobody accepted the offer in time" in timeout.reason

    # Ben lets it lapse too: nobody else is eligible, and both are inside the cool-down.
    with django_capture_on_commit_callbacks(execute=True):
        deadlines_sweep(now=task.offer_deadline + _seconds(seconds=1))
    task = _fresh(task)
    assert (task.state, task.assignee) == (TaskState.QUEUED, None)
    assert task_dispatch(task_id=task.pk) is None


def test_a_worker_who_let_an_offer_lapse_is_offered_it_again_only_after_the_cool_down(
    clock, make_task, make_worker, check_skill
):
    """Alone in the queue, the lapser waits REOFFER_COOLDOWN; then the task is theirs again."""
    only = make_worker({"document-check": 3})
    task = task_dispatch(task_id=make_task(skill="document-check", timeouts=SHORT).pk)
    lapsed_at = clock.advance(seconds=61)
    deadlines_sweep(now=lapsed_at)
    assert _fresh(task).state == TaskState.QUEUED

    clock.now = lapsed_at + REOFFER_COOLDOWN - _seconds(seconds=1)
    assert task_dispatch(task_id=task.pk) is None
    clock.now = lapsed_at + REOFFER_COOLDOWN + _seconds(seconds=1)
    offered = task_dispatch(task_id=task.pk)
    assert (offered.state, offered.assignee) == (TaskState.OFFERED, only)


def test_after_the_cool_down_a_worker_who_never_lapsed_comes_first(
    clock, make_task, make_worker, check_skill
):
    """The cool-down lets a lapser back in, behind anyone who has not let the task lapse."""
    lapser = make_worker({"document-check": 3})
    task = task_dispatch(task_id=make_task(skill="document-check", timeouts=SHORT).pk)
    assert task.assignee == lapser
    deadlines_sweep(now=clock.advance(seconds=61))
    clock.advance(seconds=REOFFER_COOLDOWN.total_seconds() + 1)
    newcomer = make_worker({"document-check": 1})
    assert task_dispatch(task_id=task.pk).assignee == newcomer


def test_letting_an_offer_lapse_again_restarts_the_cool_down(
    clock, make_task, make_worker, check_skill
):
    """A second lapse counts from the second lapse, not from the first one."""
    only = make_worker({"document-check": 3})
    task = task_dispatch(task_id=make_task(skill="document-check", timeouts=SHORT).pk)
    deadlines_sweep(now=clock.advance(seconds=61))
    clock.advance(seconds=REOFFER_COOLDOWN.total_seconds() + 1)
    again = task_dispatch(task_id=task.pk)
    assert again.assignee == only

    second_lapse = clock.advance(seconds=61)
    assert deadlines_sweep(now=second_lapse)["offer"] == 1
    clock.advance(seconds=1)
    assert task_dispatch(task_id=task.pk) is None
    clock.now = second_lapse + REOFFER_COOLDOWN + _seconds(seconds=1)
    assert task_dispatch(task_id=task.pk).assignee == only


def test_an_away_worker_is_not_offered_the_task_after_a_lapse(make_task, make_worker,
                                                              check_skill):
    """After a lapse the task goes to an available worker, never to one who is away."""
    ana = make_worker({"document-check": 3})
    ben = make_worker({"document-check": 3})
    worker_set_availability(worker=ben, availability=Availability.AWAY)
    task = task_dispatch(task_id=make_task(skill="document-check").pk)
    assert task.assignee == ana
    deadlines_sweep(now=task.offer_deadline + _seconds(seconds=1))
    assert task_dispatch(task_id=task.pk) is None
    worker_set_availability(worker=ben, availability=Availability.AVAILABLE)
    assert task_dispatch(task_id=task.pk).assignee == ben


# Work timeout -------------------------------------------------------------------------------


def test_taken_task_nobody_finishes_returns_to_the_queue_after_its_work_timeout(
    make_task, make_worker
):
    """The worker loses the task at the work deadline; the history says why."""
    ana = make_worker({"invoice-review": 3})
    ben = make_worker({"invoice-review": 3})
    make_task(timeouts=SHORT)
    task = task_take_next(worker=ana)

    assert _nothing_handled(deadlines_sweep(now=task.work_deadline - _seconds(seconds=1)))
    assert deadlines_sweep(now=task.work_deadline + _seconds(seconds=1))["work"] == 1

    task = _fresh(task)
    assert (task.state, task.assignee, task.work_deadline) == (TaskState.QUEUED, None, None)
    event = _last_event(task)
    assert (event.action, event.from_state, event.to_state, event.actor_label) == (
        "work_timeout", "in_progress", "queued", "clock")
    assert "work clock ran out" in event.reason
    assert task_take_next(worker=ben).pk == task.pk


# Overall timeout: abort ---------------------------------------------------------------------


def test_overall_timeout_with_the_default_policy_writes_a_timed_out_callback(
    make_task, make_worker
):
    """Abort is the default: one SendTaskFailure HumanTask.TimedOut, with why as the cause."""
    worker = make_worker({"invoice-review": 3})
    worker_set_capacity(worker=worker, capacity=1)
    make_task()
    task = task_take_next(worker=worker)
    assert task.on_timeout == "abort"

    assert deadlines_sweep(now=task.overall_deadline + _seconds(seconds=1))["overall"] == 1

    task = _fresh(task)
    assert task.state == TaskState.ABORTING
    assert (task.work_deadline, task.offer_deadline) == (None, None)
    assert _last_event(task).action == "overall_timeout"
    outbox = Outbox.objects.get(task=task)
    assert (outbox.kind, outbox.error) == (OutboxKind.FAILURE, "HumanTask.TimedOut")
    assert outbox.cause == "The overall clock ran out (24 h)."
    # The worker no longer holds it: it does not count against their capacity.
    make_task()
    assert task_take_next(worker=worker).state == TaskState.IN_PROGRESS


@pytest.mark.emulator
def test_overall_timeout_makes_the_execution_follow_its_timed_out_path(
    private_intake, review_skill
):
    """On the emulator: the aborted task's callback sends the execution down if_timed_out."""
    process_deploy(text=(SPECS / "invoice-approval.yaml").read_text(), source="invoice")
    execution, _ = process_start(name="invoice-approval", input=INVOICE,
                                 business_key=unique("INV-90"))
    task = _intake(execution_arn=execution.execution_arn)

    assert deadlines_sweep(now=task.overall_deadline + _seconds(seconds=1))["overall"] == 1
    outbox = Outbox.objects.get(task=task)
    assert callback_send(outbox_id=outbox.pk) == "sent"

    finished = execution_wait(execution_arn=execution.execution_arn)
    assert (finished["status"], finished.get("error")) == ("FAILED", "Invoice.TimedOut")
    task = _fresh(task)
    assert task.state == TaskState.TIMED_OUT and task.closed_at is not None
    assert _actions(task)[-2:] == ["overall_timeout", "delivered"]


# Overall timeout: escalate -------------------------------------------------------------------


def test_escalate_policy_hands_the_task_to_the_supervisors_of_its_skill(
    make_task, make_worker, supervisor, approval_skill, eager_celery,
    django_capture_on_commit_callbacks
):
    """Escalated: nobody holds it, the escalation clock runs, and its supervisors get a mail.

    The notice goes out on commit through Celery; on-commit callbacks run with Celery
    eager, so the mail is sent by the real notify_task.
    """
    other_boss = make_worker({"finance-approval": 3}, roles=(Role.SUPERVISOR,),
                             email="other-supervisor@example.com")
    ana = make_worker({"invoice-review": 3}, email="ana@example.com")
    make_task(title="Review invoice INV-5", **ESCALATING)
    task = task_take_next(worker=ana)
    now = task.overall_deadline + _seconds(seconds=1)

    with django_capture_on_commit_callbacks(execute=True):
        assert deadlines_sweep(now=now)["overall"] == 1

    task = _fresh(task)
    assert (task.state, task.assignee, task.work_deadline) == (TaskState.ESCALATED, None, None)
    assert task.overall_deadline == now + _seconds(seconds=7200)
    assert _last_event(task).action == "escalate"
    assert not Outbox.objects.filter(task=task).exists()
    assert [(m.to, m.subject) for m in mail.outbox] == [
        ([supervisor.email], "Escalated: Review invoice INV-5")]
    assert list(supervised_tasks(supervisor=supervisor, escalated=True)) == [task]
    assert list(supervised_tasks(supervisor=supervisor, overdue=True)) == [task]
    assert not supervised_tasks(supervisor=other_boss, escalated=True).exists()


def test_a_supervisor_reassigns_an_escalated_task_and_the_new_worker_completes_it(
    make_task, make_worker, supervisor
):
    """Reassigned to a named worker, who holds it on a fresh work clock and completes it."""
    cleo = make_worker({"invoice-review": 2}, email="cleo@example.com")
    task = make_task(**ESCALATING)
    deadlines_sweep(now=task.overall_deadline + _seconds(seconds=1))
    escalated = _fresh(task)

    reassigned = task_reassign(supervisor=supervisor, task_id=task.pk, worker=cleo,
                                           reason="Cleo knows this supplier")
    assert (reassigned.state, reassigned.assignee) == (TaskState.IN_PROGRESS, cleo)
    assert reassigned.work_deadline is not None
    assert reassigned.overall_deadline == escalated.overall_deadline  # escalation clock on
    event = _last_event(reassigned)
    assert (event.action, event.actor, event.reason, event.data) == (
        "reassign", supervisor, "Cleo knows this supplier", {"worker": "cleo@example.com"})

    done = task_complete(worker=cleo, task_id=task.pk, answer=APPROVE)
    assert done.state == TaskState.COMPLETING
    assert Outbox.objects.get(task=task).output["answer"] == APPROVE


def test_reassigning_to_an_ineligible_worker_is_a_conflict_that_says_why(
    make_task, make_worker, supervisor, check_skill
):
    """No skill, separation of duties, at capacity, not a worker, away: each refused with
    the explainer's words, nothing changes."""
    no_skill = make_worker({"document-check": 5}, email="noskill@example.com")
    away = make_worker({"invoice-review": 5}, email="away@example.com")
    worker_set_availability(worker=away, availability=Availability.AWAY)
    reviewer = make_worker({"invoice-review": 5}, email="reviewer@example.com")
    busy = make_worker({"invoice-review": 5}, email="busy@example.com")
    worker_set_capacity(worker=busy, capacity=1)
    review = make_task(stage="review")
    approval = make_task(execution=review.execution_arn, stage="approval",
                         excludeWorkersOf=["review"], **ESCALATING)
    deadlines_sweep(now=approval.overall_deadline + _seconds(seconds=1))
    task_claim(worker=reviewer, task_id=review.pk)
    task_claim(worker=busy, task_id=make_task().pk)
    version = _fresh(approval).version

    refusals = {
        no_skill: "noskill@example.com cannot take this task: Does not hold invoice-review",
        reviewer: "reviewer@example.com cannot take this task: Separation of duties",
        busy: "busy@example.com cannot take this task: At capacity: holds 1 of 1 units",
        supervisor: f"{supervisor.email} cannot take this task: Not a worker",
        away: "away@example.com cannot take this task: Away",
    }
    for worker, why in refusals.items():
        with pytest.raises(Conflict, match=why):
            task_reassign(supervisor=supervisor, task_id=approval.pk, worker=worker,
                                      reason="try")
    approval = _fresh(approval)
    assert (approval.state, approval.version) == (TaskState.ESCALATED, version)


def test_when_the_escalation_clock_also_runs_out_the_task_aborts(make_task, supervisor):
    """Escalation happens once; at the end of its clock the task is aborted (TimedOut)."""
    task = make_task(**ESCALATING)
    first = task.overall_deadline + _seconds(seconds=1)
    deadlines_sweep(now=first)
    escalated = _fresh(task)
    assert escalated.state == TaskState.ESCALATED

    assert _nothing_handled(deadlines_sweep(now=escalated.overall_deadline - _seconds(seconds=1)))
    assert deadlines_sweep(now=escalated.overall_deadline)["overall"] == 1

    task = _fresh(task)
    assert task.state == TaskState.ABORTING
    assert _actions(task) == ["receive", "escalate", "overall_timeout"]
    outbox = Outbox.objects.get(task=task)
    assert (outbox.kind, outbox.error, outbox.cause) == (
        OutboxKind.FAILURE, "HumanTask.TimedOut",
        "The escalation clock ran out before the escalated task was finished.")


@pytest.mark.parametrize("handling", ["reassign", "return"])
def test_an_escalated_task_handled_but_unfinished_aborts_when_the_escalation_clock_runs_out(
    handling, make_task, make_worker, supervisor
):
    """Once escalated, a task is never escalated again: reassigned or returned, it aborts."""
    cleo = make_worker({"invoice-review": 2})
    task = make_task(**ESCALATING)
    deadlines_sweep(now=task.overall_deadline + _seconds(seconds=1))
    if handling == "reassign":
        task_reassign(supervisor=supervisor, task_id=task.pk, worker=cleo, reason="go")
    else:
        task_return(supervisor=supervisor, task_id=task.pk, reason="anyone")
    escalation_deadline = _fresh(task).overall_deadline

    deadlines_sweep(now=escalation_deadline + _seconds(seconds=1))

    task = _fresh(task)
    assert task.state == TaskState.ABORTING
    assert _actions(task)[-1] == "overall_timeout"
    assert _actions(task).count("escalate") == 1
    assert Outbox.objects.get(task=task).error == "HumanTask.TimedOut"


@pytest.mark.emulator
def test_document_check_escalates_and_a_reassigned_clerk_completes_it_on_the_emulator(
    private_intake, make_worker, check_skill
):
    """The document-check process (on_timeout: escalate) end to end: the execution succeeds."""
    process_deploy(text=(SPECS / "document-check.yaml").read_text(), source="document-check")
    supervisor = make_worker({"document-check": 1}, roles=(Role.SUPERVISOR,),
                       email="doc-supervisor@example.com")
    clerk = make_worker({"document-check": 3}, email="clerk@example.com")
    execution, _ = process_start(name="document-check", input={"customer": "Ada Lovelace"},
                                 business_key=unique("CUST-1"))
    task = _intake(execution_arn=execution.execution_arn)
    assert (task.on_timeout, task.escalation_seconds) == ("escalate", 14400)

    assert deadlines_sweep(now=task.overall_deadline + _seconds(seconds=1))["overall"] == 1
    assert notify(kind="escalated", task_id=task.pk) == 1
    assert mail.outbox[-1].to == ["doc-supervisor@example.com"]
    assert [t.pk for t in supervised_tasks(supervisor=supervisor, escalated=True)] == [
        task.pk]
    task_reassign(supervisor=supervisor, task_id=task.pk, worker=clerk,
                              reason="Clerk is back")
    task_complete(worker=clerk, task_id=task.pk,
                           answer={"outcome": "valid", "expires_on": "2031-05-01"})
    assert callback_send(outbox_id=Outbox.objects.get(task=task).pk) == "sent"

    finished = execution_wait(execution_arn=execution.execution_arn)
    assert finished["status"] == "SUCCEEDED"
    assert json.loads(finished["output"])["stages"]["check"]["answer"]["outcome"] == "valid"
    assert _fresh(task).state == TaskState.COMPLETED


# Supervisor actions -----------------------------------------------------------------------


def test_a_supervisor_returns_a_held_task_to_its_queue(make_task, make_worker, supervisor):
    """Back in the queue, free for anyone; the history names the supervisor and the reason."""
    ana = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=ana)
    returned = task_return(supervisor=supervisor, task_id=task.pk, reason="Ana is ill")
    assert (returned.state, returned.assignee, returned.work_deadline) == (
        TaskState.QUEUED, None, None)
    event = _last_event(returned)
    assert (event.action, event.actor, event.reason) == ("return", supervisor, "Ana is ill")


def test_a_supervisor_extends_each_running_clock(make_task, make_worker, supervisor, check_skill):
    """Extending moves the deadline by the seconds; the old deadline is then not due."""
    worker = make_worker({"invoice-review": 3, "document-check": 3})
    boss_of_checks = make_worker({"document-check": 1}, roles=(Role.SUPERVISOR,))
    offered = task_dispatch(task_id=make_task(skill="document-check").pk)
    old = offered.offer_deadline
    offered = task_extend(supervisor=boss_of_checks, task_id=offered.pk,
                                      clock="offer", seconds=600, reason="Ana is in a meeting")
    assert offered.offer_deadline == old + _seconds(seconds=600)
    assert _nothing_handled(deadlines_sweep(now=old + _seconds(seconds=1)))
    event = _last_event(offered)
    assert (event.action, event.data, event.reason) == (
        "extend_offer", {"seconds": 600}, "Ana is in a meeting")

    make_task()
    held = task_take_next(worker=worker)
    old_work, old_overall = held.work_deadline, held.overall_deadline
    held = task_extend(supervisor=supervisor, task_id=held.pk, clock="work",
                                   seconds=900, reason="long invoice")
    held = task_extend(supervisor=supervisor, task_id=held.pk, clock="overall",
                                   seconds=3600, reason="supplier on holiday")
    assert held.work_deadline == old_work + _seconds(seconds=900)
    assert held.overall_deadline == old_overall + _seconds(seconds=3600)
    assert held.state == TaskState.IN_PROGRESS and held.assignee == worker
    assert _actions(held)[-2:] == ["extend_work", "extend_overall"]


def test_extending_a_clock_that_is_not_running_is_a_conflict(make_task, make_worker, supervisor):
    """A queued task has no offer or work clock; extending one changes nothing."""
    task = make_task()
    for clock_name in ("offer", "work"):
        with pytest.raises(Conflict, match=f"The {clock_name} clock of this task is not running"):
            task_extend(supervisor=supervisor, task_id=task.pk, clock=clock_name,
                                    seconds=60, reason="more time")
    assert _fresh(task).version == 1 and _actions(task) == ["receive"]


def test_extending_never_puts_back_a_state_the_task_has_left(
    make_task, make_worker, supervisor, monkeypatch
):
    """A task reassigned between the extension's read and its write is not escalated again.

    The interleaving is forced: access_task is wrapped so the reassignment commits right
    after the extension read the task (a second supervisor acting at the same moment).
    """
    cleo = make_worker({"invoice-review": 2})
    task = make_task(**ESCALATING)
    deadlines_sweep(now=task.overall_deadline + _seconds(seconds=1))
    real_access_task = supervisor_service.access_task

    def read_then_someone_reassigns(**kwargs):
        seen = real_access_task(**kwargs)
        monkeypatch.setattr(supervisor_service, "access_task", real_access_task)
        task_reassign(supervisor=supervisor, task_id=seen.pk, worker=cleo,
                                  reason="Cleo takes it")
        return seen

    monkeypatch.setattr(supervisor_service, "access_task", read_then_someone_reassigns)
    with pytest.raises(Conflict, match="changed since you loaded it"):
        task_extend(supervisor=supervisor, task_id=task.pk, clock="overall",
                                seconds=600, reason="more time")
    task = _fresh(task)
    assert (task.state, task.assignee) == (TaskState.IN_PROGRESS, cleo)


def test_a_supervisor_aborts_with_a_reason_that_becomes_the_cause(make_task, supervisor):
    """Abort sends HumanTask.TimedOut with the supervisor's reason as the cause."""
    task = make_task()
    aborted = task_abort(supervisor=supervisor, task_id=task.pk,
                                        reason="Supplier went bankrupt")
    assert aborted.state == TaskState.ABORTING
    event = _last_event(aborted)
    assert (event.action, event.actor, event.reason) == ("abort", supervisor,
                                                        "Supplier went bankrupt")
    outbox = Outbox.objects.get(task=task)
    assert (outbox.kind, outbox.error, outbox.cause) == (
        OutboxKind.FAILURE, "HumanTask.TimedOut", "Supplier went bankrupt")


ACTIONS = {
    "reassign": lambda supervisor, task, worker, reason: task_reassign(
        supervisor=supervisor, task_id=task.pk, worker=worker, reason=reason),
    "return": lambda supervisor, task, worker, reason: task_return(
        supervisor=supervisor, task_id=task.pk, reason=reason),
    "extend": lambda supervisor, task, worker, reason: task_extend(
        supervisor=supervisor, task_id=task.pk, clock="overall", seconds=60, reason=reason),
    "abort": lambda supervisor, task, worker, reason: task_abort(
        supervisor=supervisor, task_id=task.pk, reason=reason),
}


@pytest.mark.parametrize("action", ACTIONS)
def test_every_supervisor_action_needs_a_reason(action, make_task, make_worker, supervisor):
    """Without a reason nothing changes: every action is recorded with why."""
    cleo = make_worker({"invoice-review": 2})
    task = make_task()
    with pytest.raises(Conflict, match="Say why"):
        ACTIONS[action](supervisor, task, cleo, "   ")
    assert _fresh(task).version == 1


@pytest.mark.parametrize("action", ACTIONS)
def test_a_worker_cannot_use_supervisor_actions(action, make_task, make_worker):
    """To a worker the task is not there to manage: NotFound, as for any task out of reach."""
    ana = make_worker({"invoice-review": 5})
    cleo = make_worker({"invoice-review": 2})
    task = make_task()
    with pytest.raises(NotFound):
        ACTIONS[action](ana, task, cleo, "I want to")
    assert _fresh(task).version == 1


def test_bulk_applies_an_action_to_each_task_and_reports_each_outcome(make_task, supervisor):
    """One task that cannot be changed does not stop the others; each gets its own outcome."""
    first, closed, last = make_task(), make_task(), make_task()
    task_abort(supervisor=supervisor, task_id=closed.pk, reason="duplicate")
    missing = uuid.uuid4()
    outcomes = tasks_bulk(
        supervisor=supervisor, task_ids=[first.pk, closed.pk, missing, "not-an-id", last.pk],
        action=task_extend, clock="overall", seconds=3600, reason="audit week",
    )
    assert outcomes == {
        str(first.pk): "ok",
        str(closed.pk): "Cannot extend overall a task that is aborting.",
        str(missing): "No such task.",
        "not-an-id": "No such task.",
        str(last.pk): "ok",
    }
    for task in (first, last):
        assert _actions(_fresh(task)) == ["receive", "extend_overall"]


def test_bulk_return_of_a_selection(make_task, make_worker, supervisor):
    """Returning several held tasks in bulk frees each one."""
    ana = make_worker({"invoice-review": 3})
    for _ in range(3):
        make_task()
    held = [task_take_next(worker=ana) for _ in range(3)]
    outcomes = tasks_bulk(supervisor=supervisor, task_ids=[t.pk for t in held],
                                      action=task_return, reason="Ana left")
    assert set(outcomes.values()) == {"ok"}
    assert {_fresh(t).state for t in held} == {TaskState.QUEUED}


# Notifications ------------------------------------------------------------------------------


def test_an_offer_notice_for_an_offer_already_answered_is_not_sent(
    make_task, make_worker, check_skill
):
    """The notice runs after commit, maybe late: an offer accepted meanwhile needs no mail."""
    ana = make_worker({"document-check": 3})
    task = task_dispatch(task_id=make_task(skill="document-check").pk)
    task_accept(worker=ana, task_id=task.pk)
    assert notify(kind="offered", task_id=task.pk) == 0
    assert mail.outbox == []


def test_an_escalation_notice_for_a_task_already_handled_is_not_sent(make_task, make_worker,
                                                                    supervisor):
    """Supervisors are not told of an escalation another supervisor has already dealt with."""
    task = make_task(**ESCALATING)
    deadlines_sweep(now=task.overall_deadline + _seconds(seconds=1))
    task_return(supervisor=supervisor, task_id=task.pk, reason="back to the pool")
    assert notify(kind="escalated", task_id=task.pk) == 0
    assert mail.outbox == []


def test_an_offer_notice_names_the_offer_deadline(make_task, make_worker, check_skill):
    """The offered worker is told until when the task is reserved for them."""
    make_worker({"document-check": 3}, email="ana@example.com")
    task = task_dispatch(task_id=make_task(skill="document-check",
                                                    title="Check passport P-1").pk)
    assert notify(kind="offered", task_id=task.pk) == 1
    sent = mail.outbox[0]
    assert (sent.to, sent.subject) == (["ana@example.com"], "Offered to you: Check passport P-1")
    assert f"{task.offer_deadline:%Y-%m-%d %H:%M}" in sent.body
    assert f"/tasks/{task.pk}/" in sent.body


# Executions that ended upstream ------------------------------------------------------------


@pytest.mark.emulator
def test_an_execution_stopped_upstream_cancels_its_open_task(private_intake, review_skill):
    """StopExecution on a real execution; the next check cancels its task with the reason."""
    process_deploy(text=(SPECS / "invoice-approval.yaml").read_text(), source="invoice")
    execution, _ = process_start(name="invoice-approval", input=INVOICE,
                                 business_key=unique("INV-91"))
    task = _intake(execution_arn=execution.execution_arn)
    aws.execution_stop(execution_arn=execution.execution_arn, error="Ops.Stopped",
                       cause="stopped by an operator")

    assert executions_check() == {"checked": 1, "cancelled": 1, "failed": 0}
    task = _fresh(task)
    assert task.state == TaskState.CANCELLED and task.closed_at is not None
    assert task.reason == "The execution is ABORTED. Nobody may work on it."
    event = _last_event(task)
    assert (event.action, event.actor_label) == ("cancel", "reconciler")
    assert executions_check() == {"checked": 0, "cancelled": 0, "failed": 0}


@pytest.mark.emulator
def test_an_execution_that_failed_or_never_existed_cancels_its_task_and_a_running_one_stays(
    private_intake, make_task
):
    """Real executions: one failed upstream (its heartbeat ran out), one still waiting."""
    failed_arn, failed = _start_heartbeat_process(heartbeat=1)
    execution_wait(execution_arn=failed_arn)  # nobody sends heartbeats: it fails in ~1 s
    process_deploy(text=(SPECS / "invoice-approval.yaml").read_text(), source="invoice")
    running, _ = process_start(name="invoice-approval", input=INVOICE,
                               business_key=unique("INV-92"))
    waiting = _intake(execution_arn=running.execution_arn)
    ghost = make_task()  # its execution ARN was never started anywhere
    checked_at = timezone.now()

    assert executions_check(now=checked_at) == {"checked": 3, "cancelled": 2, "failed": 0}

    assert (_fresh(failed).state, failed.reason) == (
        TaskState.CANCELLED, "The execution is FAILED. Nobody may work on it.")
    assert (_fresh(ghost).state, ghost.reason) == (
        TaskState.CANCELLED, "The execution no longer exists. Nobody may work on it.")
    waiting = _fresh(waiting)
    assert waiting.state == TaskState.QUEUED and waiting.execution_checked_at == checked_at


# Heartbeats ---------------------------------------------------------------------------------


def test_intake_schedules_heartbeats_only_for_a_stage_with_heartbeat_seconds(clock, make_task):
    """Three heartbeats per HeartbeatSeconds, from intake; none without HeartbeatSeconds."""
    beating = make_task(heartbeatSeconds=30)
    assert beating.next_heartbeat_at == clock.now + _seconds(seconds=10)
    assert beating.heartbeat_seconds == 30
    assert make_task().next_heartbeat_at is None


def test_no_heartbeat_is_sent_before_it_is_due(clock, make_task):
    """Before next_heartbeat_at nothing is sent (and Step Functions is not called)."""
    task = make_task(heartbeatSeconds=30)
    result = heartbeats_send(now=task.next_heartbeat_at - _seconds(seconds=1))
    assert result == {"sent": 0, "retry": 0, "expired": 0, "deferred": 0}
    assert _fresh(task).next_heartbeat_at == clock.now + _seconds(seconds=10)


def test_closing_a_task_stops_its_heartbeats(make_task, supervisor):
    """Aborted or cancelled, a task has no next heartbeat and the sender passes it by."""
    aborted = make_task(heartbeatSeconds=30)
    cancelled = make_task(heartbeatSeconds=30)
    task_abort(supervisor=supervisor, task_id=aborted.pk, reason="duplicate")
    transition(task_id=cancelled.pk, action="cancel", reason="execution gone")
    assert _fresh(aborted).next_heartbeat_at is None
    assert _fresh(cancelled).next_heartbeat_at is None
    far = timezone.now() + _seconds(days=1)
    assert heartbeats_send(now=far) == {"sent": 0, "retry": 0, "expired": 0, "deferred": 0}


def test_a_heartbeat_refused_with_task_timed_out_expires_the_task(make_task, monkeypatch):
    """AWS answers TaskTimedOut when it gave up on the token: the task expires with why.

    The emulator answers InvalidToken instead (tested end to end below), so the client's
    SendTaskHeartbeat is patched to refuse the way AWS does.
    """
    task = make_task(heartbeatSeconds=30)
    client = aws.client(service="stepfunctions")

    def timed_out(**params):
        raise ClientError({"Error": {"Code": "TaskTimedOut", "Message": "Task Timed Out"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "SendTaskHeartbeat")

    monkeypatch.setattr(client, "send_task_heartbeat", timed_out)
    result = heartbeats_send(now=task.next_heartbeat_at)
    assert result == {"sent": 0, "retry": 0, "expired": 1, "deferred": 0}
    task = _fresh(task)
    assert task.state == TaskState.EXPIRED and task.next_heartbeat_at is None
    assert "refused a heartbeat (TaskTimedOut)" in task.reason


@pytest.mark.emulator
def test_heartbeats_keep_a_worked_task_alive_and_stop_when_it_closes(
    private_intake, make_worker, review_skill
):
    """HeartbeatSeconds 2: beats keep the execution RUNNING for three periods and more.

    Once the task is completed and its answer delivered, it gets no more heartbeats.
    """
    ana = make_worker({"invoice-review": 3})
    execution_arn, task = _start_heartbeat_process(heartbeat=2)
    assert task.heartbeat_seconds == 2 and task.next_heartbeat_at is not None
    task_claim(worker=ana, task_id=task.pk)

    assert _beat_for(seconds=6) >= 5
    assert aws.execution_describe(execution_arn=execution_arn)["status"] == "RUNNING"

    task_complete(worker=ana, task_id=task.pk, answer=APPROVE)
    assert callback_send(outbox_id=Outbox.objects.get(task=task).pk) == "sent"
    assert execution_wait(execution_arn=execution_arn)["status"] == "SUCCEEDED"
    task = _fresh(task)
    assert task.state == TaskState.COMPLETED and task.next_heartbeat_at is None
    far = timezone.now() + _seconds(days=1)
    assert heartbeats_send(now=far) == {"sent": 0, "retry": 0, "expired": 0, "deferred": 0}


@pytest.mark.emulator
def test_when_heartbeats_stop_the_execution_times_out_and_the_task_expires(
    private_intake, review_skill
):
    """The emulator enforces HeartbeatSeconds: without beats the stage times out.

    The execution follows its timed-out path; the next heartbeat is refused (InvalidToken
    on the emulator) and the task expires, so nobody works on a dead task.
    """
    execution_arn, task = _start_heartbeat_process(heartbeat=2)
    assert _beat_for(seconds=4) >= 3
    assert aws.execution_describe(execution_arn=execution_arn)["status"] == "RUNNING"

    finished = execution_wait(execution_arn=execution_arn, timeout=15)
    assert (finished["status"], finished.get("error")) == ("FAILED", "HumanTask.TimedOut")

    result = heartbeats_send(now=timezone.now() + _seconds(seconds=5))
    assert result == {"sent": 0, "retry": 0, "expired": 1, "deferred": 0}
    task = _fresh(task)
    assert task.state == TaskState.EXPIRED and task.next_heartbeat_at is None
    assert task.reason.startswith("Step Functions refused a heartbeat (InvalidToken)")


def test_one_failing_execution_check_does_not_stop_the_others(make_task, monkeypatch):
    """DescribeExecution is patched: throttled for one execution, ended for the other."""
    from config.errors import ExternalServiceError
    from processes import aws as aws_module

    throttled, ended = make_task(), make_task()

    def describe(*, execution_arn: str) -> dict:
        if execution_arn == throttled.execution_arn:
            raise ExternalServiceError("throttled", retryable=True,
                                       error_code="ThrottlingException")
        return {"status": "FAILED"}

    monkeypatch.setattr(aws_module, "execution_describe", describe)
    assert executions_check() == {"checked": 2, "cancelled": 1, "failed": 1}
    assert _fresh(throttled).state == TaskState.QUEUED
    assert _fresh(ended).state == TaskState.CANCELLED
