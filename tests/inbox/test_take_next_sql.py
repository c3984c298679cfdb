"""Take next in one round trip on PostgreSQL (inbox_take_next_task, migrations 0010, 0012, 0016).

The database applies the table's take_next row itself; these tests prove it writes what the
Python path writes (SQLite's, and PostgreSQL's when the database took nothing): the same
task row, the same event, the same hash chain, and honours the same rules.
"""

import datetime
import importlib
import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from config.errors import Conflict, NotFound
from inbox import lifecycle
from inbox.history import event_hash, events_verify
from inbox.models import HELD_STATES, Task, TaskEvent, TaskState
from inbox.services.worker import task_take_next

pytestmark = pytest.mark.postgres

FUNCTION = importlib.import_module("inbox.migrations.0016_take_next_task")


def _written(task: Task) -> dict:
    """Return what a take wrote, relative to the taker and the moment of the take."""
    fresh = Task.objects.get(pk=task.pk)
    event = TaskEvent.objects.get(task=task, version=fresh.version)
    return {
        "task": (fresh.state, fresh.version, fresh.offer_deadline,
                 fresh.work_deadline - event.at, fresh.chain_head == event.hash),
        "event": (event.action, event.from_state, event.to_state,
                  event.actor_id == fresh.assignee_id, event.actor_label == fresh.assignee.email,
                  event.reason,
                  event.data == {"work_deadline": fresh.work_deadline.isoformat()}),
        "chain": events_verify(task=fresh),
    }


def test_the_database_and_python_write_the_same_rows_and_chain(make_task, make_worker, monkeypatch):
    by_sql, by_python = make_worker({"invoice-review": 3}), make_worker({"invoice-review": 3})
    make_task(priority=90), make_task(priority=80)
    with CaptureQueriesContext(connection) as queries:
        first = task_take_next(worker=by_sql)
    assert len(queries) == 1, [q["sql"] for q in queries.captured_queries]
    monkeypatch.setattr("inbox.services.worker.take_next_applied", lambda **kwargs: None)
    second = task_take_next(worker=by_python)
    assert (first.priority, second.priority) == (90, 80)
    assert first.assignee == by_sql and second.assignee == by_python
    assert _written(first) == _written(second)
    assert _written(first)["chain"] is None
    # What the service answers is the row as written.
    assert (first.state, first.version, first.work_deadline) == (
        TaskState.IN_PROGRESS, 2, Task.objects.get(pk=first.pk).work_deadline)


@pytest.mark.parametrize("email", ["ana@example.com", "zoë.o'brien@exämple.com",
                                   'quote"back\\slash@example.com'])
def test_the_event_hash_is_pythons_whatever_the_takers_address(make_task, make_user, email,
                                                               review_skill):
    """The actor's label is JSON-encoded as Python encodes it (non-ASCII escaped)."""
    from accounts.services import worker_skill_set

    worker = make_user(email=email)
    worker_skill_set(worker=worker, skill=review_skill, proficiency=3)
    make_task()
    taken = task_take_next(worker=worker)
    event = TaskEvent.objects.get(task=taken, version=2)
    assert event.actor_label == worker.email
    assert event.hash == event_hash(
        prev_hash=event.prev_hash, task_id=str(taken.pk), version=2, action="take_next",
        from_state="queued", to_state="in_progress", actor=worker.email, reason="",
        data=event.data, at=event.at)
    assert events_verify(task=taken) is None


@pytest.mark.parametrize("moment", [
    datetime.datetime(2026, 12, 1, 9, 0, 0, tzinfo=datetime.UTC),
    datetime.datetime(2026, 12, 1, 9, 0, 0, 1, tzinfo=datetime.UTC),
    datetime.datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.UTC),
    datetime.datetime(2027, 2, 28, 7, 5, 3, 120000, tzinfo=datetime.UTC),
])
def test_the_database_formats_a_moment_as_python_does(db, moment):
    with connection.cursor() as cursor:
        cursor.execute("SELECT inbox_isoformat(%s)", [moment])
        assert cursor.fetchone()[0] == moment.isoformat()


def test_a_worker_of_several_queues_gets_the_highest_priority_then_oldest_of_all(
        make_task, make_worker, approval_skill):
    worker = make_worker({"invoice-review": 3, "finance-approval": 3})
    old = make_task(priority=50)
    urgent = make_task(priority=70, skill="finance-approval")
    newer = make_task(priority=50, skill="finance-approval")
    taken = [task_take_next(worker=worker).pk for _ in range(3)]
    assert taken == [urgent.pk, old.pk, newer.pk]
    assert lifecycle.take_next_applied(worker=worker) is None


def test_only_the_named_queue_and_only_pull_queues(make_task, make_worker, check_skill,
                                                   approval_skill):
    worker = make_worker({"invoice-review": 3, "finance-approval": 3, "document-check": 3})
    pushed = make_task(skill="document-check", priority=99)
    Task.objects.filter(pk=pushed.pk).update(state=TaskState.QUEUED, assignee=None)
    review = make_task(priority=10)
    approval = make_task(priority=60, skill="finance-approval")
    assert lifecycle.take_next_applied(worker=worker, skill="invoice-review").pk == review.pk
    assert lifecycle.take_next_applied(worker=worker).pk == approval.pk
    assert lifecycle.take_next_applied(worker=worker) is None
    assert Task.objects.get(pk=pushed.pk).state == TaskState.QUEUED


def test_proficiency_capacity_and_separation_hold_in_the_database(
        make_task, make_worker, approval_skill):
    """Nothing is taken where the Python path would refuse; that path then says why."""
    novice = make_worker({"invoice-review": 1})
    make_task(minProficiency=4)
    assert lifecycle.take_next_applied(worker=novice) is None
    with pytest.raises(NotFound, match="Nothing is waiting"):
        task_take_next(worker=novice)

    full = make_worker({"invoice-review": 3})
    type(full).objects.filter(pk=full.pk).update(capacity=0)
    full.refresh_from_db()
    assert lifecycle.take_next_applied(worker=full) is None
    with pytest.raises(Conflict, match="capacity"):
        task_take_next(worker=full)

    reviewer = make_worker({"invoice-review": 3, "finance-approval": 3})
    review = make_task(priority=100)
    taken = task_take_next(worker=reviewer)
    assert taken.pk == review.pk
    approval = make_task(execution=review.execution_arn, stage="approve",
                         skill="finance-approval", excludeWorkersOf=["review"], priority=100)
    assert lifecycle.take_next_applied(worker=reviewer, skill="finance-approval") is None
    other = make_worker({"finance-approval": 3})
    assert task_take_next(worker=other).pk == approval.pk


def test_a_user_without_the_worker_role_takes_nothing_in_the_database(make_task, make_worker):
    from accounts.roles import Role

    boss = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    make_task()
    assert lifecycle.take_next_applied(worker=boss) is None


def test_the_function_is_the_tables_take_next_row():
    """The function's literals are the table's: change the row, and this names the function."""
    row = lifecycle.TRANSITIONS["take_next"]
    assert (row.sources, row.target, row.change, row.callback, row.effects) == (
        (TaskState.QUEUED,), TaskState.IN_PROGRESS, lifecycle._hold, None, ())
    assert HELD_STATES == [TaskState.OFFERED, TaskState.IN_PROGRESS]
    assert row.eligible and not row.holder and not row.needs_reason
    sql = FUNCTION.CREATE
    assert "t.state = 'queued'" in sql and "SET state = 'in_progress'" in sql
    assert "t.state IN ('offered', 'in_progress')" in sql
    assert "'take_next', 'queued', 'in_progress'" in sql
    assert ',"take_next","queued","in_progress",' in sql


def test_the_take_answers_the_history_as_stored(make_task, make_worker):
    """The function's history is the task's events, the take's own last, each as the ORM
    reads it back: the answer needs no second read, and says what the table holds."""
    from inbox.selectors import task_history
    from inbox.services.worker import task_release

    worker = make_worker({"invoice-review": 3})
    make_task(priority=90)
    first = task_take_next(worker=worker)
    task_release(worker=worker, task_id=first.pk)
    with CaptureQueriesContext(connection) as queries:
        again = task_take_next(worker=worker, history=True)
        history = list(task_history(task=again))
    assert len(queries) == 1
    assert again.pk == first.pk
    fields = [f.attname for f in TaskEvent._meta.concrete_fields]
    stored = [[getattr(e, name) for name in fields]
              for e in TaskEvent.objects.filter(task=again).order_by("version")]
    assert [[getattr(e, name) for name in fields] for e in history] == stored
    assert [e.action for e in history][-3:] == ["take_next", "release", "take_next"]
    assert history[-1].hash == again.chain_head


def test_a_take_that_does_not_show_the_history_leaves_it_to_its_reader(make_task,
                                                                       make_worker):
    """Without history (the page's take, which redirects; a script's), the function reads
    no history; whoever shows it later reads the one stored, in one query of its own."""
    from inbox.selectors import task_history

    worker = make_worker({"invoice-review": 3})
    make_task(priority=90), make_task(priority=80)
    with CaptureQueriesContext(connection) as queries:
        taken = task_take_next(worker=worker)
    assert len(queries) == 1 and "inbox_take_next_task" in queries[0]["sql"]
    assert getattr(taken, "events_read", None) is None
    with CaptureQueriesContext(connection) as queries:
        history = list(task_history(task=taken))
    assert len(queries) == 1
    assert [e.action for e in history] == ["receive", "take_next"]
    assert history[-1].hash == taken.chain_head
    with connection.cursor() as cursor:  # The function answers none when not asked.
        cursor.execute("SELECT (r.taken).priority, r.taken_history FROM "
                       "inbox_take_next_task(%s, NULL, now(), '', %s, %s, false, false) r",
                       [worker.pk, worker.email, f'"{worker.email}"'])
        assert cursor.fetchall() == [(80, None)]


def test_a_take_that_shows_the_task_reads_its_skill_with_it_and_one_that_does_not_leaves_it(
        make_task, make_worker, review_skill):
    """The skill's row rides along only with a take that shows the task (the API's answer,
    a page swapped in place); the page's take, which redirects, and a script's read the
    task's row alone, and whoever asks for the skill afterwards reads it then."""
    worker = make_worker({"invoice-review": 3})
    make_task(priority=90), make_task(priority=80)
    with CaptureQueriesContext(connection) as queries:
        bare = task_take_next(worker=worker)
    assert len(queries) == 1 and "accounts_skill" not in queries[0]["sql"]
    assert not Task.skill.is_cached(bare)
    with CaptureQueriesContext(connection) as queries:
        assert bare.skill == review_skill and bare.skill.slug == "invoice-review"
    assert len(queries) == 1
    with CaptureQueriesContext(connection) as queries:
        shown = task_take_next(worker=worker, history=True)
        assert shown.skill == review_skill and shown.skill.slug == "invoice-review"
    assert len(queries) == 1 and "accounts_skill" in queries[0]["sql"]
    assert shown.pk != bare.pk and (bare.priority, shown.priority) == (90, 80)


def test_a_take_that_shows_nothing_answers_what_the_take_wrote_and_defers_the_rest(
        make_task, make_worker):
    """The page's take (a redirect) and a script's answer the task's identity and what the
    take changed; each other column is read when something first asks for it, as the ORM
    reads a column .only() left out, and is the row's."""
    worker = make_worker({"invoice-review": 3})
    make_task(priority=90, input={"invoice": "A-1"})
    with CaptureQueriesContext(connection) as queries:
        taken = task_take_next(worker=worker)
    assert len(queries) == 1
    answered = queries[0]["sql"].split(" FROM ")[0].count('(r.taken).')
    assert answered == len(lifecycle._TAKEN_NAMES) == 8
    stored = Task.objects.get(pk=taken.pk)
    loaded = {name: getattr(taken, name) for name in lifecycle._TAKEN_NAMES}
    assert loaded == {name: getattr(stored, name) for name in lifecycle._TAKEN_NAMES}
    assert (loaded["state"], loaded["version"], loaded["assignee_id"]) == (
        TaskState.IN_PROGRESS, 2, worker.pk)
    deferred = taken.get_deferred_fields()
    assert deferred == {field.attname for field in Task._meta.concrete_fields} - set(
        lifecycle._TAKEN_NAMES)
    with CaptureQueriesContext(connection) as queries:
        assert (taken.priority, taken.input) == (90, {"invoice": "A-1"})
    assert len(queries) == 2  # one per column first asked for
    # A take that shows the task answers every column: nothing is read afterwards.
    make_task(priority=80)
    shown = task_take_next(worker=worker, history=True)
    assert shown.get_deferred_fields() == set()


def test_a_models_rows_of_some_columns_names_only_columns_it_has(db):
    from config.rows import ModelRows

    with pytest.raises(ValueError, match=r"Task has no concrete columns \['priorty'\]"):
        ModelRows.of(Task, connection, ("id", "priorty"))
    rows = ModelRows.of(Task, connection, ("version", "id"))
    assert (rows.names, rows.width) == (["id", "version"], 2)  # the model's order


def test_the_takes_history_is_made_into_events_only_when_read(make_task, make_worker,
                                                               monkeypatch):
    """A take that nobody reads the history of (the page's redirect, a script) makes no
    events of it; the first read makes them once, in one place, from the take's answer."""
    from inbox import history
    from inbox.selectors import task_history

    made = []
    history_read = history.history_decoded
    monkeypatch.setattr(history, "history_decoded",
                        lambda *a, **k: made.append(1) or history_read(*a, **k))
    worker = make_worker({"invoice-review": 3})
    make_task()
    taken = task_take_next(worker=worker, history=True)
    assert made == []
    with CaptureQueriesContext(connection) as queries:
        first, second = list(task_history(task=taken)), list(task_history(task=taken))
    assert (made, len(queries)) == ([1], 0)
    assert [e.action for e in first] == [e.action for e in second] == ["receive", "take_next"]
    assert first[-1].hash == taken.chain_head


def test_a_take_with_a_signal_bus_writes_its_signal_row(make_task, make_worker, settings,
                                                       django_capture_on_commit_callbacks):
    from inbox.models import SignalOutbox

    settings.INBOX_SIGNALS_BUS = "inbox-test-bus"
    worker = make_worker({"invoice-review": 3})
    make_task()
    with django_capture_on_commit_callbacks() as callbacks:
        taken = task_take_next(worker=worker)
    signal = SignalOutbox.objects.get(task=taken, version=taken.version)
    assert signal.event == TaskEvent.objects.get(task=taken, version=taken.version)
    assert len(callbacks) == 1


def test_the_previous_functions_stay_for_a_rolling_deploy(make_task, make_worker):
    """0012's inbox_take_next_history still answers as the code before 0016 reads it."""
    worker = make_worker({"invoice-review": 3})
    task = make_task()
    with connection.cursor() as cursor:
        cursor.execute("SELECT (r.taken).id, (r.taken).state, r.taken_history "
                       "FROM inbox_take_next_history(%s, NULL, now(), %s, %s, false) r",
                       [worker.pk, worker.email, f'"{worker.email}"'])
        [(taken, state, history)] = cursor.fetchall()
    assert (taken, state) == (task.pk, TaskState.IN_PROGRESS)
    assert [event[2] for event in json.loads(history)] == ["receive", "take_next"]


def test_the_first_function_stays_for_a_rolling_deploy(make_task, make_worker):
    """0010's inbox_take_next still answers the row as the code before 0012 reads it."""
    worker = make_worker({"invoice-review": 3})
    task = make_task()
    with connection.cursor() as cursor:
        cursor.execute("SELECT t.id, t.state FROM inbox_take_next(%s, NULL, now(), %s, %s, "
                       "false) t", [worker.pk, worker.email, f'"{worker.email}"'])
        assert cursor.fetchall() == [(task.pk, TaskState.IN_PROGRESS)]


def _synchronous_commit() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return cursor.fetchone()[0]


@pytest.mark.django_db(transaction=True)
def test_a_take_alone_commits_without_waiting_for_its_flush(make_task, make_worker):
    """Its own transaction only: the setting is local to it, the session keeps its own."""
    worker = make_worker({"invoice-review": 3})
    make_task()
    assert not connection.in_atomic_block
    with CaptureQueriesContext(connection) as queries:
        taken = task_take_next(worker=worker, history=True)
    assert len(queries) == 1
    assert "set_config('synchronous_commit', 'off', true)" in queries[0]["sql"]
    # Committed and visible at once (an asynchronous commit is only a later flush).
    assert Task.objects.get(pk=taken.pk).assignee_id == worker.pk
    assert (taken.state, taken.version, len(taken.events_read)) == (
        TaskState.IN_PROGRESS, 2, 2)
    assert _synchronous_commit() == "on"


def test_a_take_in_the_callers_transaction_leaves_its_commit_durable(make_task, make_worker):
    """A caller's transaction may hold a decision: its commit waits for the flush."""
    worker = make_worker({"invoice-review": 3})
    make_task()
    assert connection.in_atomic_block  # the test's transaction
    with CaptureQueriesContext(connection) as queries:
        taken = task_take_next(worker=worker)
    assert taken.assignee == worker
    assert "synchronous_commit" not in queries[0]["sql"]
    assert _synchronous_commit() == "on"
