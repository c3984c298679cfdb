"""The dispatcher: who is offered a task of a push queue, and when.

An offer reserves a queued task for one eligible worker until its offer clock runs out
(the clock service withdraws it then). It is made after the change that freed the task
commits (inbox.effects enqueues ``dispatch_task``), and beat offers whatever nobody was
available for (``dispatch_pending``).
"""

import datetime
from typing import Any

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from accounts.models import Availability, Dispatch, User
from accounts.roles import Role
from inbox.lifecycle import IllegalTransition, transition
from inbox.models import HELD_STATES, Task, TaskPass, TaskState
from inbox.selectors import excluded_by_separation, worker_load, worker_lock

# A worker who let an offer lapse may be offered it again after this, if nobody else can.
REOFFER_COOLDOWN = datetime.timedelta(minutes=10)
DISPATCH_BATCH = 200


def offer_candidates(*, task: Task) -> list[User]:
    """Return the workers the task may be offered to, least loaded first."""
    passes = TaskPass.objects.filter(task=task, worker=OuterRef("pk"))
    workers = (
        User.objects.filter(
            is_active=True,
            availability=Availability.AVAILABLE,
            worker_skills__skill_id=task.skill_id,
            worker_skills__proficiency__gte=task.min_proficiency,
            groups__name=Role.WORKER,
        )
        # Never one who declined; one who let it lapse only after the cool-down.
        .filter(~Exists(passes.filter(why=TaskPass.Why.DECLINED)))
        .filter(~Exists(passes.filter(why=TaskPass.Why.LAPSED,
                                      at__gt=timezone.now() - REOFFER_COOLDOWN)))
        .annotate(
            load=Count("held_tasks", filter=Q(held_tasks__state__in=HELD_STATES),
                       distinct=True),
            # Those who let this offer lapse come last: anyone else first.
            lapsed=Exists(passes),
        )
        .order_by("lapsed", "load", "last_login", "pk")
        .distinct()
    )
    return [
        w for w in workers
        if w.load < w.capacity and not excluded_by_separation(user=w, task=task)
    ]


def task_dispatch(*, task_id: Any) -> Task | None:
    """Offer a queued push-queue task to the best eligible worker; None if nobody is."""
    task = Task.objects.select_related("skill").filter(pk=task_id).first()
    if task is None or task.state != TaskState.QUEUED or task.skill.dispatch != Dispatch.PUSH:
        return None
    for worker in offer_candidates(task=task):
        with transaction.atomic():
            worker = worker_lock(user=worker)
            if worker_load(user=worker) >= worker.capacity:
                continue  # Filled up since the candidates were read.
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
