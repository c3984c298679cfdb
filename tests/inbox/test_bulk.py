"""rows_update writes many rows' columns in one statement, as save() would write each;
rows_insert writes new rows in one statement, as bulk_create writes them; row_insert and
row_update write one row as save() does, in a statement written once; rows_insert_each
writes rows of several tables as row_insert writes each, in one round trip on PostgreSQL;
row_update_inserting writes a conditional update and, only if it changed the row, the rows
that go with it, in one round trip on PostgreSQL."""

import datetime
import secrets
import uuid

import pytest
from django.db import DataError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inbox.bulk import (
    row_insert,
    row_update,
    row_update_inserting,
    rows_insert,
    rows_insert_each,
    rows_update,
)
from inbox.models import Outbox, Task, TaskEvent

FIELDS = ["priority", "work_deadline", "answer", "assignee", "reason"]


def _columns(task_ids: list) -> list[tuple]:
    return list(Task.objects.filter(pk__in=task_ids).order_by("pk")
                .values_list("pk", *[f"{name}_id" if name == "assignee" else name
                                     for name in FIELDS]))


def test_rows_update_writes_what_save_writes_in_one_statement(make_task, make_worker):
    ana = make_worker({"invoice-review": 3})
    at = timezone.now().replace(microsecond=123456) + datetime.timedelta(hours=2)
    changes = [
        {"priority": 7, "work_deadline": at, "answer": {"decision": "approve", "n": [1, "é"]},
         "assignee": ana, "reason": "it's \"quoted\""},
        {"priority": 99, "work_deadline": None, "answer": None, "assignee": None,
         "reason": ""},
        {"priority": 1, "work_deadline": at - datetime.timedelta(days=3), "answer": [],
         "assignee": ana, "reason": "x" * 2000},
    ]
    saved, batched = ([make_task() for _ in changes] for _ in range(2))
    for task, change in zip(saved, changes, strict=True):
        for name, value in change.items():
            setattr(task, name, value)
        task.save(update_fields=FIELDS)
    for task, change in zip(batched, changes, strict=True):
        for name, value in change.items():
            setattr(task, name, value)

    with CaptureQueriesContext(connection) as queries:
        rows_update(Task, batched, FIELDS)

    assert len(queries) == 1
    written = [row[1:] for row in _columns([task.pk for task in batched])]
    expected = [row[1:] for row in _columns([task.pk for task in saved])]
    assert sorted(written, key=repr) == sorted(expected, key=repr)
    # A Python None is SQL NULL, as save() writes it (not JSON null).
    assert Task.objects.filter(pk__in=[t.pk for t in batched], answer__isnull=True).count() == 1


def test_rows_update_of_nothing_sends_nothing(db):
    with CaptureQueriesContext(connection) as queries:
        rows_update(Task, [], FIELDS)
    assert len(queries) == 0


def _copies(tasks: list[Task], **changes) -> list[Task]:
    """New unsaved tasks with every column of tasks but the key and the token digest."""
    copies = []
    for task in tasks:
        values = {field.attname: getattr(task, field.attname)
                  for field in Task._meta.concrete_fields}
        values.update(id=uuid.uuid4(), token_digest=secrets.token_hex(32), **changes)
        copies.append(Task(**values))
    return copies


def _rows(tasks: list[Task]) -> list[tuple]:
    """Every column of tasks but the key, the token digest and the insert's own clock, in
    the tasks' order."""
    names = [field.attname for field in Task._meta.concrete_fields
             if field.attname not in ("id", "token_digest", "created_at")]
    found = {row[0]: row[1:] for row in
             Task.objects.filter(pk__in=[task.pk for task in tasks]).values_list("pk", *names)}
    return [found[task.pk] for task in tasks]


def test_rows_insert_writes_what_bulk_create_writes_in_one_statement(make_task):
    made = [make_task(input={"n": [1, "é", None], "deep": {"x": "\"quoted\""}}),
            make_task(priority=0), make_task(title="x" * 200)]
    made[1].work_deadline = timezone.now().replace(microsecond=654321)
    made[2].answer = None
    inserted, created = _copies(made), _copies(made)
    for one, two in zip(inserted, created, strict=True):
        one.execution_arn = two.execution_arn = f"{one.execution_arn}-copy-{uuid.uuid4()}"

    with CaptureQueriesContext(connection) as queries:
        rows_insert(Task, inserted)
    Task.objects.bulk_create(created)

    assert len(queries) == 1
    assert _rows(inserted) == _rows(created)
    # The clocks auto_now_add keeps are stamped at the insert, as bulk_create stamps them.
    assert all(task.created_at > source.created_at for task, source in zip(inserted, made,
                                                                           strict=True))
    assert bytes(Task.objects.get(pk=inserted[0].pk).token_ciphertext) == bytes(
        made[0].token_ciphertext)
    # Saved instances, as bulk_create leaves them: a save() now updates.
    assert not any(task._state.adding for task in inserted)
    inserted[0].reason = "changed"
    inserted[0].save(update_fields=["reason"])
    assert Task.objects.get(pk=inserted[0].pk).reason == "changed"


@pytest.mark.postgres  # SQLite does not hold a varchar to its length
def test_rows_insert_refuses_a_value_too_long_as_bulk_create_does(make_task):
    """A value longer than its column is refused, never cut short by the array's cast."""
    [task] = _copies([make_task()], stage="s" * 300)
    with pytest.raises(DataError), transaction.atomic():
        rows_insert(Task, [task])
    assert not Task.objects.filter(pk=task.pk).exists()


@pytest.mark.postgres  # SQLite does not hold a varchar to its length
def test_rows_update_refuses_a_value_too_long_as_save_does(make_task):
    task = make_task()
    task.stage = "s" * 300
    with pytest.raises(DataError), transaction.atomic():
        rows_update(Task, [task], ["stage"])
    assert Task.objects.get(pk=task.pk).stage == "review"


def test_rows_insert_of_nothing_sends_nothing_and_a_row_without_a_key_is_refused(db):
    with CaptureQueriesContext(connection) as queries:
        rows_insert(Task, [])
    assert len(queries) == 0
    with pytest.raises(ValueError, match="primary key"):
        rows_insert(Task, [Task(id=None)])


def _event(task: Task, version: int, **changes) -> TaskEvent:
    values = {"task": task, "version": version, "action": "note", "from_state": "queued",
              "to_state": "queued", "actor_id": None, "actor_label": "system",
              "reason": "it's \"quoted\" é", "data": {"n": [1, None], "s": "x"},
              "at": timezone.now().replace(microsecond=123456), "prev_hash": "0" * 64,
              "hash": secrets.token_hex(32)}
    return TaskEvent(**{**values, **changes})


def _event_columns(event: TaskEvent) -> tuple:
    names = [field.attname for field in TaskEvent._meta.concrete_fields
             if field.attname not in ("id", "version", "hash")]
    return TaskEvent.objects.filter(pk=event.pk).values_list(*names).get()


def test_rows_insert_of_rows_whose_keys_the_database_makes_sets_each_its_own(make_task):
    """Events (an auto key): the rows bulk_create writes, in one statement, each key set on
    its own row (read back: each key names the row of that instance's version)."""
    task = make_task()
    at = timezone.now()
    inserted = [_event(task, 80 + n, reason=f"r{n}", at=at) for n in range(7)]
    created = [_event(task, 87 + n, reason=f"r{n}", at=at) for n in range(7)]
    with CaptureQueriesContext(connection) as queries:
        rows_insert(TaskEvent, inserted)
    TaskEvent.objects.bulk_create(created)
    assert len(queries) == 1
    assert all(event.pk is not None and not event._state.adding for event in inserted)
    stored = dict(TaskEvent.objects.filter(pk__in=[e.pk for e in inserted])
                  .values_list("pk", "version"))
    assert [stored[event.pk] for event in inserted] == list(range(80, 87))
    assert [_event_columns(one) for one in inserted] == [_event_columns(two) for two in created]
    with pytest.raises(ValueError, match="primary key"):  # keys given and not: refused
        rows_insert(TaskEvent, [_event(task, 95), _event(task, 96, id=10**9)])


def test_row_insert_writes_what_save_writes_and_sets_the_key_the_database_made(make_task):
    task = make_task()
    saved, inserted = _event(task, 90), _event(task, 91)
    saved.save(force_insert=True)
    with CaptureQueriesContext(connection) as queries:
        row_insert(inserted)
    assert len(queries) == 1
    assert inserted.pk is not None and inserted.pk > saved.pk
    assert _event_columns(inserted) == _event_columns(saved)
    assert not inserted._state.adding
    # A row whose key is made in Python keeps it: a task copy, as save() writes it.
    [copy] = _copies([task])
    row_insert(copy)
    assert Task.objects.filter(pk=copy.pk).exists()
    # An outbox row with a NULL output (SQL NULL, as save() writes None).
    outbox = Outbox(task=task, decision_version=2, kind="success", output=None,
                    next_attempt_at=timezone.now())
    row_insert(outbox)
    assert Outbox.objects.filter(pk=outbox.pk, output__isnull=True).exists()


def test_rows_insert_each_writes_what_row_insert_writes_and_sets_each_key(make_task):
    """A transition's event and outbox row: one statement on PostgreSQL, one each elsewhere;
    the same rows either way, each key the database made set on its row."""
    task = make_task()
    alone_event, event = _event(task, 90), _event(task, 91)
    row_insert(alone_event)
    outbox = Outbox(task=task, decision_version=91, kind="success", output={"ok": True},
                    next_attempt_at=timezone.now())
    [copy] = _copies([task])  # a row whose key is made in Python, given
    with CaptureQueriesContext(connection) as queries:
        rows_insert_each(event, outbox, copy)
    assert len(queries) == (1 if connection.vendor == "postgresql" else 3)
    assert event.pk is not None and event.pk > alone_event.pk and outbox.pk is not None
    assert _event_columns(event) == _event_columns(alone_event)
    assert Outbox.objects.get(pk=outbox.pk).output == {"ok": True}
    assert Task.objects.filter(pk=copy.pk).exists()
    assert not (event._state.adding or outbox._state.adding or copy._state.adding)


@pytest.mark.postgres  # SQLite does not hold a column to its length
@pytest.mark.django_db(transaction=True)
def test_rows_insert_each_writes_nothing_when_one_row_is_refused(make_task):
    """One statement, even in autocommit: a refused row (a value too long) leaves none of
    the rows before it, where one statement each would have committed them."""
    task = make_task()
    event = _event(task, 92)
    outbox = Outbox(task=task, decision_version=92, kind="success", output=None,
                    next_attempt_at=timezone.now())
    too_long = _event(task, 93, actor_label="x" * 300)
    assert connection.get_autocommit()
    with pytest.raises(DataError):
        rows_insert_each(event, outbox, too_long)
    assert not TaskEvent.objects.filter(task=task, version__in=[92, 93]).exists()
    assert not Outbox.objects.filter(task=task, decision_version=92).exists()


def _changed_alike(make_task, make_worker, *, reason: str) -> tuple[Task, Task, datetime.datetime]:
    """Two tasks with the same FIELDS changed in memory, the first saved by save(): the
    second is for the write under test, to compare with it. Also the moment they hold."""
    ana = make_worker({"invoice-review": 3})
    saved, updated = make_task(), make_task()
    at = timezone.now().replace(microsecond=123456)
    for task in (saved, updated):
        task.priority, task.work_deadline, task.answer, task.assignee = 9, at, {"a": 1}, ana
        task.reason = reason
    saved.save(update_fields=FIELDS)
    return saved, updated, at


def test_row_update_writes_what_save_writes_only_where_the_condition_holds(make_task,
                                                                          make_worker):
    saved, updated, _ = _changed_alike(make_task, make_worker, reason="é")
    version = updated.version
    with CaptureQueriesContext(connection) as queries:
        assert row_update(updated, FIELDS, version=version + 1) == 0  # not the version read
        assert row_update(updated, FIELDS, version=version) == 1
    assert len(queries) == 2
    assert _columns([updated.pk])[0][1:] == _columns([saved.pk])[0][1:]
    updated.reason = "again"
    assert row_update(updated, ["reason"]) == 1
    assert Task.objects.get(pk=updated.pk).reason == "again"


def test_row_update_inserting_writes_the_rows_only_with_the_update(make_task, make_worker):
    """The same columns and rows as row_update then rows_insert_each; none of the rows when
    the update's condition does not hold; one statement on PostgreSQL, either way."""
    saved, updated, at = _changed_alike(make_task, make_worker, reason="it's é")
    alone = _event(updated, 89)
    row_insert(alone)
    version = updated.version
    refused_event = _event(updated, 90)
    refused_outbox = Outbox(task=updated, decision_version=90, kind="success",
                            output={"ok": True}, next_attempt_at=at)
    with CaptureQueriesContext(connection) as queries:
        assert row_update_inserting(updated, FIELDS, (refused_event, refused_outbox),
                                    version=version + 1) == 0  # not the version read
    assert len(queries) == 1
    assert refused_event.pk is None and refused_outbox.pk is None
    assert refused_event._state.adding and refused_outbox._state.adding
    assert not TaskEvent.objects.filter(task=updated, version=90).exists()
    assert not Outbox.objects.filter(task=updated).exists()
    assert Task.objects.get(pk=updated.pk).priority != 9

    event = _event(updated, 91)
    outbox = Outbox(task=updated, decision_version=91, kind="success", output=None,
                    error="", cause="", next_attempt_at=at)
    with CaptureQueriesContext(connection) as queries:
        assert row_update_inserting(updated, FIELDS, (event, outbox), version=version) == 1
    on_postgres = connection.vendor == "postgresql"
    assert len(queries) == (1 if on_postgres else 3)
    assert _columns([updated.pk])[0][1:] == _columns([saved.pk])[0][1:]
    assert event.pk is not None and event.pk > alone.pk and outbox.pk is not None
    assert not (event._state.adding or outbox._state.adding)
    assert _event_columns(event) == _event_columns(alone)
    stored = Outbox.objects.get(pk=outbox.pk)
    assert (stored.task_id, stored.decision_version, stored.kind, stored.output,
            stored.next_attempt_at) == (updated.pk, 91, "success", None, at)


@pytest.mark.postgres  # SQLite does not hold a column to its length
@pytest.mark.django_db(transaction=True)
def test_row_update_inserting_writes_nothing_when_a_row_is_refused(make_task):
    """A value too long for its column is refused as save() refuses it (not cut short by
    the statement's casts), and the update goes with it: one statement, even in
    autocommit."""
    task = make_task()
    version = task.version
    task.priority = 77
    assert connection.get_autocommit()
    with pytest.raises(DataError):
        row_update_inserting(task, ["priority"], (_event(task, 95, actor_label="x" * 300),),
                             version=version)
    assert Task.objects.get(pk=task.pk).priority != 77
    assert not TaskEvent.objects.filter(task=task, version=95).exists()
