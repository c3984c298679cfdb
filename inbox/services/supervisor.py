"""What a supervisor does with tasks: reassign, return to the queue, extend a clock, abort;
one by one and in bulk.

Each checks that the supervisor may manage the task (access_task, action "manage": 404
if not), then applies one row of the transition table; every action is in the task's
history with who and why (the table refuses a blank reason).
"""

import datetime
from collections.abc import Callable
from typing import Any

from django.db import transaction

from accounts.models import User
from config.errors import Conflict, InboxError
from inbox.eligibility import OFFER_ONLY, verdict_words, worker_verdict
from inbox.lifecycle import SUPERVISOR_REASON, transition
from inbox.models import Task
from inbox.selectors import access_task, worker_lock

CLOCKS = ("offer", "work", "overall")
MAX_EXTENSION = datetime.timedelta(days=30)


def task_reassign(*, supervisor: User, task_id: Any, worker: User, reason: str,
                  expected_version: int | None = None) -> Task:
    """Give the task to a named eligible worker, who holds it from now (work clock starts).

    The worker must be assignable (inbox.eligibility: a worker of the skill at the task's
    proficiency, available, with room for its weight, not excluded by separation of
    duties); judged under the worker's lock, so capacity and availability hold at commit.
    """
    task = access_task(user=supervisor, task_id=task_id, action="manage")
    _reason_given(reason)
    with transaction.atomic():
        worker = worker_lock(user=worker)
        verdict = worker_verdict(task=task, worker=worker)
        if not verdict.assignable:
            blocking = next(r for r in verdict.reasons if r not in OFFER_ONLY)
            raise Conflict(f"{worker.email} cannot take this task: "
                           f"{verdict_words(task=task, verdict=verdict, reason=blocking)}")
        return transition(task_id=task.pk, action="reassign", actor=supervisor, reason=reason,
                          expected_version=expected_version, worker=worker)


def task_return(*, supervisor: User, task_id: Any, reason: str,
                expected_version: int | None = None) -> Task:
    """Put the task back in its queue, free for anyone eligible (offered on, if pushed)."""
    task = access_task(user=supervisor, task_id=task_id, action="manage")
    return transition(task_id=task.pk, action="return", actor=supervisor, reason=reason,
                      expected_version=expected_version)


def task_extend(*, supervisor: User, task_id: Any, clock: str, seconds: int, reason: str,
                expected_version: int | None = None) -> Task:
    """Move one of the task's running clocks later by seconds."""
    task = access_task(user=supervisor, task_id=task_id, action="manage")
    _reason_given(reason)
    if clock not in CLOCKS:
        raise InboxError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
    if not 1 <= seconds <= MAX_EXTENSION.total_seconds():
        raise InboxError(f"seconds must be from 1 to {int(MAX_EXTENSION.total_seconds())}")
    return transition(
        task_id=task.pk, action=f"extend_{clock}", actor=supervisor, reason=reason,
        # The state is kept as read: a task changed since then (reassigned, timed out) is a
        # Conflict, never put back into the state it has left.
        expected_version=task.version if expected_version is None else expected_version,
        seconds=seconds,
    )


def task_abort(*, supervisor: User, task_id: Any, reason: str,
               expected_version: int | None = None) -> Task:
    """Abort the task: Step Functions hears HumanTask.TimedOut with the supervisor's reason."""
    task = access_task(user=supervisor, task_id=task_id, action="manage")
    return transition(task_id=task.pk, action="abort", actor=supervisor, reason=reason,
                      expected_version=expected_version)


def tasks_bulk(*, supervisor: User, task_ids: list[Any], action: Callable[..., Task],
               **arguments: Any) -> dict[str, str]:
    """Apply one supervisor action to each task; return each id's outcome ("ok" or why not).

    Each task is its own transaction: one that cannot be changed does not stop the rest.
    """
    outcomes: dict[str, str] = {}
    for task_id in task_ids:
        try:
            action(supervisor=supervisor, task_id=task_id, **arguments)
            outcomes[str(task_id)] = "ok"
        except InboxError as exc:
            outcomes[str(task_id)] = exc.message
    return outcomes


def _reason_given(reason: str) -> None:
    """Refuse a blank reason before the checks that come ahead of the transition's own."""
    if not reason.strip():
        raise Conflict(SUPERVISOR_REASON)
