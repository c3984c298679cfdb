"""config.compiled: a read compiled once per shape answers as the ORM does, with each
call's own values, and refuses a build whose values would not bind."""

import threading
import uuid

import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import OuterRef
from django.test.utils import CaptureQueriesContext

from accounts.models import User, WorkerSkill
from config.compiled import CompiledRead, Many
from inbox.models import Task, TaskEvent


def _held(shape, *, worker_id, task_id):
    """A task with its skill and holder, and the worker's proficiency in its skill."""
    tasks = Task.objects.none() if shape == "none" else Task.objects.all()
    return tasks.select_related("skill", "assignee").annotate(
        proficiency=WorkerSkill.objects.filter(worker_id=worker_id, skill_id=OuterRef(
            "skill_id")).order_by().values("proficiency")[:1]).filter(pk=task_id)


READ = CompiledRead(_held, worker_id=User._meta.pk, task_id=Task._meta.pk)


@pytest.fixture
def two_held(make_task, make_worker):
    from inbox.services.worker import task_claim

    ana = make_worker({"invoice-review": 3}, email="ana@example.com")
    bea = make_worker({"invoice-review": 5}, email="bea@example.com")
    first = task_claim(worker=ana, task_id=make_task().pk)
    second = task_claim(worker=bea, task_id=make_task().pk)
    return ana, bea, first, second


def test_each_call_binds_its_own_values_and_builds_what_the_orm_builds(two_held):
    ana, bea, first, second = two_held
    for worker, task in ((ana, first), (bea, second), (ana, second), (bea, first)):
        [got] = READ.run("all", worker_id=worker.pk, task_id=task.pk)
        [want] = _held("all", worker_id=worker.pk, task_id=task.pk)
        assert got.pk == task.pk
        assert [getattr(got, f.attname) for f in Task._meta.concrete_fields] == [
            getattr(want, f.attname) for f in Task._meta.concrete_fields]
        assert got.proficiency == want.proficiency == (3 if worker == ana else 5)
        # select_related: the skill and the holder came in the same statement.
        with CaptureQueriesContext(connection) as queries:
            assert got.skill.slug == "invoice-review"
            assert got.assignee.email == task.assignee.email
        assert len(queries) == 0


def test_one_statement_and_no_row_for_an_unknown_id(two_held):
    ana, *_ = two_held
    with CaptureQueriesContext(connection) as queries:
        assert READ.run("all", worker_id=ana.pk, task_id=uuid.uuid4()) == []
    assert len(queries) == 1


def test_a_malformed_id_fails_as_the_orms_filter_does(two_held):
    ana, *_ = two_held
    with pytest.raises(ValidationError):
        READ.run("all", worker_id=ana.pk, task_id="not-a-uuid")
    with pytest.raises(ValidationError):
        list(_held("all", worker_id=ana.pk, task_id="not-a-uuid"))


def test_a_shape_that_matches_nothing_runs_no_statement(two_held):
    ana, _, first, _ = two_held
    with CaptureQueriesContext(connection) as queries:
        assert READ.run("none", worker_id=ana.pk, task_id=first.pk) == []
    assert len(queries) == 0


def test_the_values_named_are_the_ones_declared(two_held):
    ana, *_ = two_held
    with pytest.raises(TypeError, match="task_id"):
        READ.run("all", worker_id=ana.pk)


def test_a_value_that_never_reaches_the_sql_as_a_parameter_fails_the_compile(db):
    unused = CompiledRead(lambda shape, *, user_id: User.objects.all(),
                          user_id=User._meta.pk)
    with pytest.raises(ValueError, match=r"\['user_id'\] never reach the SQL"):
        unused.run("all", user_id=1)


@pytest.mark.django_db(transaction=True)
def test_a_shape_compiled_in_one_thread_runs_on_anothers_connection(two_held):
    ana, bea, first, second = two_held
    read = CompiledRead(_held, worker_id=User._meta.pk, task_id=Task._meta.pk)
    assert read.run("all", worker_id=ana.pk, task_id=first.pk)[0].proficiency == 3
    answers = _in_another_thread(lambda: read.run("all", worker_id=bea.pk,
                                                  task_id=second.pk)[0])
    assert [(task.pk, task.proficiency) for task in answers] == [(second.pk, 5)]


def _in_another_thread(call, *, times: int = 1) -> list:
    """Return what call answered, called times in a thread of its own (with its own
    connection, closed after)."""
    from django.db import connections

    answers = []

    def other() -> None:
        try:
            for _ in range(times):
                answers.append(call())
        finally:
            connections.close_all()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    return answers


@pytest.mark.django_db(transaction=True)
def test_a_shapes_converters_are_found_once_for_each_connection(two_held, monkeypatch):
    """The ORM's iterable looks for every column's converters on each run; a shape looks
    once per connection (each thread's own: the backend's converters are its methods),
    and converts as the ORM does (the first test compares the values)."""
    from django.db.models.sql.compiler import SQLCompiler

    ana, bea, first, second = two_held
    read = CompiledRead(_held, worker_id=User._meta.pk, task_id=Task._meta.pk)
    found = []
    get_converters = SQLCompiler.get_converters
    monkeypatch.setattr(SQLCompiler, "get_converters",
                        lambda self, expressions: found.append(self.connection)
                        or get_converters(self, expressions))
    for _ in range(3):
        [task] = read.run("all", worker_id=ana.pk, task_id=first.pk)
        assert (task.pk, task.created_at, task.proficiency) == (first.pk, first.created_at, 3)
    assert found == [connection]

    answers = _in_another_thread(lambda: read.run("all", worker_id=bea.pk,
                                                  task_id=second.pk)[0], times=2)
    assert [(task.pk, task.proficiency) for task in answers] == [(second.pk, 5)] * 2
    assert len(found) == 2 and found[1] is not connection


MANY = CompiledRead(
    lambda shape, *, task_ids: Task.objects.filter(pk__in=task_ids).defer("input")
    .order_by("created_at"),
    task_ids=Many(Task._meta.pk))


def test_a_list_of_values_binds_each_item_and_each_length_is_a_shape(two_held, make_task):
    _, _, first, second = two_held
    third = make_task()
    for ids in ([first.pk], [first.pk, second.pk], [third.pk, first.pk, second.pk],
                [second.pk, third.pk]):
        got = MANY.run("all", task_ids=ids)
        want = list(Task.objects.filter(pk__in=ids).order_by("created_at"))
        assert [task.pk for task in got] == [task.pk for task in want]
        # defer() holds: the input is left unread, as the ORM leaves it.
        assert all(task.get_deferred_fields() == {"input"} for task in got)
    assert {lengths for _, _, lengths in MANY._shapes} >= {(1,), (2,), (3,)}


def test_an_empty_list_reads_nothing_without_a_statement(db):
    with CaptureQueriesContext(connection) as queries:
        assert MANY.run("all", task_ids=[]) == []
    assert len(queries) == 0


def test_a_foreign_keys_value_is_its_targets(two_held):
    """The history read: events by their task's id (a UUID), as the ORM orders them."""
    _, _, first, _ = two_held
    read = CompiledRead(lambda shape, *, task_id: TaskEvent.objects.filter(task_id=task_id)
                        .order_by("version"), task_id=TaskEvent._meta.get_field("task"))
    got = read.run("all", task_id=first.pk)
    want = list(first.events.order_by("version"))
    assert len(got) >= 2
    assert [(event.pk, event.hash) for event in got] == [(event.pk, event.hash)
                                                          for event in want]


LOCKED = CompiledRead(
    lambda shape, *, task_id: Task.objects.select_for_update().filter(pk=task_id),
    task_id=Task._meta.pk)


@pytest.mark.postgres  # SQLite has no FOR UPDATE: the ORM lets it pass there, and so do we
@pytest.mark.django_db(transaction=True)
def test_a_locking_read_outside_a_transaction_is_refused_every_time(two_held):
    """As the ORM refuses it: the first call (the compile) and every one after it."""
    from django.db import transaction
    from django.db.transaction import TransactionManagementError

    _, _, first, _ = two_held
    for _ in range(2):
        with pytest.raises(TransactionManagementError):
            LOCKED.run("all", task_id=first.pk)
        with transaction.atomic():
            assert [task.pk for task in LOCKED.run("all", task_id=first.pk)] == [first.pk]


def test_the_statement_is_what_run_sends(two_held):
    """statement(): the SQL and parameters of one call, as run() sends them."""
    ana, _, first, _ = two_held
    sql, params = READ.statement("all", worker_id=ana.pk, task_id=first.pk)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    [task] = READ.run("all", worker_id=ana.pk, task_id=first.pk)
    # The raw id: a uuid on PostgreSQL, its hex on SQLite.
    assert len(rows) == 1 and uuid.UUID(str(rows[0][0])) == task.pk == first.pk
    assert READ.statement("none", worker_id=ana.pk, task_id=first.pk) == (None, [])


# Earliest: each read's first value, in one statement compiled once -----------------------


def _firsts():
    return [(Task.objects.filter(state="queued"), "overall_deadline"),
            (Task.objects.filter(state="in_progress"), "work_deadline"),
            (Task.objects.all(), "offer_deadline"),
            (TaskEvent.objects.filter(action="take_next"), "at")]


def _orm_mins():
    from django.db.models import Min

    return [queryset.aggregate(first=Min(column))["first"] for queryset, column in _firsts()]


def test_earliest_answers_what_each_orm_min_answers(two_held, make_task):
    from config.compiled import Earliest

    make_task()
    make_task()  # two queued: their overall deadlines differ by their arrival
    earliest = Earliest(_firsts)
    got = earliest.run()
    want = _orm_mins()
    assert got == want
    # Set where the ORM's MIN is set, None where it is not: nothing is offered, so every
    # offer deadline is NULL, and NULLs are left out as MIN leaves them.
    assert [value is None for value in got] == [False, False, True, True]
    # Datetimes as the ORM gives them: aware, on SQLite too.
    assert all(value.tzinfo is not None for value in got[:2])


def test_earliest_leaves_nulls_out_of_a_column_that_has_values(two_held, make_task):
    from config.compiled import Earliest

    make_task()
    # Every task: two held (a work deadline each) and one queued (none).
    [first] = Earliest(lambda: [(Task.objects.all(), "work_deadline")]).run()
    assert first is not None
    assert first == min(t.work_deadline for t in Task.objects.exclude(work_deadline=None))


def test_earliest_compiles_once_and_runs_one_statement_each_call(two_held):
    from config.compiled import Earliest

    builds = []

    def build():
        builds.append(1)
        return _firsts()

    earliest = Earliest(build)
    with CaptureQueriesContext(connection) as queries:
        first = earliest.run()
        second = earliest.run()
    assert first == second == _orm_mins()
    assert len(queries) == 2 and len(builds) == 1
    sql, params = earliest.statement()
    assert queries[0]["sql"].startswith("SELECT (SELECT ") and sql.count("(SELECT ") == 4
    assert "queued" in params and "in_progress" in params


@pytest.mark.postgres
def test_the_clocks_and_the_senders_earliest_reads_use_their_partial_indexes(db):
    """Each earliest value is read from the end of its partial index, never a scan."""
    import re

    from inbox.services import callback
    from inbox.services import clock as clock_service

    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        for earliest, indexes in (
                (clock_service._EARLIEST, ("task_offer_due", "task_work_due",
                                           "task_overall_running")),
                (callback._NEXT_DUE, ("outbox_due",))):
            sql, params = earliest.statement()
            cursor.execute(f"EXPLAIN {sql}", params)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            for index in indexes:
                assert re.search(rf"Index (Only )?Scan using {index}\b", plan), plan
            assert "Seq Scan" not in plan and "Sort" not in plan, plan
