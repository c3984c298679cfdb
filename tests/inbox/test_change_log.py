"""One INFO line per applied transition on "inbox.tasks.changes" (./dev run's quiet output)."""

import logging

import pytest

from config.errors import Conflict
from inbox.services.worker import task_claim


def _changes(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "inbox.tasks.changes"]


def test_a_transition_logs_one_info_line_naming_the_change(make_task, worker, caplog):
    task = make_task()
    caplog.set_level(logging.INFO, logger="inbox.tasks.changes")
    task_claim(worker=worker, task_id=task.pk)
    [record] = _changes(caplog)
    assert record.levelno == logging.INFO
    assert record.getMessage() == (
        f"task {str(task.pk)[:8]}… queued → in_progress (claim by {worker.email})")


def test_a_refused_transition_logs_nothing(make_task, worker, caplog):
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    caplog.set_level(logging.INFO, logger="inbox.tasks.changes")
    caplog.clear()
    with pytest.raises(Conflict):
        task_claim(worker=worker, task_id=task.pk)
    assert _changes(caplog) == []
