"""What a worker does with tasks: take next, claim, accept or decline an offer, release,
complete and reject, and undo a complete or reject within its window.

Each checks that the worker may see the task (inbox.selectors.access_task: 404 if not)
and what only dispatch policy knows (eligibility, capacity), then applies one row of the
transition table, which checks the state rules (they hold it, its state: 409) and, under
the row lock, that the worker may still hold it (their current role, skill and
proficiency). A task its holder may no longer hold is refused (AccessLost, 409) and goes
back to its queue (inbox.services.access.task_revoke). Release and decline give a task
back and stay allowed.
"""

from typing import Any

from django.db import transaction
from django.db.models import Q

from accounts.models import Dispatch, User, WorkerSkill
from config.errors import Conflict, NotFound
from inbox.lifecycle import (
    DECISIONS,
    AccessLost,
    IllegalTransition,
    TooLateToUndo,
    take_next_applied,
    transition,
    undo_seconds,
)
from inbox.models import CLOSED_STATES, Task, TaskState
from inbox.selectors import (
    access_task,
    capacity_check,
    eligibility_problem,
    excluded_by_separation,
    task_form,
    task_taken_after,
    worker_load,
    worker_lock,
)
from inbox.services.access import task_revoke
from processes.forms import form_validate

# Candidates skipped for separation of duties before take-next gives up on this call.
TAKE_NEXT_SCAN = 25


class NothingToTake(NotFound):
    code = "queue_empty"


def task_take_next(*, worker: User, skill: str | None = None, history: bool = False) -> Task:
    """Give the worker the next queued task of their pull queues: highest priority, oldest.

    Concurrent takers never get the same task: candidates are locked with
    SELECT ... FOR UPDATE SKIP LOCKED, so each taker passes over rows another holds. On
    PostgreSQL the database applies the take in one round trip (take_next_applied); when
    it takes nothing, the path below finds out why and says so (or takes what came free).
    history: the caller shows the task's history (an answer, a page rendered at once), and
    the database answers it with the take, in the same round trip. Without it nothing
    reads the history here; whoever shows it later reads it (selectors.task_history).
    """
    taken = take_next_applied(worker=worker, skill=skill, history=history)
    if taken is not None:
        return taken
    links = WorkerSkill.objects.filter(worker=worker, skill__dispatch=Dispatch.PULL)
    if skill:
        links = links.filter(skill__slug=skill)
    held = list(links.values_list("skill_id", "proficiency", "skill__weight"))
    if not held:
        which = f" {skill}" if skill else ""
        raise NothingToTake(f"You hold no skill with a pull queue{which}.")
    with transaction.atomic():
        worker = worker_lock(user=worker)
        # Capacity is weighted: only the skills whose next task still fits.
        free = worker.capacity - worker_load(user=worker)
        eligible = Q()
        for skill_id, proficiency, weight in held:
            if weight <= free:
                eligible |= Q(skill_id=skill_id, min_proficiency__lte=proficiency)
        if not eligible:
            capacity_check(user=worker, weight=min(weight for _, _, weight in held))
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
            return transition(task_id=candidate.pk, action="take_next", actor=worker,
                              locked=candidate)
    raise NothingToTake("Nothing is waiting in your queues.")


def task_take_next_after(*, worker: User, decided: Task, history: bool = False) -> Task:
    """The next task after the worker's decision on decided ("Complete and next"): taken
    now, or, when the decision was a retried request's (a lost response, a double click:
    task_complete and task_reject answer the decision made before), the task that request
    took, if the worker still has it in progress. A retry never takes a second task:
    NothingToTake when the first took none or no longer holds it.
    """
    if not getattr(decided, "decided_before", False):
        return task_take_next(worker=worker, history=history)
    taken = task_taken_after(user=worker, task=decided, decisions=DECISIONS)
    if taken is None:
        raise NothingToTake("This decision was made before; nothing taken after it is "
                            "still yours.")
    return access_task(user=worker, task_id=taken)


def task_take_next_shown(*, worker: User, skill: str | None = None) -> Task:
    """task_take_next for an answer that shows the task's history (the API's take)."""
    return task_take_next(worker=worker, skill=skill, history=True)


def task_complete_shown(**arguments: Any) -> Task:
    """task_complete for an answer that shows the task's history (the API's complete)."""
    return task_complete(**arguments, history=True)


def task_reject_shown(**arguments: Any) -> Task:
    """task_reject for an answer that shows the task's history (the API's reject)."""
    return task_reject(**arguments, history=True)


def task_claim(*, worker: User, task_id: Any, expected_version: int | None = None) -> Task:
    """Take one specific visible task of a pull queue."""
    task = access_task(user=worker, task_id=task_id)
    problem = eligibility_problem(user=worker, task=task)
    if problem:
        raise Conflict(problem)
    if task.skill.dispatch != Dispatch.PULL:
        raise Conflict(f"Tasks of {task.skill.slug} are offered, not claimed.")
    with transaction.atomic():
        worker = worker_lock(user=worker)
        capacity_check(user=worker, weight=task.skill.weight)
        return transition(task_id=task.pk, action="claim", actor=worker,
                          expected_version=expected_version)


def task_accept(*, worker: User, task_id: Any, expected_version: int | None = None) -> Task:
    """Accept an offer made to the worker; the work clock starts."""
    task = access_task(user=worker, task_id=task_id)
    return _as_holder(task, action="accept", worker=worker, expected_version=expected_version)


def task_decline(*, worker: User, task_id: Any, reason: str,
                 expected_version: int | None = None) -> Task:
    """Decline an offer with a reason; it goes to the next worker, never back to this one."""
    task = access_task(user=worker, task_id=task_id)
    return transition(task_id=task.pk, action="decline", actor=worker, reason=reason,
                      expected_version=expected_version, seen=task)


def task_release(*, worker: User, task_id: Any, reason: str = "",
                 expected_version: int | None = None) -> Task:
    """Give a held task back to its queue (and offer it on, for a push queue)."""
    task = access_task(user=worker, task_id=task_id)
    return transition(task_id=task.pk, action="release", actor=worker, reason=reason,
                      expected_version=expected_version, seen=task)


def task_complete(*, worker: User, task_id: Any, answer: Any,
                  expected_version: int | None = None, history: bool = False) -> Task:
    """Validate the worker's answer against the stage's form and complete the task.

    Raise FormInvalid (400, naming each field) before anything changes. history: the
    caller shows the task's history (the API's answer): read with the task
    (selectors.access_task).
    """
    task = access_task(user=worker, task_id=task_id, history=history)
    cleaned = form_validate(task_form(task=task), answer)
    try:
        return _as_holder(task, action="complete", worker=worker, answer=cleaned,
                          expected_version=expected_version)
    except AccessLost:
        raise
    except Conflict:
        # A retried request (lost response, double click) with the same answer: the
        # decision stands, once; answer it as it was answered the first time.
        if _decided_before(task, worker=worker, states=_COMPLETED, answer=cleaned):
            task.decided_before = True  # task_take_next_after takes nothing more for it.
            return task
        raise


def task_reject(*, worker: User, task_id: Any, reason: str,
                expected_version: int | None = None, history: bool = False) -> Task:
    """Reject the held task with a reason (Step Functions hears HumanTask.Rejected).
    history: as task_complete's."""
    task = access_task(user=worker, task_id=task_id, history=history)
    try:
        return _as_holder(task, action="reject", worker=worker, reason=reason,
                          expected_version=expected_version)
    except AccessLost:
        raise
    except Conflict:
        if _decided_before(task, worker=worker, states=_REJECTED, reason=reason):
            task.decided_before = True  # A retried request: see task_complete.
            return task
        raise


def task_undo(*, worker: User, task_id: Any, expected_version: int | None = None) -> Task:
    """Take back the worker's complete or reject before Step Functions hears of it.

    Within INBOX_UNDO_SECONDS of the decision; the task is in progress again, held by the
    worker, its work clock running on from where the decision stopped it. Over their
    capacity too: the task they took next meanwhile stays theirs. Raise TooLateToUndo (409)
    once the decision is on its way to Step Functions.
    """
    task = access_task(user=worker, task_id=task_id)
    if not undo_seconds():
        raise TooLateToUndo("Undo is off here (INBOX_UNDO_SECONDS is 0): a decision is sent "
                            "to Step Functions at once.")
    try:
        return transition(task_id=task.pk, action="undo", actor=worker,
                          expected_version=expected_version, seen=task)
    except IllegalTransition:
        task.refresh_from_db()
        if task.state in CLOSED_STATES:
            raise TooLateToUndo(
                "Too late to undo: Step Functions already has the decision (the task is "
                f"{task.get_state_display().lower()}).") from None
        raise


def _as_holder(task: Task, *, action: str, worker: User, **arguments: Any) -> Task:
    """Apply a holder's row; a task the worker may no longer hold goes back to its queue."""
    try:
        return transition(task_id=task.pk, action=action, actor=worker, seen=task,
                          **arguments)
    except AccessLost as exc:
        # The refused transaction rolled back: the return is a transaction of its own.
        if task_revoke(task_id=task.pk, worker=worker):
            raise AccessLost(exc.problem, returned=True) from None
        raise


_COMPLETED = (TaskState.COMPLETING, TaskState.COMPLETED)
_REJECTED = (TaskState.REJECTING, TaskState.REJECTED)


def _decided_before(task: Task, *, worker: User, states: tuple[str, ...],
                    **decision: Any) -> bool:
    """Return whether this worker already made this very decision on the task (reloaded)."""
    task.refresh_from_db()
    # A history read with the task is older than the row reloaded: task_history reads it.
    task.__dict__.pop("events_read", None)
    return (task.state in states and task.assignee_id == worker.pk
            and all(getattr(task, name) == value for name, value in decision.items()))
