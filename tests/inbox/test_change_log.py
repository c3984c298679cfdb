"""One INFO line per applied transition on "inbox.tasks.changes" (./dev run's quiet output)."""

import logging

import pytest
from django.db import transaction

from inbox.services.worker import task_claim


def _changes(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "inbox.tasks.changes"]


def test_a_committed_transition_logs_one_line_naming_the_change(
        make_task, worker, caplog, django_capture_on_commit_callbacks):
    task = make_task()
    caplog.set_level(logging.INFO, logger="inbox.tasks.changes")
    with django_capture_on_commit_callbacks(execute=True):
        task_claim(worker=worker, task_id=task.pk)
    assert _changes(caplog) == [
        f"task {str(task.pk)[:8]}… queued → in_progress (claim by {worker.email})"]
    record = next(r for r in caplog.records if r.name == "inbox.tasks.changes")
    assert record.levelno == logging.INFO


def test_a_rolled_back_transition_logs_nothing(
        make_task, worker, caplog, django_capture_on_commit_callbacks):
    task = make_task()
    caplog.set_level(logging.INFO, logger="inbox.tasks.changes")
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        with transaction.atomic():
            task_claim(worker=worker, task_id=task.pk)
            raise RuntimeError("the caller fails after the claim")
    assert _changes(caplog) == []
