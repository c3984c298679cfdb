"""The dispatcher: who is offered a task of a push queue, and when.

An offer reserves a queued task for one eligible worker until its offer clock runs out
(the clock service withdraws it then). It is made after the change that freed the task
commits (inbox.effects enqueues ``dispatch_task``, or ``dispatch_many_task`` for a
batch's), and beat offers whatever nobody was available for (``dispatch_pending``).
"""

import logging
from typing import Any

from django.db import transaction

from accounts.models import Dispatch, User
from config.errors import InboxError
from inbox.eligibility import REOFFER_COOLDOWN, eligible_verdicts, worker_verdict
from inbox.lifecycle import IllegalTransition, transition
from inbox.models import Task, TaskState
from inbox.selectors import worker_lock

__all__ = ["REOFFER_COOLDOWN", "dispatch_pending", "offer_candidates", "task_dispatch",
           "tasks_dispatch"]

logger = logging.getLogger(__name__)

DISPATCH_BATCH = 200


def offer_candidates(*, task: Task) -> list[User]:
    """Return the workers the task may be offered to, in the order dispatch tries them.

    The eligible verdicts of inbox.eligibility (the explainer on the task page shows the
    same verdicts): least loaded first, those who let its offer lapse after everyone else.
    One query, narrowed to the likely candidates (eligible_verdicts).
    """
    return [verdict.worker for verdict in eligible_verdicts(task=task)]


def task_dispatch(*, task_id: Any) -> Task | None:
    """Offer a queued push-queue task to the best eligible worker; None if nobody is."""
    task = Task.objects.select_related("skill").filter(pk=task_id).first()
    if task is None or task.state != TaskState.QUEUED or task.skill.dispatch != Dispatch.PUSH:
        return None
    for worker in offer_candidates(task=task):
        with transaction.atomic():
            worker = worker_lock(user=worker)
            # Judged again under the worker's lock: filled up or gone away since the
            # candidates were read (going away takes the same lock).
            if not worker_verdict(task=task, worker=worker).eligible:
                continue
            try:
                return transition(task_id=task.pk, action="offer", worker=worker)
            except IllegalTransition:
                return None  # Someone else changed the task first; nothing to offer.
    return None


def tasks_dispatch(*, task_ids: list[Any]) -> int:
    """Offer each of the tasks (one batch's on-commit dispatches); return how many were offered.

    One task that fails to be offered does not stop the others: each failure is logged
    with its traceback, and once all were tried the first is raised (dispatch_pending
    offers those tasks again on beat's next run).
    """
    offered, failures = 0, []
    for task_id in task_ids:
        try:
            offered += task_dispatch(task_id=task_id) is not None
        except Exception as exc:
            logger.exception("Offering task %s failed", task_id)
            failures.append(exc)
    if failures:
        raise InboxError(f"{len(failures)} of {len(task_ids)} offers failed; the first: "
                         f"{failures[0]}") from failures[0]
    return offered


def dispatch_pending(*, batch: int = DISPATCH_BATCH) -> int:
    """Offer queued push-queue tasks nobody had been available for; return how many."""
    ids = list(
        Task.objects.filter(state=TaskState.QUEUED, skill__dispatch=Dispatch.PUSH)
        .order_by("-priority", "created_at").values_list("pk", flat=True)[:batch]
    )
    return sum(1 for task_id in ids if task_dispatch(task_id=task_id) is not None)
