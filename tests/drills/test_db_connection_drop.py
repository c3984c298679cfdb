"""Drill: the PostgreSQL connection dies in the middle of a transition.

Another connection terminates the web's backend (``pg_terminate_backend``) within one
transition's transaction: before its change is written, or after the task row, its history
event and its outbox row are written (one statement on PostgreSQL:
inbox.bulk.row_update_inserting) and before the commit. Nothing may be half applied: the
task, its history and the outbox are as before, and the same request, retried, succeeds
once.
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
@pytest.mark.parametrize("when", ["before the change is written",
                                  "after the task row, the history event and the outbox row"])
def test_a_connection_killed_mid_transition_leaves_nothing_half_applied(
    make_task, make_worker, monkeypatch, when
):
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    before = _snapshot(task)
    # A decision's change: the task's row, its event and its outbox row.
    real_write = lifecycle.row_update_inserting
    killed: list[int] = []

    def write_then_die(row, fields, inserts, **where):
        assert [type(one) for one in (row, *inserts)] == [Task, TaskEvent, Outbox]
        if when == "before the change is written":
            killed.append(backend_pid())
            backend_terminate(killed[-1])
        written = real_write(row, fields, inserts, **where)
        if when == "after the task row, the history event and the outbox row":
            assert written == 1
            killed.append(backend_pid())
            backend_terminate(killed[-1])
        return written

    monkeypatch.setattr(lifecycle, "row_update_inserting", write_then_die)
    with pytest.raises((OperationalError, InterfaceError)):
        task_complete(worker=worker, task_id=task.pk, answer=APPROVE,
                      expected_version=task.version)
    assert killed  # the drill reached its moment
    monkeypatch.setattr(lifecycle, "row_update_inserting", real_write)

    connection.close()  # what Django does at the end of the failed request
    assert backend_pid() != killed[0]
    assert _snapshot(task) == before
    done = task_complete(worker=worker, task_id=task.pk, answer=APPROVE,
                         expected_version=task.version)
    assert (done.state, done.version) == (TaskState.COMPLETING, task.version + 1)
    assert Outbox.objects.filter(task=task).count() == 1
    assert events_verify(task=done) is None
