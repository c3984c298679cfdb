"""The clocks' batches applied by PostgreSQL (inbox.lifecycle_sql, one statement a clock).

These tests prove the statements write what the Python path (transitions_apply, SQLite's)
writes: the same task rows, events and hash chain, passes, outbox and signal rows, and the
same effects after commit, through a scenario with every branch (an offer lapsing, lapsing
again, lapsing after a decline; a work timeout; an overall timeout aborting, escalating,
and aborting when the escalation clock runs out too).
"""

import datetime

import pytest
from django.db import connection
from django.utils import timezone

from accounts.services import worker_set_capacity
from inbox import effects, lifecycle, lifecycle_sql
from inbox.history import events_verify
from inbox.lifecycle import transition
from inbox.models import Outbox, SignalOutbox, Task, TaskEvent, TaskPass, TaskState
from inbox.services import clock
from inbox.services.clock import deadlines_sweep
from inbox.services.worker import task_decline
from tests.inbox.test_clocks import _due_on_each_clock

pytestmark = pytest.mark.postgres


@pytest.fixture
def people(make_worker, check_skill):
    first = make_worker({"invoice-review": 3, "document-check": 3})
    worker_set_capacity(worker=first, capacity=100)
    # No room: dispatch offers every task to first; the scenario offers second its own.
    second = make_worker({"document-check": 3})
    worker_set_capacity(worker=second, capacity=0)
    return {first.pk: "first", second.pk: "second"}, first, second


def _scenario(*, make_task, people, monkeypatch, python: bool) -> dict:
    """Run every clock branch through deadlines_sweep; return what was written, by label.

    python: the Python path (clock_rows_applied answers None, as on SQLite).
    """
    names, first, second = people
    applied = []
    real = lifecycle.clock_rows_applied

    def spy(**kwargs):
        if python:
            return None
        applied.append(real(**kwargs))
        return applied[-1]

    monkeypatch.setattr(clock, "clock_rows_applied", spy)
    sent = []
    monkeypatch.setattr(effects, "enqueue_all", sent.extend)

    due = _due_on_each_clock(3, make_task=make_task, worker=first)
    tasks = {f"{kind}{number}": task for kind, group in due.items()
             for number, task in enumerate(group)}
    base = timezone.now()
    # A heartbeat due tomorrow on each (set here, as intake sets it for a stage that has
    # one): an abort stops it, the other changes leave it.
    Task.objects.filter(pk__in=[task.pk for task in tasks.values()]).update(
        next_heartbeat_at=base + datetime.timedelta(days=1))
    before = {label: Task.objects.get(pk=task.pk) for label, task in tasks.items()}
    first_sweep = base + datetime.timedelta(hours=1)
    sweeps = [deadlines_sweep(now=first_sweep)]

    # offer0 is offered to first again (a lapse's pass is renewed when it lapses again);
    # offer1 to second, who declines it and is offered it again (a decline's pass stays).
    transition(task_id=tasks["offer0"].pk, action="offer", worker=first)
    transition(task_id=tasks["offer1"].pk, action="offer", worker=second)
    task_decline(worker=second, task_id=tasks["offer1"].pk, reason="Not mine.")
    transition(task_id=tasks["offer1"].pk, action="offer", worker=second)
    # The escalation clock (7,200 s from the first sweep) runs out, and the offers lapse.
    second_sweep = first_sweep + datetime.timedelta(seconds=7201)
    sweeps.append(deadlines_sweep(now=second_sweep))
    moments = {"first": first_sweep, "second": second_sweep}

    def deadline(task: Task, name: str):
        value = getattr(task, name)
        if value is None or value == getattr(before[label], name):
            return value if value is None else "unchanged"
        return next(f"{which} sweep + {value - moment}" for which, moment in moments.items()
                    if value >= moment)

    written = {}
    for label, task in tasks.items():
        task = Task.objects.get(pk=task.pk)
        events = list(TaskEvent.objects.filter(task=task, version__gt=before[label].version)
                      .order_by("version"))
        at = {event.version: event.at for event in events}
        lapses = [event.at for event in events if event.action == "offer_timeout"]
        written[label] = {
            "task": (task.state, task.version, names.get(task.assignee_id), task.reason,
                     deadline(task, "offer_deadline"), deadline(task, "work_deadline"),
                     deadline(task, "overall_deadline"), deadline(task, "next_heartbeat_at"),
                     task.chain_head == events[-1].hash, task.closed_at),
            "events": [(e.version, e.action, e.from_state, e.to_state, names.get(e.actor_id),
                        e.actor_label, e.reason,
                        {k: "a moment" if k.endswith("_deadline") else names.get(v, v)
                         for k, v in e.data.items()})
                       for e in events],
            "chain": events_verify(task=task),
            "outbox": [(o.decision_version, o.kind, o.output, o.error, o.cause, o.status,
                        o.attempts, o.next_attempt_at == at[o.decision_version],
                        o.last_error, o.sent_at)
                       for o in Outbox.objects.filter(task=task).order_by("decision_version")],
            "passes": sorted((names[p.worker_id], p.why, p.reason,
                              "at the last lapse" if lapses and p.at >= lapses[-1] else "before")
                             for p in TaskPass.objects.filter(task=task)),
            "signals": sorted(SignalOutbox.objects.filter(task=task, version__in=at)
                              .values_list("version", flat=True)),
        }
    labels = {str(task.pk): label for label, task in tasks.items()}
    outboxes = {o.pk: labels.get(str(o.task_id)) for o in Outbox.objects.all()}

    # The next run's takes and sweeps must not find these: every task still open is closed.
    for task in Task.objects.filter(state__in=lifecycle.OPEN):
        transition(task_id=task.pk, action="cancel", reason="The scenario is over.")
    return {"sweeps": sweeps, "written": written, "sent": sent, "labels": labels,
            "outboxes": outboxes, "applied": applied}


def _messages(run: dict) -> list:
    """The effects' messages the run's tasks were sent, their ids said by label."""
    labels, outboxes = run["labels"], run["outboxes"]

    def argument(value):
        if isinstance(value, list):
            return sorted(argument(one) for one in value)
        return labels.get(str(value)) or outboxes.get(value) or value

    def ours(arguments) -> bool:
        values = [one for a in arguments for one in (a if isinstance(a, list) else [a])]
        return any(str(v) in labels or v in outboxes for v in values)

    return sorted((name, tuple(argument(a) for a in arguments))
                  for name, arguments in effects.batched(run["sent"])
                  if ours(arguments))


def test_the_database_and_python_write_the_same_rows_chain_and_effects(
        make_task, people, monkeypatch, settings, django_capture_on_commit_callbacks):
    settings.INBOX_SIGNALS_BUS = "default"
    runs = {}
    for python in (False, True):
        # The effects run as after a commit (the test's transaction never commits).
        with django_capture_on_commit_callbacks(execute=True):
            runs[python] = _scenario(make_task=make_task, people=people,
                                     monkeypatch=monkeypatch, python=python)
    by_sql, by_python = runs[False], runs[True]
    by_sql["messages"], by_python["messages"] = _messages(by_sql), _messages(by_python)
    assert by_sql["applied"] and not by_python["applied"]  # Each path really ran.
    for label, written in by_sql["written"].items():
        for part, value in written.items():
            assert (label, part, value) == (label, part, by_python["written"][label][part])
    assert by_sql["messages"] == by_python["messages"]
    assert by_sql["sweeps"] == by_python["sweeps"]

    # And what they wrote is what the clocks mean (so the comparison is not of two wrongs).
    written = by_sql["written"]
    assert all(one["chain"] is None for one in written.values())
    assert by_sql["sweeps"][0] == {"failed": 0, "offer": 3, "work": 3, "overall": 3}
    assert [e[1] for e in written["offer0"]["events"]] == [
        "offer_timeout", "offer", "offer_timeout"]
    assert written["offer0"]["events"][0][-1] == {"holder_before": "first"}
    assert written["offer0"]["passes"] == [
        ("first", "lapsed", "The offer ran out.", "at the last lapse")]
    assert written["offer1"]["passes"] == [
        ("first", "lapsed", "The offer ran out.", "before"),
        ("second", "declined", "Not mine.", "before")]
    assert written["work0"]["task"][:3] == (TaskState.QUEUED, 3, None)
    assert written["overall0"]["task"][0] == TaskState.ABORTING  # escalated, then ran out
    assert [e[1] for e in written["overall0"]["events"]] == ["escalate", "overall_timeout"]
    assert written["overall0"]["events"][1][6] == clock.ESCALATION_RAN_OUT
    assert written["overall0"]["outbox"][0][:5] == (
        3, "failure", None, "HumanTask.TimedOut", clock.ESCALATION_RAN_OUT)
    assert written["overall1"]["events"][0][6] == "The overall clock ran out (20 min)."
    assert written["overall1"]["task"][4:8] == (None, None, "unchanged", None)
    assert written["work0"]["task"][4:8] == (None, None, "unchanged", "unchanged")
    assert all(one["signals"] == [e[0] for e in one["events"]] for one in written.values())
    assert ("inbox.tasks.notify_task", ("escalated", "overall0")) in by_sql["messages"]
    # An abort's callback is its outbox row (written alike above), never a message.
    assert by_sql["written"]["overall0"]["outbox"]
    assert not any("callback" in name for name, _ in by_sql["messages"])


def test_a_pushed_queues_lapsed_offer_is_dispatched_after_commit(
        make_task, people, monkeypatch, django_capture_on_commit_callbacks):
    _, first, _ = people
    sent = []
    monkeypatch.setattr(effects, "enqueue_all", sent.extend)
    due = _due_on_each_clock(1, make_task=make_task, worker=first)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert deadlines_sweep(now=timezone.now() + datetime.timedelta(hours=1)) == {
            "failed": 0, "offer": 1, "work": 1, "overall": 1}
    assert not sent  # Nothing before commit.
    for callback in callbacks:
        callback()
    offered, waiting = due["offer"][0], due["overall"][0]  # the waiting one escalates
    assert Task.objects.get(pk=waiting.pk).state == TaskState.ESCALATED
    # document-check pushes (an offer to the next worker); invoice-review pulls (nothing).
    assert sorted(effects.batched(sent)) == [
        ("inbox.tasks.dispatch_task", (str(offered.pk),)),
        ("inbox.tasks.notify_task", ("escalated", str(waiting.pk))),
    ]


@pytest.mark.parametrize("seconds", [1, 59, 60, 61, 119, 120, 3599, 3600, 3660, 7200, 86_400,
                                     90_061])
def test_the_database_says_a_duration_as_the_clock_service_does(db, seconds):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {lifecycle_sql.duration_sql('%s::integer')}",
                       [seconds] * 5)
        said = cursor.fetchone()[0]
    assert said == clock._duration(Task(overall_seconds=seconds))


def test_the_statements_are_the_tables_rows():
    """The statements mirror these rows' changes: change one, and this names the module."""
    rows = lifecycle.TRANSITIONS
    assert [(rows[a].sources, rows[a].target, rows[a].change, rows[a].callback,
             rows[a].effects, rows[a].system)
            for a in ("offer_timeout", "work_timeout", "escalate", "overall_timeout")] == [
        ((TaskState.OFFERED,), TaskState.QUEUED, lifecycle._lapsed, None,
         (effects.Effect.DISPATCH,), "clock"),
        ((TaskState.IN_PROGRESS,), TaskState.QUEUED, lifecycle._to_queue, None,
         (effects.Effect.DISPATCH,), "clock"),
        (lifecycle.OPEN, TaskState.ESCALATED, lifecycle._escalated, None,
         (effects.Effect.NOTIFY_ESCALATED,), "clock"),
        (lifecycle.OPEN, TaskState.ABORTING, lifecycle._aborted, lifecycle._timeout, (),
         "clock"),
    ]
    statements = lifecycle._clock_statements(200)
    assert "t.state = 'offered' AND t.offer_deadline <=" in statements["offer"]
    assert "t.state = 'in_progress' AND t.work_deadline <=" in statements["work"]
    assert ("t.state IN ('queued', 'offered', 'in_progress', 'escalated') "
            "AND t.overall_deadline <=") in statements["overall"]
    assert "inbox_taskpass" in statements["offer"] and "inbox_taskpass" not in statements["work"]


def test_a_name_that_is_not_a_name_is_never_written_into_sql():
    with pytest.raises(ValueError, match="is not a name"):
        lifecycle_sql.back_to_queue(action="x'; DROP TABLE inbox_task; --", source="offered",
                                    target="queued", column="offer_deadline", lapse_pass=False,
                                    batch=200)


def test_the_sweep_never_compiles_its_statement_just_in_time(db):
    """JIT off in the sweep's transaction: compiling the overall statement cost 90 ms a
    sweep where running it costs a few (bench/sweeper.py's steady phase)."""
    from django.db import transaction

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL jit = on")  # whatever the server's default
        with transaction.atomic():
            assert lifecycle.clock_rows_applied(clock="overall", due=timezone.now(), batch=200,
                                                reasons=clock.REASONS["overall"]) == 0
            cursor.execute("SHOW jit")
            assert cursor.fetchone()[0] == "off"


def test_a_batch_is_a_positive_number_of_rows():
    for batch in (0, -1, "200", True):
        with pytest.raises(ValueError, match="positive number of rows"):
            lifecycle_sql.statements(lifecycle.TRANSITIONS, failure_kind="failure",
                                     pending="pending", batch=batch)


def _literal(value) -> str:
    if isinstance(value, bool | int):
        return str(value).lower()
    return "'" + str(value).replace("'", "''") + "'"


def test_the_statement_is_found_through_the_clocks_partial_indexes(db):
    """Every clock's due rows are read through its partial index, in a generic plan too
    (the one a prepared statement settles on): the states are literals in the text.
    (It failed in CI at 45051f3 with a bitmap scan of that very index.)"""
    import re

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute("SET LOCAL enable_seqscan = off")
        for name, index in (("offer", "task_offer_due"), ("work", "task_work_due"),
                            ("overall", "task_overall_running")):
            sql, values = lifecycle.clock_statement(clock=name, due=timezone.now(), batch=200,
                                                    reasons=clock.REASONS[name])
            names = list(dict.fromkeys(re.findall(r"%\((\w+)\)s", sql)))
            text = re.sub(r"%\((\w+)\)s",
                          lambda m, names=names: f"${names.index(m.group(1)) + 1}", sql)
            cursor.execute(f"PREPARE clock_{name} AS {text}")
            cursor.execute(f"EXPLAIN EXECUTE clock_{name}("
                           + ", ".join(_literal(values[one]) for one in names) + ")")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            # An index scan, or on a table this small a bitmap scan, of the clock's own
            # partial index (which the planner picks depends on the table's statistics,
            # left by the tests before; bench/explain_sweeper.py shows the plans at 1M).
            assert re.search(rf"(Index Scan using|Index Only Scan using|Bitmap Index Scan "
                             rf"on) {index}\b", plan), plan
            # The batch's rows are written through the primary key, never a scan of all.
            assert "Seq Scan on inbox_task" not in plan, plan
