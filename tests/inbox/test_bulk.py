"""rows_update writes many rows' columns in one statement, as save() would write each."""

import datetime

from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from inbox.bulk import rows_update
from inbox.models import Task

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
