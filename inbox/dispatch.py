"""Who gets which task: take next and claim (pull queues), offers (push queues)."""

import datetime

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from accounts.models import Availability, Dispatch, User, WorkerSkill
from accounts.roles import Role
from config.errors import Conflict, NotFound
from inbox import lifecycle
from inbox.models import Task, TaskPass, TaskState
from inbox.notifications import notify_after_commit
from inbox.selectors import (
    HELD_STATES,
    access_task,
    eligibility_problem,
    excluded_by_separation,
    worker_load,
)

# Candidates skipped for separation of duties before take-next gives up on this call.
TAKE_NEXT_SCAN = 25
# A worker who let an offer lapse may be offered it again after this, if nobody else can.
REOFFER_COOLDOWN = datetime.timedelta(minutes=10)


class NothingToTake(NotFound):
    code = "queue_empty"


def lock_worker(worker: User) -> User:
    """Lock the worker's row: their own concurrent takes queue up, so capacity holds."""
    return User.objects.select_for_update().get(pk=worker.pk)


def _check_capacity(worker: User) -> None:
    held = worker_load(user=worker)
    if held >= worker.capacity:
        raise Conflict(
            f"You hold {held} task(s), your capacity is {worker.capacity}: finish or release "
            "one first."
        )


def task_take_next(*, worker: User, skill: str | None = None) -> Task:
    """Give the worker the next queued task of their pull queues: highest priority, oldest.

    Concurrent takers never get the same task: candidates are locked with
    SELECT ... FOR UPDATE SKIP LOCKED, so each taker passes over rows another holds.
    """
    links = WorkerSkill.objects.filter(worker=worker, skill__dispatch=Dispatch.PULL)
    if skill:
        links = links.filter(skill__slug=skill)
    eligible = Q()
    for skill_id, proficiency in links.values_list("skill_id", "proficiency"):
        eligible |= Q(skill_id=skill_id, min_proficiency__lte=proficiency)
    if not eligible:
        which = f" {skill}" if skill else ""
        raise NothingToTake(f"You hold no skill with a pull queue{which}.")
    with transaction.atomic():
        worker = lock_worker(worker)
        _check_capacity(worker)
        skipped: list = []
        for _ in range(TAKE_NEXT_SCAN):
            candidate = (
                Task.objects.select_for_update(skip_locked=True)
                .filter(eligible, state=TaskState.QUEUED)
                .exclude(pk__in=skipped)
                .order_by("-priority", "created_at")
                .first()
            )
            if candidate is None:
                break
            if excluded_by_separation(user=worker, task=candidate):
                skipped.append(candidate.pk)
                continue
            # The candidate's row is locked by this transaction: no second read.
            return lifecycle.task_start(task=candidate, worker=worker, action="take_next",
                                        allowed_from=[TaskState.QUEUED], locked=True)
    raise NothingToTake("Nothing is waiting in your queues.")


def task_claim(*, worker: User, task_id: object, expected_version: int | None = None) -> Task:
    """Take one specific visible task of a pull queue."""
    task = access_task(user=worker, task_id=task_id, action="take")
    if task.skill.dispatch != Dispatch.PULL:
        raise Conflict(f"Tasks of {task.skill.slug} are offered, not claimed.")
    with transaction.atomic():
        worker = lock_worker(worker)
        _check_capacity(worker)
        return lifecycle.task_start(task=task, worker=worker, action="claim",
                                    allowed_from=[TaskState.QUEUED],
                                    expected_version=expected_version)


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


def task_dispatch(*, task_id: object) -> Task | None:
    """Offer a queued push-queue task to the best eligible worker; None if nobody is."""
    task = Task.objects.select_related("skill").filter(pk=task_id).first()
    if task is None or task.state != TaskState.QUEUED or task.skill.dispatch != Dispatch.PUSH:
        return None
    for worker in offer_candidates(task=task):
        with transaction.atomic():
            worker = lock_worker(worker)
            if worker_load(user=worker) >= worker.capacity:
                continue  # Filled up since the candidates were read.
            try:
                offered = lifecycle.task_offer(task=task, worker=worker)
            except lifecycle.IllegalTransition:
                return None  # Someone else changed the task first; nothing to offer.
            notify_after_commit(kind="offered", task_id=offered.pk)
            return offered
    return None


def task_accept(*, worker: User, task_id: object, expected_version: int | None = None) -> Task:
    """Accept an offer made to the worker."""
    task = access_task(user=worker, task_id=task_id, action="offer")
    problem = eligibility_problem(user=worker, task=task)
    if problem:
        raise Conflict(problem)
    return lifecycle.task_accept(task=task, worker=worker, expected_version=expected_version)


def task_decline(*, worker: User, task_id: object, reason: str,
                 expected_version: int | None = None) -> Task:
    """Decline an offer with a reason, then offer the task to the next worker after commit."""
    task = access_task(user=worker, task_id=task_id, action="offer")
    task = lifecycle.task_decline(task=task, worker=worker, reason=reason,
                                  expected_version=expected_version)
    dispatch_after_commit(task)
    return task


def task_release(*, worker: User, task_id: object, reason: str = "",
                 expected_version: int | None = None) -> Task:
    """Give a held task back to its queue (and offer it on, for a push queue)."""
    task = access_task(user=worker, task_id=task_id, action="work")
    task = lifecycle.task_release(task=task, worker=worker, reason=reason,
                                  expected_version=expected_version)
    dispatch_after_commit(task)
    return task


def dispatch_after_commit(task: Task) -> None:
    """Offer a task that went back to a push queue to the next worker, after commit."""
    if task.skill.dispatch == Dispatch.PUSH and task.state == TaskState.QUEUED:
        from inbox.tasks_dispatch import dispatch_task

        # After commit: the offer must see the task back in its queue. Robust: with the
        # broker down, dispatch_pending_task (beat) offers it later; the release stands.
        transaction.on_commit(lambda: dispatch_task.delay(str(task.pk)), robust=True)

