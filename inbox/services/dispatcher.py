"""The dispatcher: who is offered a task of a push queue, and when.

An offer reserves a queued task for one eligible worker until its offer clock runs out
(the clock service withdraws it then). It is made after the change that freed the task
commits (inbox.effects enqueues ``dispatch_task``), and beat offers whatever nobody was
available for (``dispatch_pending``).
"""

from typing import Any

from django.db import transaction

from accounts.models import Dispatch, User
from inbox.eligibility import REOFFER_COOLDOWN, eligible_verdicts, worker_verdict
from inbox.lifecycle import IllegalTransition, transition
from inbox.models import Task, TaskState
from inbox.selectors import worker_lock

__all__ = ["REOFFER_COOLDOWN", "dispatch_pending", "offer_candidates", "task_dispatch"]

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


def dispatch_pending(*, batch: int = DISPATCH_BATCH) -> int:
    """Offer queued push-queue tasks nobody had been available for; return how many."""
    ids = list(
        Task.objects.filter(state=TaskState.QUEUED, skill__dispatch=Dispatch.PUSH)
        .order_by("-priority", "created_at").values_list("pk", flat=True)[:batch]
    )
    return sum(1 for task_id in ids if task_dispatch(task_id=task_id) is not None)
