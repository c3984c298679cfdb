"""Supervisor actions on tasks: reassign, return to queue, extend a clock, abort; and in bulk.

Each checks that the supervisor may manage the task (access_task, action "manage"), then
runs one transition; every action is in the task's history with who and why.
"""

import datetime
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from accounts.models import User
from config.errors import Conflict, InboxError
from inbox import lifecycle
from inbox.dispatch import dispatch_after_commit, lock_worker
from inbox.models import OPEN_STATES, Task, TaskState
from inbox.selectors import access_task, eligibility_problem, visible_tasks, worker_load
from inbox.timeouts import task_abort

CLOCKS = ("offer", "work", "overall")
MAX_EXTENSION = datetime.timedelta(days=30)


def supervised_tasks(*, supervisor: User, escalated: bool = False,
                     overdue: bool = False) -> QuerySet[Task]:
    """Return the open tasks the supervisor manages; escalated or overdue ones if asked."""
    tasks = visible_tasks(user=supervisor).filter(state__in=OPEN_STATES)
    now = timezone.now()
    if escalated:
        tasks = tasks.filter(state=TaskState.ESCALATED)
    if overdue:
        tasks = tasks.filter(
            Q(state=TaskState.ESCALATED) | Q(overall_deadline__lte=now)
            | Q(work_deadline__lte=now) | Q(offer_deadline__lte=now)
        )
    return tasks.select_related("skill", "assignee").order_by("overall_deadline")


def task_reassign(*, supervisor: User, task_id: Any, worker: User, reason: str,
                  expected_version: int | None = None) -> Task:
    """Give the task to a named eligible worker, who holds it from now (work clock starts)."""
    task = access_task(user=supervisor, task_id=task_id, action="manage")
    _need_reason(reason)
    problem = eligibility_problem(user=worker, task=task)
    if problem:
        raise Conflict(f"{worker.email} cannot take this task: {problem}")
    now = timezone.now()

    def change(t: Task) -> None:
        t.assignee = worker
        t.offer_deadline = None
        t.work_deadline = now + datetime.timedelta(seconds=t.work_seconds)

    with transaction.atomic():
        worker = lock_worker(worker)
        if worker_load(user=worker) >= worker.capacity:
            raise Conflict(f"{worker.email} is at capacity ({worker.capacity}).")
        return lifecycle.transition(
            task_id=task.pk, action="reassign", allowed_from=OPEN_STATES,
            to_state=TaskState.IN_PROGRESS, actor=supervisor, reason=reason,
            expected_version=expected_version, change=change,
            data={"worker": worker.email},
        )


def task_return(*, supervisor: User, task_id: Any, reason: str,
                expected_version: int | None = None) -> Task:
    """Put the task back in its queue, free for anyone eligible."""
    task = access_task(user=supervisor, task_id=task_id, action="manage")
    _need_reason(reason)

    def change(t: Task) -> None:
        t.assignee = None
        t.offer_deadline = t.work_deadline = None

    task = lifecycle.transition(
        task_id=task.pk, action="return", allowed_from=OPEN_STATES, to_state=TaskState.QUEUED,
        actor=supervisor, reason=reason, expected_version=expected_version, change=change,
    )
    dispatch_after_commit(task)
    return task


def task_extend(*, supervisor: User, task_id: Any, clock: str, seconds: int, reason: str,
                expected_version: int | None = None) -> Task:
    """Move one of the task's running clocks later by seconds."""
    task = access_task(user=supervisor, task_id=task_id, action="manage")
    _need_reason(reason)
    if clock not in CLOCKS:
        raise InboxError(f"clock must be one of {', '.join(CLOCKS)}, not {clock!r}")
    if not 1 <= seconds <= MAX_EXTENSION.total_seconds():
        raise InboxError(f"seconds must be from 1 to {int(MAX_EXTENSION.total_seconds())}")
    column = f"{clock}_deadline"

    def change(t: Task) -> None:
        current = getattr(t, column)
        if current is None:
            raise Conflict(f"The {clock} clock of this task is not running.")
        setattr(t, column, max(current, timezone.now()) + datetime.timedelta(seconds=seconds))

    return lifecycle.transition(
        task_id=task.pk, action=f"extend_{clock}", allowed_from=OPEN_STATES,
        to_state=task.state, actor=supervisor, reason=reason,
        # The state is kept as read: a task changed since then (reassigned, timed out) is a
        # Conflict, never put back into the state it has left.
        expected_version=task.version if expected_version is None else expected_version,
        change=change, data={"seconds": seconds},
    )


def task_abort_by(*, supervisor: User, task_id: Any, reason: str,
                  expected_version: int | None = None) -> Task:
    """Abort the task: Step Functions hears HumanTask.TimedOut with the supervisor's reason."""
    task = access_task(user=supervisor, task_id=task_id, action="manage")
    _need_reason(reason)
    return task_abort(task_id=task.pk, reason=reason, actor=supervisor,
                      version=expected_version)


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


def _need_reason(reason: str) -> None:
    if not reason.strip():
        raise Conflict("Say why: every supervisor action is recorded with its reason.")
