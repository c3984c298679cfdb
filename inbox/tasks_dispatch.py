"""Celery tasks that offer push-queue tasks to workers."""

from celery import shared_task

from accounts.models import Dispatch
from inbox.dispatch import task_dispatch
from inbox.models import Task, TaskState

DISPATCH_BATCH = 200


@shared_task(ignore_result=True)
def dispatch_task(task_id: str) -> None:
    """Offer one queued push-queue task to the best eligible worker."""
    task_dispatch(task_id=task_id)


@shared_task(ignore_result=True)
def dispatch_pending_task() -> int:
    """Offer queued push-queue tasks nobody had been available for; bounded per run."""
    ids = list(
        Task.objects.filter(state=TaskState.QUEUED, skill__dispatch=Dispatch.PUSH)
        .order_by("-priority", "created_at").values_list("pk", flat=True)[:DISPATCH_BATCH]
    )
    return sum(1 for task_id in ids if task_dispatch(task_id=task_id) is not None)
