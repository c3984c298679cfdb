"""What happens when a task's clock runs out: one transition per clock.

Each is conditioned on the state and version the sweeper saw, so a task that changed
meanwhile (accepted at the last moment, or handled by another sweeper) is left alone:
running a handler twice, or from two processes at once, applies a timeout once.
"""

import datetime
from typing import Any

from django.utils import timezone

from inbox import lifecycle
from inbox.dispatch import dispatch_after_commit
from inbox.models import OPEN_STATES, OutboxKind, Task, TaskEvent, TaskPass, TaskState

CLOCK = "clock"
ESCALATE = "escalate"


def task_offer_lapse(*, task_id: Any, version: int) -> Task:
    """Withdraw an offer nobody answered; its worker is not offered the task again."""

    def change(task: Task) -> None:
        passed, created = TaskPass.objects.get_or_create(
            task=task, worker_id=task.assignee_id,
            defaults={"why": TaskPass.Why.LAPSED, "reason": "The offer ran out."},
        )
        if not created and passed.why == TaskPass.Why.LAPSED:
            # Offered again after the cool-down and lapsed again: a new cool-down starts.
            passed.at = timezone.now()
            passed.save(update_fields=["at"])
        task.assignee = None
        task.offer_deadline = None

    task = lifecycle.transition(
        task_id=task_id, action="offer_timeout", allowed_from=[TaskState.OFFERED],
        to_state=TaskState.QUEUED, system=CLOCK, expected_version=version, change=change,
        reason="Nobody accepted the offer in time; it goes to the next worker.",
    )
    dispatch_after_commit(task)
    return task


def task_work_timeout(*, task_id: Any, version: int) -> Task:
    """Take a task back from a worker who held it past its work clock."""

    def change(task: Task) -> None:
        task.assignee = None
        task.work_deadline = None

    task = lifecycle.transition(
        task_id=task_id, action="work_timeout", allowed_from=[TaskState.IN_PROGRESS],
        to_state=TaskState.QUEUED, system=CLOCK, expected_version=version, change=change,
        reason="The work clock ran out before the task was finished; it is back in the queue.",
    )
    dispatch_after_commit(task)
    return task


def task_overall_timeout(*, task_id: Any, version: int,
                         now: datetime.datetime | None = None) -> Task:
    """Run the task's timeout policy: abort (tell Step Functions) or escalate once.

    now is the moment the sweeper saw the clock run out; the escalation clock starts there.
    """
    task = Task.objects.get(pk=task_id)
    # Once only: a task reassigned or returned after its escalation, and still open when
    # the escalation clock runs out, is aborted, not escalated again.
    escalated = TaskEvent.objects.filter(task_id=task_id, action=ESCALATE).exists()
    if task.on_timeout == "escalate" and not escalated:
        return _escalate(task_id=task_id, version=version, now=now or timezone.now())
    reason = (
        "The escalation clock ran out before the escalated task was finished." if escalated
        else f"The overall clock ran out ({_duration(task)})."
    )
    return task_abort(task_id=task_id, version=version, actor=None, reason=reason,
                      action="overall_timeout")


def _escalate(*, task_id: Any, version: int, now: datetime.datetime) -> Task:
    def change(task: Task) -> None:
        task.assignee = None
        task.offer_deadline = task.work_deadline = None
        # The escalation clock replaces the overall one; when it runs out, the task aborts.
        task.overall_deadline = now + datetime.timedelta(seconds=task.escalation_seconds or 0)

    task = lifecycle.transition(
        task_id=task_id, action=ESCALATE, allowed_from=[*OPEN_STATES],
        to_state=TaskState.ESCALATED, system=CLOCK, expected_version=version, change=change,
        reason="The overall clock ran out; the supervisors have the escalation clock to act.",
    )
    from inbox.notifications import notify_after_commit

    notify_after_commit(kind="escalated", task_id=task.pk)
    return task


def task_abort(*, task_id: Any, reason: str, actor: Any = None, version: int | None = None,
               action: str = "abort") -> Task:
    """Give up on an open task: Step Functions hears HumanTask.TimedOut with the reason."""

    def change(task: Task) -> None:
        task.offer_deadline = task.work_deadline = None
        task.next_heartbeat_at = None
        task.reason = reason

    return lifecycle.transition(
        task_id=task_id, action=action, allowed_from=[*OPEN_STATES],
        to_state=TaskState.ABORTING, actor=actor, system=CLOCK, expected_version=version,
        reason=reason, change=change,
        callback=lifecycle.Callback(kind=OutboxKind.FAILURE, error=lifecycle.TIMED_OUT_ERROR,
                                    cause=reason[:32768]),
    )


def _duration(task: Task) -> str:
    seconds = task.overall_seconds
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"
