"""Drill: the PostgreSQL connection dies in the middle of a transition.

Another connection terminates the web's backend (``pg_terminate_backend``) between two
writes of one transition: after the task row is updated, or after its history event and
its outbox row are written (one statement on PostgreSQL: inbox.bulk.rows_insert_each) and
before the commit. Nothing may be half applied: the task, its history and the outbox are
as before, and the same request, retried, succeeds once.
"""

import pytest
from django.db import InterfaceError, OperationalError, connection

from inbox import lifecycle
from inbox.history import events_verify
from inbox.models import Outbox, Task, TaskEvent, TaskState
from inbox.services.worker import task_complete, task_take_next
from tests.drills.conftest import backend_pid, backend_terminate

APPROVE = {"decision": "approve", "comment": "fine"}


def _snapshot(task: Task) -> tuple:
    row = Task.objects.values("state", "version", "answer", "assignee_id").get(pk=task.pk)
    events = list(TaskEvent.objects.filter(task=task).values_list("version", "hash"))
    return row, events, Outbox.objects.filter(task=task).count()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("when", ["after the task row",
                                  "after the history event and the outbox row"])
def test_a_connection_killed_mid_transition_leaves_nothing_half_applied(
    make_task, make_worker, monkeypatch, when
):
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    before = _snapshot(task)
    real_write = lifecycle.rows_insert_each  # a decision's event and outbox row
    killed: list[int] = []

    def write_then_die(*rows):
        assert [type(row) for row in rows] == [TaskEvent, Outbox]
        if when == "after the task row":
            killed.append(backend_pid())
            backend_terminate(killed[-1])
        real_write(*rows)
        if when == "after the history event and the outbox row":
            killed.append(backend_pid())
            backend_terminate(killed[-1])

    monkeypatch.setattr(lifecycle, "rows_insert_each", write_then_die)
    with pytest.raises((OperationalError, InterfaceError)):
        task_complete(worker=worker, task_id=task.pk, answer=APPROVE,
                               expected_version=task.version)
    assert killed  # the drill reached its moment
    monkeypatch.setattr(lifecycle, "rows_insert_each", real_write)

    connection.close()  # what Django does at the end of the failed request
    assert backend_pid() != killed[0]
    assert _snapshot(task) == before
    done = task_complete(worker=worker, task_id=task.pk, answer=APPROVE,
                                  expected_version=task.version)
    assert (done.state, done.version) == (TaskState.COMPLETING, task.version + 1)
    assert Outbox.objects.filter(task=task).count() == 1
    assert events_verify(task=done) is None
