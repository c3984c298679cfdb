"""Task state changes: one function per transition, each one database transaction.

Every transition locks the task row, checks its state (and the caller's version when
given), applies the change, bumps ``version``, appends a hash-chained TaskEvent and,
when Step Functions must hear of it, writes an Outbox row that a Celery task sends
after commit. Views, the API, Celery tasks and commands call these functions; none of
them changes a task's state any other way.
"""

import datetime
import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from accounts.models import User
from config.errors import Conflict, NotFound
from inbox.models import (
    SENDING_STATES,
    Outbox,
    OutboxKind,
    Task,
    TaskEvent,
    TaskPass,
    TaskState,
)

GENESIS_HASH = "0" * 64
REJECTED_ERROR = "HumanTask.Rejected"
TIMED_OUT_ERROR = "HumanTask.TimedOut"


class IllegalTransition(Conflict):
    code = "illegal_transition"


class StaleVersion(Conflict):
    code = "stale_version"


@dataclass(frozen=True)
class Callback:
    """What Step Functions must be told once the transition commits."""

    kind: OutboxKind
    output: dict[str, Any] | None = None
    error: str = ""
    cause: str = ""


def actor_label(actor: User | None, system: str = "system") -> str:
    return actor.email if actor is not None else system


def event_hash(*, prev_hash: str, task_id: str, version: int, action: str, from_state: str,
               to_state: str, actor: str, reason: str, data: dict, at: datetime.datetime) -> str:
    """Return the SHA-256 of an event's content chained to the previous event's hash."""
    content = json.dumps(
        [prev_hash, str(task_id), version, action, from_state, to_state, actor, reason, data,
         at.isoformat()],
        sort_keys=True, separators=(",", ":"), default=str,
    )
    return hashlib.sha256(content.encode()).hexdigest()


def event_append(*, task: Task, action: str, from_state: str, actor: User | None,
                 system: str = "system", reason: str = "", data: dict | None = None) -> TaskEvent:
    """Append the event of a change already applied to task (its new state and version)."""
    previous = (
        TaskEvent.objects.filter(task=task).order_by("-version").values_list("hash", flat=True)
        .first()
    )
    at = timezone.now()
    label = actor_label(actor, system)
    data = data or {}
    return TaskEvent.objects.create(
        task=task, version=task.version, action=action, from_state=from_state,
        to_state=task.state, actor=actor, actor_label=label, reason=reason, data=data, at=at,
        prev_hash=previous or GENESIS_HASH,
        hash=event_hash(prev_hash=previous or GENESIS_HASH, task_id=str(task.pk),
                        version=task.version, action=action, from_state=from_state,
                        to_state=task.state, actor=label, reason=reason, data=data, at=at),
    )


def transition(
    *,
    task_id: Any,
    action: str,
    allowed_from: Iterable[str],
    to_state: str,
    actor: User | None = None,
    system: str = "system",
    expected_version: int | None = None,
    reason: str = "",
    data: dict | None = None,
    change: Callable[[Task], None] | None = None,
    callback: Callback | None = None,
    locked: Task | None = None,
) -> Task:
    """Apply one state change to a task in one transaction; return the updated task.

    Raise NotFound if the task does not exist, StaleVersion if expected_version is
    given and differs, IllegalTransition if the task's state is not in allowed_from.
    locked is the task's row as the caller's open transaction just read it FOR UPDATE
    (take next): it is used as is, without reading it again or a savepoint of its own.
    """
    allowed = tuple(allowed_from)
    if locked is not None and not transaction.get_connection().in_atomic_block:
        raise RuntimeError("transition(locked=...) needs the transaction that locked the row.")
    # A locked row's transaction is the caller's: an error here rolls all of it back.
    with transaction.atomic(savepoint=locked is None):
        # The row lock serialises racing transitions; the loser re-checks state below.
        task = locked or Task.objects.select_for_update().filter(pk=task_id).first()
        if task is None:
            raise NotFound("No such task.")
        if expected_version is not None and task.version != expected_version:
            raise StaleVersion(
                f"The task changed since you loaded it (your version {expected_version}, now "
                f"{task.version}: {task.get_state_display().lower()}). Reload it."
            )
        if task.state not in allowed:
            raise IllegalTransition(
                f"Cannot {action.replace('_', ' ')} a task that is "
                f"{task.get_state_display().lower()}."
            )
        from_state = task.state
        if change is not None:
            change(task)
        task.state = to_state
        task.version += 1
        task.save()
        event_append(task=task, action=action, from_state=from_state, actor=actor,
                     system=system, reason=reason, data=data)
        if callback is not None:
            outbox = Outbox.objects.create(
                task=task, decision_version=task.version, kind=callback.kind,
                output=callback.output, error=callback.error, cause=callback.cause,
                next_attempt_at=timezone.now(),
            )
            # Sent only after commit: a rolled-back decision must never reach Step Functions.
            # Robust: with the broker down the decision stands (the outbox drain sends it),
            # so a failed enqueue is logged and must not fail the request that made it.
            transaction.on_commit(lambda: _enqueue_callback(outbox.pk), robust=True)
    return task


def _enqueue_callback(outbox_id: int) -> None:
    from inbox.tasks import callback_send_task

    callback_send_task.delay(outbox_id)


# Worker transitions ------------------------------------------------------------------


def _hold(worker: User, now: datetime.datetime, work_seconds: int) -> Callable[[Task], None]:
    def change(task: Task) -> None:
        task.assignee = worker
        task.offer_deadline = None
        task.work_deadline = now + datetime.timedelta(seconds=work_seconds)

    return change


def task_start(*, task: Task, worker: User, action: str, allowed_from: Iterable[str],
               expected_version: int | None = None, locked: bool = False) -> Task:
    """Give the task to the worker to work on now (take next, claim, accept).

    locked: task was just read FOR UPDATE in the caller's transaction (see transition).
    """
    now = timezone.now()
    return transition(
        task_id=task.pk, action=action, allowed_from=allowed_from,
        to_state=TaskState.IN_PROGRESS, actor=worker, expected_version=expected_version,
        locked=task if locked else None,
        change=_hold(worker, now, task.work_seconds),
        data={"work_deadline": (now + datetime.timedelta(seconds=task.work_seconds)).isoformat()},
    )


def task_offer(*, task: Task, worker: User) -> Task:
    """Reserve a queued task for one worker until its offer clock runs out."""
    now = timezone.now()
    deadline = now + datetime.timedelta(seconds=task.offer_seconds)

    def change(t: Task) -> None:
        t.assignee = worker
        t.offer_deadline = deadline

    return transition(
        task_id=task.pk, action="offer", allowed_from=[TaskState.QUEUED],
        to_state=TaskState.OFFERED, system="dispatch", change=change,
        data={"worker": worker.email, "offer_deadline": deadline.isoformat()},
    )


def task_accept(*, task: Task, worker: User, expected_version: int | None = None) -> Task:
    """Accept an offer made to this worker."""
    if task.assignee_id != worker.pk:
        raise IllegalTransition("This offer is not yours.")
    return task_start(task=task, worker=worker, action="accept",
                      allowed_from=[TaskState.OFFERED], expected_version=expected_version)


def _back_to_queue(task: Task) -> None:
    task.assignee = None
    task.offer_deadline = None
    task.work_deadline = None


def task_decline(*, task: Task, worker: User, reason: str,
                 expected_version: int | None = None) -> Task:
    """Decline an offer with a reason; the task is never offered to this worker again."""
    if not reason.strip():
        raise Conflict("Say why you decline.")
    if task.assignee_id != worker.pk:
        raise IllegalTransition("This offer is not yours.")

    def change(t: Task) -> None:
        if t.assignee_id != worker.pk:
            raise IllegalTransition("This offer is not yours.")
        _back_to_queue(t)
        TaskPass.objects.get_or_create(task=t, worker=worker, defaults={
            "why": TaskPass.Why.DECLINED, "reason": reason})

    return transition(
        task_id=task.pk, action="decline", allowed_from=[TaskState.OFFERED],
        to_state=TaskState.QUEUED, actor=worker, reason=reason,
        expected_version=expected_version, change=change,
    )


def task_release(*, task: Task, worker: User, reason: str = "",
                 expected_version: int | None = None) -> Task:
    """Give a held task back to its queue."""

    def change(t: Task) -> None:
        if t.assignee_id != worker.pk:
            raise IllegalTransition("You do not hold this task.")
        _back_to_queue(t)

    return transition(
        task_id=task.pk, action="release", allowed_from=[TaskState.IN_PROGRESS],
        to_state=TaskState.QUEUED, actor=worker, reason=reason,
        expected_version=expected_version, change=change,
    )


def task_complete(*, task: Task, worker: User, answer: dict,
                  expected_version: int | None = None) -> Task:
    """Record the worker's (already validated) answer and queue SendTaskSuccess."""
    now = timezone.now()
    output = {"answer": answer, "worker": str(worker.pk), "completedAt": now.isoformat()}

    def change(t: Task) -> None:
        if t.assignee_id != worker.pk:
            raise IllegalTransition("You do not hold this task.")
        t.answer = answer
        t.work_deadline = None

    return transition(
        task_id=task.pk, action="complete", allowed_from=[TaskState.IN_PROGRESS],
        to_state=TaskState.COMPLETING, actor=worker, expected_version=expected_version,
        change=change, callback=Callback(kind=OutboxKind.SUCCESS, output=output),
    )


def task_reject(*, task: Task, worker: User, reason: str,
                expected_version: int | None = None) -> Task:
    """Reject the task with a reason and queue SendTaskFailure (HumanTask.Rejected)."""
    if not reason.strip():
        raise Conflict("Say why you reject the task.")

    def change(t: Task) -> None:
        if t.assignee_id != worker.pk:
            raise IllegalTransition("You do not hold this task.")
        t.reason = reason
        t.work_deadline = None

    return transition(
        task_id=task.pk, action="reject", allowed_from=[TaskState.IN_PROGRESS],
        to_state=TaskState.REJECTING, actor=worker, reason=reason,
        expected_version=expected_version, change=change,
        callback=Callback(kind=OutboxKind.FAILURE, error=REJECTED_ERROR, cause=reason[:32768]),
    )


# Outcomes reported by the callback sender ------------------------------------------------

_SENT_TO = {
    TaskState.COMPLETING: TaskState.COMPLETED,
    TaskState.REJECTING: TaskState.REJECTED,
    TaskState.ABORTING: TaskState.TIMED_OUT,
}


def task_callback_delivered(*, task_id: Any, outbox: Outbox) -> Task:
    """Close the task whose decision Step Functions has accepted."""
    task = Task.objects.get(pk=task_id)
    to_state = _SENT_TO.get(TaskState(task.state))
    if to_state is None:
        raise IllegalTransition(f"Cannot close a task that is {task.get_state_display().lower()}.")

    def change(t: Task) -> None:
        t.closed_at = timezone.now()
        t.next_heartbeat_at = None

    return transition(
        task_id=task_id, action="delivered", allowed_from=[task.state], to_state=to_state,
        system="callbacks", change=change, data={"callback": outbox.kind},
    )


def task_callback_failed(*, task_id: Any, reason: str) -> Task:
    """Record on the task that its decision could not be delivered (the outbox row is dead).

    The task keeps its state (completing, rejecting, aborting): the decision stands and an
    admin may requeue the callback; the history says why it has not closed.
    """
    task = Task.objects.get(pk=task_id)
    return transition(
        task_id=task_id, action="callback_failed", allowed_from=SENDING_STATES,
        to_state=task.state, system="callbacks", reason=reason,
    )


def task_expire(*, task_id: Any, reason: str, system: str = "callbacks") -> Task:
    """Close a task Step Functions no longer waits for (timed out, token gone)."""

    def change(t: Task) -> None:
        t.closed_at = timezone.now()
        t.reason = reason
        t.offer_deadline = t.work_deadline = t.next_heartbeat_at = None

    return transition(
        task_id=task_id, action="expire",
        allowed_from=[*(s for s in TaskState if s not in _CLOSED)], to_state=TaskState.EXPIRED,
        system=system, reason=reason, change=change,
    )


def task_cancel(*, task_id: Any, reason: str, actor: User | None = None,
                system: str = "reconciler") -> Task:
    """Close an open task whose execution ended upstream (stopped, failed, gone)."""

    def change(t: Task) -> None:
        t.closed_at = timezone.now()
        t.reason = reason
        t.offer_deadline = t.work_deadline = t.next_heartbeat_at = None

    return transition(
        task_id=task_id, action="cancel",
        allowed_from=[*(s for s in TaskState if s not in _CLOSED)], to_state=TaskState.CANCELLED,
        actor=actor, system=system, reason=reason, change=change,
    )


_CLOSED = {TaskState.COMPLETED, TaskState.REJECTED, TaskState.TIMED_OUT, TaskState.EXPIRED,
           TaskState.CANCELLED}


def events_verify(*, task: Task) -> str | None:
    """Return a description of the first broken link in the task's history, or None."""
    previous = GENESIS_HASH
    for expected_version, event in enumerate(task.events.order_by("version"), start=1):
        if event.version != expected_version:
            return f"event version {event.version} where {expected_version} was expected"
        if event.prev_hash != previous:
            return f"event v{event.version} ({event.action}) does not follow the one before"
        recomputed = event_hash(
            prev_hash=event.prev_hash, task_id=str(task.pk), version=event.version,
            action=event.action, from_state=event.from_state, to_state=event.to_state,
            actor=event.actor_label, reason=event.reason, data=event.data, at=event.at,
        )
        if recomputed != event.hash:
            return f"event v{event.version} ({event.action}) was altered after it was written"
        previous = event.hash
    return None
