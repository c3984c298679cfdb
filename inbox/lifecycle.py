"""Task state changes: one table of transitions and one function that applies its rows.

``TRANSITIONS`` lists every action that changes a task: the states it may start from,
the state it leaves, what it changes on the row (holder, clocks), who may do it, and the
effects it sets off once it commits. ``transition`` applies one row in one database
transaction: lock the task row, check the caller's version and the state, apply the
change, bump ``version``, append one hash-chained TaskEvent, write the Outbox row when
Step Functions must hear of the decision, and hand the effects to inbox.effects, which
performs them after commit. ``task_receive`` makes a task's first row and event the same
way (``tasks_receive``: a receive's worth at once). Nothing else in the code assigns
``Task.state``.

The services (inbox/services/) decide who may act (access, eligibility, capacity) and
call ``transition`` with an action's name; a state rule broken here is a Conflict (409).
A worker's row (``eligible``) also re-checks, under the row lock, that the actor may
still hold the task (their current role, skill and proficiency: AccessLost, 409).
"""

import copy
import datetime
import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, transaction
from django.db.models import OuterRef, Subquery
from django.utils import timezone

from accounts.models import Dispatch, Skill, User, WorkerSkill
from config.compiled import CompiledRead
from config.errors import Conflict, InboxError, NotFound
from config.rows import ModelRows
from inbox import effects, lifecycle_sql
from inbox.bulk import (
    row_update,
    row_update_inserting,
    rows_insert,
    rows_insert_each,
    rows_update,
)
from inbox.effects import Effect
from inbox.history import HistoryText, event_new, event_save
from inbox.models import (
    CLOSED_STATES,
    HELD_STATES,
    OPEN_STATES,
    SENDING_STATES,
    Outbox,
    OutboxKind,
    OutboxStatus,
    SignalOutbox,
    Task,
    TaskEvent,
    TaskPass,
    TaskState,
)
from inbox.selectors import hold_problem
from processes.contract import REJECTED_ERROR, TIMED_OUT_ERROR

CAUSE_MAX_CHARS = 32_768
# One INFO line per applied transition (./dev run shows these while it hides the rest).
changes = logging.getLogger("inbox.tasks.changes")
# Every state a task can still leave: all but the closed ones.
NOT_CLOSED = [state for state in TaskState if state not in CLOSED_STATES]


class IllegalTransition(Conflict):
    code = "illegal_transition"


class StaleVersion(Conflict):
    code = "stale_version"


class AccessLost(Conflict):
    """The actor may no longer hold the task (a skill, proficiency or role taken away)."""

    code = "access_lost"

    def __init__(self, problem: str, *, returned: bool = False) -> None:
        then = " It went back to its queue." if returned else ""
        super().__init__(f"You may no longer work on this task: {problem}.{then}")
        self.problem = problem


@dataclass(frozen=True)
class Pass:
    """A worker letting an offer go, for the change's TaskPass row (written with the task)."""

    task_id: Any
    worker_id: int
    why: str
    reason: str
    # An offer lapsed again after its cool-down: a lapsed pass already there starts anew.
    renew_lapsed: bool = False


@dataclass(frozen=True)
class Step:
    """What one application of a transition knows: who, when, why, and its parameters.

    passes collects the TaskPass rows the change asks for; the apply function writes them
    (in bulk, for a batch) with the task.
    """

    actor: User | None
    now: datetime.datetime
    reason: str
    params: Mapping[str, Any]
    passes: list[Pass] = field(default_factory=list)


@dataclass(frozen=True)
class Callback:
    """What Step Functions must be told once the transition commits."""

    kind: OutboxKind
    output: dict[str, Any] | None = None
    error: str = ""
    cause: str = ""


# A change applies an action to the locked row and returns the event's data.
Change = Callable[[Task, Step], dict[str, Any]]


@dataclass(frozen=True)
class Transition:
    """One row of the table: an action and everything it does to a task."""

    action: str
    sources: tuple[str, ...]
    # The state it leaves; None keeps the state (a clock extended, a failed callback noted);
    # a mapping picks it by the state the task is in (a delivered decision closes it).
    target: str | Mapping[str, str] | None
    change: Change
    # Who does it when no user does (the event's actor label).
    system: str = "system"
    # Set: only the task's holder may do it, and this says why another may not.
    holder: str = ""
    # Set: a blank reason is refused with this.
    needs_reason: str = ""
    # Set: the actor must still be allowed to hold the task (inbox.selectors.hold_problem).
    eligible: bool = False
    callback: Callable[[Task, Step], Callback] | None = None
    # Set: the callback waits out INBOX_UNDO_SECONDS, and the holder may take it back
    # (the "undo" row) until then.
    undoable: bool = False
    effects: tuple[Effect, ...] = field(default=())
    # Columns the change writes besides CHANGEABLE's (compared only for the rows that
    # name them: a task read without them, deferred, costs no read).
    writes: tuple[str, ...] = ()

    def target_from(self, state: str) -> str:
        if self.target is None:
            return state
        if isinstance(self.target, Mapping):
            return self.target[state]
        return self.target

    @property
    def all_effects(self) -> tuple[Effect, ...]:
        """Return the effects after commit, the callback first when there is one."""
        return ((Effect.CALLBACK,) if self.callback else ()) + self.effects


# What each change does to the row ------------------------------------------------------


def _received(task: Task, step: Step) -> dict[str, Any]:
    """Start the overall clock (set by intake)."""
    return {"overall_deadline": task.overall_deadline.isoformat()}


def _hold(task: Task, step: Step) -> dict[str, Any]:
    """The worker (the actor, or the one named) holds it; the work clock starts."""
    worker = step.params.get("worker") or step.actor
    task.assignee = worker
    task.offer_deadline = None
    task.work_deadline = step.now + datetime.timedelta(seconds=task.work_seconds)
    if "worker" in step.params:
        return {"worker": worker.email}
    return {"work_deadline": task.work_deadline.isoformat()}


def _offer(task: Task, step: Step) -> dict[str, Any]:
    """Reserved for the named worker; the offer clock starts."""
    worker = step.params["worker"]
    task.assignee = worker
    task.offer_deadline = step.now + datetime.timedelta(seconds=task.offer_seconds)
    return {"worker": worker.email, "offer_deadline": task.offer_deadline.isoformat()}


def _to_queue(task: Task, step: Step) -> dict[str, Any]:
    """Nobody holds it; no offer or work clock runs."""
    task.assignee = None
    task.offer_deadline = None
    task.work_deadline = None
    return {}


def _revoked(task: Task, step: Step) -> dict[str, Any]:
    """Nobody holds it: its holder may no longer (access taken away); no clock of theirs runs."""
    holder = task.assignee
    _to_queue(task, step)
    return {"worker": holder.email}


def _withdrawn(task: Task, step: Step) -> dict[str, Any]:
    """Back to the queue: the worker offered it went away; offered to them again once back."""
    holder = task.assignee
    _to_queue(task, step)
    return {"worker": holder.email}


def _declined(task: Task, step: Step) -> dict[str, Any]:
    """Back to the queue; never offered to this worker again."""
    step.passes.append(Pass(task_id=task.pk, worker_id=step.actor.pk,
                            why=TaskPass.Why.DECLINED, reason=step.reason))
    return _to_queue(task, step)


# What a lapsed offer's pass says (clock_rows_applied's statement writes the same).
OFFER_RAN_OUT = "The offer ran out."


def _lapsed(task: Task, step: Step) -> dict[str, Any]:
    """Back to the queue; offered to this worker again only after a cool-down."""
    # Offered again after the cool-down and lapsed again: a new cool-down starts.
    step.passes.append(Pass(task_id=task.pk, worker_id=task.assignee_id,
                            why=TaskPass.Why.LAPSED, reason=OFFER_RAN_OUT,
                            renew_lapsed=True))
    return _to_queue(task, step)


def passes_write(passes: list[Pass], *, now: datetime.datetime) -> None:
    """Write the TaskPass rows of changes just applied, in one to three statements for all.

    A worker's pass on a task is kept once (the first why stays): a decline is one INSERT
    that leaves an existing pass alone. A lapse on a task already lapsed for that worker
    renews its cool-down. Their tasks are locked by the transition's transaction, and passes
    are only written under that lock: no second writer races these.
    """
    kept = [one for one in passes if not one.renew_lapsed]
    if kept:
        TaskPass.objects.bulk_create([_pass_row(one) for one in kept], ignore_conflicts=True)
    renewing = {(one.task_id, one.worker_id): one for one in passes if one.renew_lapsed}
    if not renewing:
        return
    existing = {
        (task_id, worker_id): (pk, why)
        for pk, task_id, worker_id, why in TaskPass.objects.filter(
            task_id__in={task_id for task_id, _ in renewing},
            worker_id__in={worker_id for _, worker_id in renewing},
        ).values_list("pk", "task_id", "worker_id", "why")
        if (task_id, worker_id) in renewing
    }
    TaskPass.objects.bulk_create([_pass_row(one) for key, one in renewing.items()
                                  if key not in existing])
    renewed = [pk for pk, why in existing.values() if why == TaskPass.Why.LAPSED]
    if renewed:
        TaskPass.objects.filter(pk__in=renewed).update(at=now)


def _pass_row(one: Pass) -> TaskPass:
    return TaskPass(task_id=one.task_id, worker_id=one.worker_id, why=one.why, reason=one.reason)


def _extend(clock: str) -> Change:
    column = f"{clock}_deadline"

    def change(task: Task, step: Step) -> dict[str, Any]:
        """The running clock runs out later by the seconds asked."""
        current = getattr(task, column)
        if current is None:
            raise Conflict(f"The {clock} clock of this task is not running.")
        seconds = step.params["seconds"]
        setattr(task, column, max(current, step.now) + datetime.timedelta(seconds=seconds))
        return {"seconds": seconds}

    return change


def _escalated(task: Task, step: Step) -> dict[str, Any]:
    """Nobody holds it; the escalation clock replaces the overall one.

    The escalation clock starts when the sweeper saw the overall one run out (since); when
    it runs out too, the task aborts (see the clock service).
    """
    _to_queue(task, step)
    since = step.params.get("since", step.now)
    task.overall_deadline = since + datetime.timedelta(seconds=task.escalation_seconds or 0)
    return {}


def _answered(task: Task, step: Step) -> dict[str, Any]:
    """Keep the answer; the work clock stops."""
    task.answer = step.params["answer"]
    return _work_stopped(task)


def _rejected(task: Task, step: Step) -> dict[str, Any]:
    """Keep the reason; the work clock stops."""
    task.reason = step.reason
    return _work_stopped(task)


def _work_stopped(task: Task) -> dict[str, Any]:
    """Stop the work clock; return where it stood, for an undo to restart it from there."""
    stopped = task.work_deadline
    task.work_deadline = None
    return {"work_deadline": stopped.isoformat()} if stopped is not None else {}


class TooLateToUndo(Conflict):
    code = "too_late_to_undo"


def _undone(task: Task, step: Step) -> dict[str, Any]:
    """The decision is taken back, never sent; the work clock runs on from where it stopped."""
    # A conditional update, in the task's transaction: a sender's claim (inbox.services.
    # callback._claim_ids, or _claim_due for a drain) takes the same row once it is due,
    # and of the two exactly one changes it. The row counts only if it was never claimed
    # (attempts 0) and is still inside its window: a claimed row may be on its way to
    # Step Functions right now.
    withdrawn = Outbox.objects.filter(
        task=task, decision_version=task.version, status=OutboxStatus.PENDING, attempts=0,
        next_attempt_at__gt=step.now,
    ).update(status=OutboxStatus.WITHDRAWN)
    if withdrawn != 1:
        raise TooLateToUndo(
            "Too late to undo: the decision is already on its way to Step Functions.")
    decision = TaskEvent.objects.get(task=task, version=task.version)
    stopped = decision.data.get("work_deadline")
    if stopped is not None:
        left = datetime.datetime.fromisoformat(stopped) - decision.at
        task.work_deadline = step.now + max(left, datetime.timedelta(0))
    else:
        task.work_deadline = step.now + datetime.timedelta(seconds=task.work_seconds)
    task.answer = None
    task.reason = ""
    return {"undid": decision.action, "work_deadline": task.work_deadline.isoformat()}


def _aborted(task: Task, step: Step) -> dict[str, Any]:
    """Keep the reason; the offer, work and heartbeat clocks stop."""
    task.offer_deadline = task.work_deadline = task.next_heartbeat_at = None
    task.reason = step.reason
    return {}


def _delivered(task: Task, step: Step) -> dict[str, Any]:
    """Closed; heartbeats stop."""
    task.closed_at = step.now
    task.next_heartbeat_at = None
    return {"callback": step.params["kind"]}


def _migrated(task: Task, step: Step) -> dict[str, Any]:
    """It answers the newer version's execution: new token, execution and version.

    Its state, holder and clocks stay (inbox.services.migration)."""
    before = {"from_execution": task.execution_arn, "from_version": task.process_version}
    task.token_ciphertext = step.params["token_ciphertext"]
    task.token_digest = step.params["token_digest"]
    task.execution_arn = step.params["execution_arn"]
    task.process_version = step.params["process_version"]
    return {**before, "to_execution": task.execution_arn, "to_version": task.process_version,
            "migration": step.params["migration"]}


def _noted(task: Task, step: Step) -> dict[str, Any]:
    """Nothing changes: the history says the callback is dead."""
    return {}


def _ended(task: Task, step: Step) -> dict[str, Any]:
    """Closed with the reason; every clock stops."""
    task.closed_at = step.now
    task.reason = step.reason
    task.offer_deadline = task.work_deadline = task.next_heartbeat_at = None
    return {}


# What Step Functions hears -------------------------------------------------------------


def _success(task: Task, step: Step) -> Callback:
    return Callback(kind=OutboxKind.SUCCESS, output={
        "answer": step.params["answer"], "worker": str(step.actor.pk),
        "completedAt": step.now.isoformat()})


def _rejection(task: Task, step: Step) -> Callback:
    return Callback(kind=OutboxKind.FAILURE, error=REJECTED_ERROR,
                    cause=step.reason[:CAUSE_MAX_CHARS])


def _timeout(task: Task, step: Step) -> Callback:
    return Callback(kind=OutboxKind.FAILURE, error=TIMED_OUT_ERROR,
                    cause=step.reason[:CAUSE_MAX_CHARS])


# The table -----------------------------------------------------------------------------

NOT_YOURS = "This offer is not yours."
NOT_HELD = "You do not hold this task."
# The longest reason an action keeps (the API's inputs say the same).
REASON_MAX_CHARS = 2000
SUPERVISOR_REASON = "Say why: every supervisor action is recorded with its reason."
CLOCK, DISPATCHER, CALLBACKS = "clock", "dispatch", "callbacks"
QUEUED, OFFERED, WORKING = TaskState.QUEUED, TaskState.OFFERED, TaskState.IN_PROGRESS
OPEN = tuple(OPEN_STATES)
HELD = tuple(HELD_STATES)

TRANSITIONS: dict[str, Transition] = {row.action: row for row in [
    # Intake: a new task enters its queue (task_receive applies this row).
    Transition("receive", (), QUEUED, _received, system="intake", effects=(Effect.DISPATCH,)),
    # Dispatch and the worker's hold on a task.
    Transition("offer", (QUEUED,), OFFERED, _offer, system=DISPATCHER,
               effects=(Effect.NOTIFY_OFFERED,)),
    Transition("accept", (OFFERED,), WORKING, _hold, holder=NOT_YOURS, eligible=True),
    Transition("take_next", (QUEUED,), WORKING, _hold, eligible=True),
    Transition("claim", (QUEUED,), WORKING, _hold, eligible=True),
    Transition("decline", (OFFERED,), QUEUED, _declined, holder=NOT_YOURS,
               needs_reason="Say why you decline.", effects=(Effect.DISPATCH,)),
    Transition("release", (WORKING,), QUEUED, _to_queue, holder=NOT_HELD,
               effects=(Effect.DISPATCH,)),
    # The worker offered it went away (inbox.services.presence): the offer goes to another.
    Transition("withdraw", (OFFERED,), QUEUED, _withdrawn, system="presence",
               effects=(Effect.DISPATCH,)),
    # The worker's decision.
    Transition("complete", (WORKING,), TaskState.COMPLETING, _answered, holder=NOT_HELD,
               eligible=True, callback=_success, undoable=True),
    Transition("reject", (WORKING,), TaskState.REJECTING, _rejected, holder=NOT_HELD,
               needs_reason="Say why you reject the task.", eligible=True,
               callback=_rejection, undoable=True),
    # Taken back within INBOX_UNDO_SECONDS, before Step Functions heard of it.
    Transition("undo", (TaskState.COMPLETING, TaskState.REJECTING), WORKING, _undone,
               holder=NOT_HELD, eligible=True),
    # The holder lost the access the task needs (inbox.services.access).
    Transition("revoke", HELD, QUEUED, _revoked, system="access",
               effects=(Effect.DISPATCH,)),
    # The clocks.
    Transition("offer_timeout", (OFFERED,), QUEUED, _lapsed, system=CLOCK,
               effects=(Effect.DISPATCH,)),
    Transition("work_timeout", (WORKING,), QUEUED, _to_queue, system=CLOCK,
               effects=(Effect.DISPATCH,)),
    Transition("escalate", OPEN, TaskState.ESCALATED, _escalated, system=CLOCK,
               effects=(Effect.NOTIFY_ESCALATED,)),
    Transition("overall_timeout", OPEN, TaskState.ABORTING, _aborted, system=CLOCK,
               callback=_timeout),
    # Supervisors.
    Transition("reassign", OPEN, WORKING, _hold, needs_reason=SUPERVISOR_REASON),
    Transition("return", OPEN, QUEUED, _to_queue, needs_reason=SUPERVISOR_REASON,
               effects=(Effect.DISPATCH,)),
    *(Transition(f"extend_{clock}", OPEN, None, _extend(clock), needs_reason=SUPERVISOR_REASON)
      for clock in ("offer", "work", "overall")),
    Transition("abort", OPEN, TaskState.ABORTING, _aborted, needs_reason=SUPERVISOR_REASON,
               callback=_timeout),
    # An admin moved the execution to a newer version at the same stage: the new
    # execution's envelope arrived (inbox.services.migration); the old one is stopped.
    Transition("migrate", OPEN, None, _migrated, system="migration",
               needs_reason="Say why: a migration is recorded with its reason.",
               effects=(Effect.MIGRATED,),
               writes=("token_ciphertext", "token_digest", "execution_arn", "process_version")),
    # What Step Functions made of the decision, and executions that ended upstream.
    Transition("delivered", tuple(SENDING_STATES), {
        TaskState.COMPLETING: TaskState.COMPLETED, TaskState.REJECTING: TaskState.REJECTED,
        TaskState.ABORTING: TaskState.TIMED_OUT}, _delivered, system=CALLBACKS),
    Transition("callback_failed", tuple(SENDING_STATES), None, _noted, system=CALLBACKS),
    Transition("expire", tuple(NOT_CLOSED), TaskState.EXPIRED, _ended, system=CALLBACKS),
    Transition("cancel", tuple(NOT_CLOSED), TaskState.CANCELLED, _ended, system="reconciler"),
]}
# A worker's decisions: the rows whose answer waits out the undo window before it is sent.
DECISIONS = tuple(action for action, row in TRANSITIONS.items() if row.undoable)


# Applying a row ------------------------------------------------------------------------


def transition(*, task_id: Any, action: str, actor: User | None = None, system: str = "",
               expected_version: int | None = None, reason: str = "",
               locked: Task | None = None, seen: Task | None = None, **params: Any) -> Task:
    """Apply the table's row for action to a task in one transaction; return the task.

    Raise NotFound if the task does not exist, StaleVersion if expected_version is given
    and differs, Conflict if the action is its holder's and actor does not hold it,
    IllegalTransition if the task's state is not one the action starts from. locked is
    the task's row as the caller's open transaction just read it FOR UPDATE (take next): it
    is used as is, without reading it again or a savepoint of its own. seen is the task as
    the caller just read it without a lock (access_task): when the row allows the action
    on it, the change is written by an UPDATE conditioned on the version seen, with no
    second read; if the task changed meanwhile, it is read again under its lock and judged
    as it is then. params go to the row's change.
    """
    row = TRANSITIONS[action]
    refusal = _reason_refusal(row, reason)
    if refusal is not None:
        raise refusal
    if locked is not None and not transaction.get_connection().in_atomic_block:
        raise RuntimeError("transition(locked=...) needs the transaction that locked the row.")
    if seen is not None and locked is None:
        task = _apply_seen(row, seen=seen, task_id=task_id, actor=actor,
                           system=system or row.system, expected_version=expected_version,
                           reason=reason, params=params)
        if task is not None:
            return task
    return _apply(row, task_id=task_id, actor=actor, system=system or row.system,
                  expected_version=expected_version, reason=reason, locked=locked,
                  params=params)


class _Changed(Exception):
    """The task is no longer the version seen: its conditional update changed no row."""


def _apply_seen(row: Transition, *, seen: Task, task_id: Any, actor: User | None,
                system: str, expected_version: int | None, reason: str,
                params: Mapping[str, Any]) -> Task | None:
    """Apply row to the task as seen, if it allows it; None: judge it under its lock instead.

    Three statements for a worker's action (the UPDATE, the event, the outbox row or pass
    it makes), and no lock held before the write: the UPDATE names the version seen, so a
    racing transition (which bumps it) makes it change nothing, and this one is rolled
    back and decided again on the row read FOR UPDATE.
    """
    if str(seen.pk) != str(task_id) or (
            expected_version is not None and seen.version != expected_version):
        return None
    if row.eligible and getattr(seen, "proficiency_of", None) != getattr(actor, "pk", None):
        return None  # The actor's proficiency was not read with the task: ask under the lock.
    if _refusal(row, task=seen, actor=actor) is not None:
        return None  # Refused as seen; the task may have changed since: the lock decides.
    task = copy.copy(seen)  # The caller's object stays as it read it, whatever happens here.
    version_seen = task.version
    try:
        with transaction.atomic():
            step = Step(actor=actor, now=timezone.now(), reason=reason, params=params)
            applied = _change(row, task=task, step=step, system=system)
            # Conditional on the version seen: of two racing transitions exactly one
            # changes the row; the loser's whole change (its side writes too) rolls back.
            # Its event and outbox row go in the same round trip, written only with it.
            written = row_update_inserting(task, applied.fields, _side_rows(applied),
                                           version=version_seen)
            if written != 1:
                raise _Changed
            _written_beside(applied, step, row=row)
    except _Changed:
        return None
    read = seen.__dict__.get("events_read")
    if read is not None:
        # The history read with the task, as of the version seen: the update's condition
        # held, so no event came between it and this change's (every event is a version).
        task.events_read = read.with_event(applied.event)
    _log(row, applied)
    return task



def _apply(row: Transition, *, task_id: Any, actor: User | None, system: str,
           expected_version: int | None, reason: str, locked: Task | None,
           params: Mapping[str, Any]) -> Task:
    # A locked row's transaction is the caller's: an error here rolls all of it back.
    with transaction.atomic(savepoint=locked is None):
        # The row lock serialises racing transitions; the loser re-checks state below.
        task = locked or _locked(row, task_id=task_id, actor=actor)
        if task is None:
            raise NotFound("No such task.")
        if expected_version is not None and task.version != expected_version:
            raise StaleVersion(
                f"The task changed since you loaded it (your version {expected_version}, now "
                f"{task.version}: {task.get_state_display().lower()}). Reload it."
            )
        refusal = _refusal(row, task=task, actor=actor)
        if refusal is not None:
            raise refusal
        step = Step(actor=actor, now=timezone.now(), reason=reason, params=params)
        applied = _change(row, task=task, step=step, system=system)
        # Only what the change wrote: the row's other columns (its input above all) stay
        # out of the UPDATE. The row is locked above: it is there to write.
        if row_update(task, applied.fields) != 1:
            raise DatabaseError(f"Task {task.pk} was not written: its row is gone.")
        _written(row, applied, step)
    # After the block: committed, unless a caller's transaction holds it (then released).
    _log(row, applied)
    return task


def _written(row: Transition, applied: "_Applied", step: Step) -> None:
    """Write what goes with a task's change (its row written): event, passes, outbox row."""
    if applied.outbox is not None:
        # A decision's event and outbox row: one round trip on PostgreSQL.
        rows_insert_each(*_side_rows(applied))
    else:
        event_save(applied.event)
    _written_beside(applied, step, row=row)


def _side_rows(applied: "_Applied") -> tuple[TaskEvent | Outbox, ...]:
    """The rows a change writes beside the task's: its event, and a decision's outbox row."""
    return (applied.event,) if applied.outbox is None else (applied.event, applied.outbox)


def _written_beside(applied: "_Applied", step: Step, *, row: Transition) -> None:
    """Write the change's passes (declines) and hand its effects over for after commit."""
    passes_write(step.passes, now=step.now)
    _after_commit(row, applied, now=step.now)


def _locked(row: Transition, *, task_id: Any, actor: User | None) -> Task | None:
    """Read the task FOR UPDATE, with what the answer and the row's checks need, at once.

    Its skill and holder come in the same read (locking only the task's row: of self), and
    for a worker's row the actor's proficiency in the skill (hold_problem asks it).
    """
    if row.eligible and actor is not None:
        found = _LOCKED_WITH_PROFICIENCY.run("all", task_id=task_id, actor_id=actor.pk)
    else:
        found = _LOCKED.run("all", task_id=task_id)
    task = found[0] if found else None
    if task is not None and row.eligible and actor is not None:
        task.proficiency_of = actor.pk  # Whose proficiency actor_proficiency is.
    return task


def _locked_tasks() -> Any:
    """The task's row FOR UPDATE (its row only: of self), with its skill and holder."""
    return Task.objects.select_for_update(of=("self",)).select_related("skill", "assignee")


# _locked's two reads, each compiled once (config.compiled).
_LOCKED = CompiledRead(lambda shape, *, task_id: _locked_tasks().filter(pk=task_id),
                       task_id=Task._meta.pk)
_LOCKED_WITH_PROFICIENCY = CompiledRead(
    lambda shape, *, task_id, actor_id: _locked_tasks().annotate(
        actor_proficiency=Subquery(WorkerSkill.objects.filter(
            worker_id=actor_id, skill_id=OuterRef("skill_id")).order_by()
            .values("proficiency")[:1])).filter(pk=task_id),
    task_id=Task._meta.pk, actor_id=User._meta.pk)


@dataclass(frozen=True)
class _Applied:
    """One task changed in memory by a row, with the rows to write beside it."""

    task: Task
    from_state: str
    data: dict[str, Any]
    fields: list[str]
    event: TaskEvent
    outbox: Outbox | None


def _change(row: Transition, *, task: Task, step: Step, system: str) -> _Applied:
    """Apply row's change to task in memory; return it with its unsaved event and outbox row."""
    actor = step.actor
    from_state, holder_before = task.state, task.assignee_id
    before = _snapshot(task)
    data = row.change(task, step)
    if holder_before is not None and task.assignee_id != holder_before:
        # Whom the task was taken from: the live stream tells them it went.
        data = {**data, "holder_before": holder_before}
    task.state = row.target_from(from_state)
    task.version += 1
    event = event_new(task=task, action=row.action, from_state=from_state,
                      actor=actor, label=actor.email if actor is not None else system,
                      reason=step.reason, data=data, at=step.now)
    outbox, wait = None, undo_seconds() if row.undoable else 0
    if row.callback is not None:
        callback = row.callback(task, step)
        outbox = Outbox(
            task=task, decision_version=task.version, kind=callback.kind,
            output=callback.output, error=callback.error, cause=callback.cause,
            next_attempt_at=step.now + datetime.timedelta(seconds=wait),
        )
    return _Applied(task=task, from_state=from_state, data=data,
                    fields=_changed(task, before) + list(row.writes), event=event,
                    outbox=outbox)


def _after_commit(row: Transition, applied: _Applied, *, now: datetime.datetime) -> None:
    """Hand the row's effects on one applied change to inbox.effects (signal rows first)."""
    signal = _signal(applied.event, now)
    effects.after_commit(task=applied.task, effects=row.all_effects + signal)


def _log(row: Transition, applied: _Applied) -> None:
    data, task = applied.data, applied.task
    changes.info("task %s… %s → %s%s (%s by %s)", str(task.pk)[:8], applied.from_state,
                 task.state, f" {data['worker']}" if "worker" in data else "", row.action,
                 applied.event.actor_label)


@dataclass(frozen=True)
class Batch:
    """What transitions_apply did: the tasks changed, and why each other one was refused."""

    applied: list[Task]
    refused: dict[Any, InboxError]


def transitions_apply(*, action: str, tasks: list[Task], system: str = "",
                      reason: Callable[[Task], str] | str = "", actor: User | None = None,
                      **params: Any) -> Batch:
    """Apply the table's row for action to many tasks the open transaction locked.

    The set-based form of transition, for the clocks and other system work on rows the
    caller read FOR UPDATE (SKIP LOCKED) in its transaction: each task is checked and
    changed by the same row as transition does one (refusals are returned, not raised: a
    row that changed since it was read is not due), and the writes are a fixed number of
    statements for the whole batch: one UPDATE of the tasks, one INSERT of their events,
    one of their outbox rows, their passes and signal rows. reason is one for all, or
    what to say of each task. Effects run after the caller's transaction commits.
    """
    row = TRANSITIONS[action]
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("transitions_apply needs the transaction that locked the rows.")
    now = timezone.now()
    done: list[_Applied] = []
    refused: dict[Any, InboxError] = {}
    passes: list[Pass] = []
    for task in tasks:
        said = reason(task) if callable(reason) else reason
        refusal = _refusal(row, task=task, actor=actor) or _reason_refusal(row, said)
        if refusal is not None:
            refused[task.pk] = refusal
            continue
        step = Step(actor=actor, now=now, reason=said, params=params)
        done.append(_change(row, task=task, step=step, system=system or row.system))
        passes += step.passes
    if done:
        fields = sorted({name for one in done for name in one.fields})
        rows_update(Task, [one.task for one in done], fields)
        rows_insert(TaskEvent, [one.event for one in done])
        passes_write(passes, now=now)
        rows_insert(Outbox, [one.outbox for one in done if one.outbox is not None])
        if Effect.DISPATCH in row.effects:
            _skills_load([one.task for one in done])
        effects.after_commit_many((one.task, row.all_effects) for one in done)
        for one in done:
            _log(row, one)
        # One relay for the batch's signals: it sends whatever is due.
        signal = _signals_write([one.event for one in done], now=now)
        if signal:
            effects.after_commit(task=done[0].task, effects=signal)
    return Batch(applied=[one.task for one in done], refused=refused)


@functools.cache
def _clock_statements(batch: int) -> dict[str, str]:
    return lifecycle_sql.statements(TRANSITIONS, failure_kind=OutboxKind.FAILURE,
                                    pending=OutboxStatus.PENDING, batch=batch)


# The clock each statement applies, and the table's rows it applies (one, or two: the
# overall clock escalates or aborts).
CLOCK_ACTIONS = {"offer": ("offer_timeout",), "work": ("work_timeout",),
                 "overall": ("escalate", "overall_timeout")}


def clock_statement(*, clock: str, due: datetime.datetime, batch: int,
                    reasons: Mapping[str, str]) -> tuple[str, dict[str, Any]]:
    """Return clock_rows_applied's statement for a clock and its parameters, now."""
    row = TRANSITIONS[CLOCK_ACTIONS[clock][0]]
    now = timezone.now()
    params: dict[str, Any] = {"due": due, "at": now, "at_iso": now.isoformat(),
                              "label": row.system, "label_json": json.dumps(row.system),
                              "signal": bool(settings.INBOX_SIGNALS_BUS)}
    for name, said in reasons.items():
        refusal = _reason_refusal(row, said)
        if refusal is not None:
            raise refusal
        params[name], params[f"{name}_json"] = said, json.dumps(said)
    if clock == "offer":
        params.update(pass_why=TaskPass.Why.LAPSED, pass_reason=OFFER_RAN_OUT)
    if clock == "overall":
        params.update(since=due, error=TIMED_OUT_ERROR, cause_max=CAUSE_MAX_CHARS)
    return _clock_statements(batch)[clock], params


def clock_rows_applied(*, clock: str, due: datetime.datetime, batch: int,
                       reasons: Mapping[str, str]) -> int | None:
    """Apply a clock's rows to at most batch of its due tasks in the database; return how many.

    PostgreSQL only (inbox.lifecycle_sql): one statement locks the clock's tasks due at due
    (SKIP LOCKED, earliest first), changes them as transitions_apply would with the same
    rows, and writes their events, passes, outbox and signal rows; the effects are handed
    to inbox.effects here, to run after the caller's transaction commits. Elsewhere
    (SQLite) None: the caller applies them in Python (transitions_apply).

    reasons: the offer and work clocks' "reason"; the overall clock's "escalated" (an
    escalation's), "ran_out" (the escalation clock's), and "abort" (with {duration}, the
    task's overall seconds as the clock service says them: inbox.lifecycle_sql.duration_sql).
    due is also when an escalation clock starts (the moment the sweeper saw it run out).
    """
    connection = transaction.get_connection()
    if connection.vendor != "postgresql":
        return None
    if not connection.in_atomic_block:
        raise RuntimeError("clock_rows_applied needs the sweep's transaction.")
    rows = [TRANSITIONS[action] for action in CLOCK_ACTIONS[clock]]
    sql, params = clock_statement(clock=clock, due=due, batch=batch, reasons=reasons)
    with connection.cursor() as cursor:
        # No JIT for the sweep's transaction: the overall statement's estimate (a probe of
        # each task's events) can pass jit_above_cost, and compiling it cost 90 ms a sweep
        # (auto_explain, bench/sweeper.py's steady phase) where running it costs 3.
        cursor.execute("SET LOCAL jit = off")
        cursor.execute(sql, params)
        changed = cursor.fetchall()
    label = params["label"]
    by_action = {row.action: row for row in rows}
    effects.after_commit_rows(
        (task_id, by_action[action].target_from(source), dispatch == Dispatch.PUSH,
         by_action[action].all_effects)
        for task_id, action, source, _target, dispatch, _outbox_id in changed)
    for task_id, action, source, target, *_ in changed:
        changes.info("task %s… %s → %s (%s by %s)", str(task_id)[:8], source, target, action,
                     label)
    if params["signal"] and changed:
        # One relay for the batch's signals: it sends whatever is due.
        effects.after_commit_rows([(changed[0][0], "", False, (Effect.SIGNAL,))])
    return len(changed)


def take_next_applied(*, worker: User, skill: str | None = None,
                      history: bool = False) -> Task | None:
    """Apply the take_next row in the database, in one round trip; None if nothing taken.

    PostgreSQL only (the function inbox_take_next_task, migrations 0010, 0012, 0016): it
    checks the worker (active, the worker role), weighs their capacity, picks the candidate
    (SKIP LOCKED, separation of duties), changes it as _hold does, appends its hash-chained
    event and, with history, answers the task's history too, in the caller's transaction
    or its own (its own commits with synchronous_commit off: a crash of the database may
    forget the last fraction of a second's takes, never a decision after them, whose
    commit flushes them). The history rides on the task (events_read, which
    selectors.task_history answers), as JSON text made into events only when something
    reads it; without history, whoever reads it later queries it.
    None: nothing taken, for whatever reason (nothing
    waits, at capacity, no pull skill, no worker role); the caller's Python path then says
    why, in the words every other path uses. Elsewhere (SQLite) always None.
    """
    connection = transaction.get_connection()
    if connection.vendor != "postgresql":
        return None
    row = TRANSITIONS["take_next"]
    now = timezone.now()
    signal = bool(settings.INBOX_SIGNALS_BUS)
    # Alone in its transaction, the take commits without waiting for its WAL flush: the
    # flush was the paced take's p99 (docs/DECISIONS.md). Not in a caller's transaction,
    # which may hold a decision that must be durable when its commit returns.
    alone = not connection.in_atomic_block
    with connection.cursor() as cursor:
        cursor.execute(
            _TAKE_STATEMENTS[alone, history],
            # The moment's isoformat() is the hash's (inbox.history.event_hash), as Python
            # writes it: the function need not format it again.
            [worker.pk, skill or None, now, now.isoformat(), worker.email,
             json.dumps(worker.email), signal, history])
        found = cursor.fetchone()
    if found is None:
        return None
    if alone:
        found = found[1:]
    rows = ModelRows.of(Task, connection, None if history else _TAKEN_NAMES)
    task = rows.instance(found[:rows.width], connection)
    task.assignee = worker
    if history:
        task.skill = ModelRows.of(Skill, connection).instance(found[rows.width:-1],
                                                              connection)
        task.events_read = HistoryText(found[-1], task_id=task.pk, alias=connection.alias)
    if signal:
        effects.after_commit(task=task, effects=(*row.all_effects, Effect.SIGNAL))
    changes.info("task %s… %s → %s (%s by %s)", str(task.pk)[:8], row.sources[0],
                 task.state, row.action, worker.email)
    return task


# Transaction-local (is_local): it lasts until this statement's own transaction commits,
# and the pooled session's setting stays as it was.
_ASYNC_COMMIT = "set_config('synchronous_commit', 'off', true), "
# A take that shows nothing (the page's, which redirects; a script's) answers the task's
# identity and what the take wrote; its other columns are deferred, read if something
# asks (as .only() leaves them). Making the 37 others cost a fifth of the take's Python
# (docs/BENCHMARKS.md, "A take that shows nothing answers eight columns").
_TAKEN_NAMES = ("id", "state", "version", "chain_head", "skill_id", "assignee_id",
                "offer_deadline", "work_deadline")
_TAKE_CALL = "FROM inbox_take_next_task(%s, %s, %s, %s, %s, %s, %s, %s) r"


def _taken_columns(names: tuple[str, ...] | None) -> str:
    """The function's task columns for ModelRows.of(Task, ..., names), in its order."""
    return ", ".join(f'(r.taken)."{field.column}"' for field in Task._meta.concrete_fields
                     if names is None or field.attname in names)


# The take's statement by (alone, shown): the columns are the models' own names, never
# input. A take that shows the task (history asked: the API's answer, a page swapped in
# place) reads every column of the task, its skill's row and its history, as JSON text
# decoded only when read (inbox.history.HistoryText); one that does not reads _TAKEN_NAMES, and
# whoever later asks for the task's skill or another column reads it then.
_SHOWN_COLUMNS = ", ".join(f's."{field.column}"' for field in Skill._meta.concrete_fields)
_SHOWN = (f", {_SHOWN_COLUMNS}, r.taken_history::text {_TAKE_CALL} "
          "JOIN accounts_skill s ON s.id = (r.taken).skill_id")
_TAKE_STATEMENTS = {
    (alone, shown): (f"SELECT {_ASYNC_COMMIT if alone else ''}"
                     + (f"{_taken_columns(None)}{_SHOWN}" if shown
                        else f"{_taken_columns(_TAKEN_NAMES)} {_TAKE_CALL}"))
    for alone in (False, True) for shown in (False, True)
}
def _skills_load(tasks: list[Task]) -> None:
    """Read the skills of tasks in one query (dispatch asks each task's queue kind)."""
    missing = {task.skill_id for task in tasks if not Task.skill.is_cached(task)}
    skills = Skill.objects.in_bulk(missing) if missing else {}
    for task in tasks:
        if task.skill_id in skills:
            task.skill = skills[task.skill_id]


def _reason_refusal(row: Transition, reason: str) -> InboxError | None:
    """Return why the row refuses this reason (blank where one is needed, too long), or None.

    Every path (pages, API, commands, batches) is held to what the API's inputs allow.
    """
    if row.needs_reason and not reason.strip():
        return Conflict(row.needs_reason)
    if len(reason) > REASON_MAX_CHARS:
        return InboxError(f"The reason is {len(reason):,} characters long; say it in at "
                          f"most {REASON_MAX_CHARS:,}.")
    return None


# The columns a change may write besides state, version and the chain head.
CHANGEABLE = ("assignee_id", "offer_deadline", "work_deadline", "overall_deadline",
              "next_heartbeat_at", "answer", "reason", "closed_at")
ALWAYS_WRITTEN = ["state", "version", "chain_head"]


def _snapshot(task: Task) -> tuple[Any, ...]:
    return tuple(getattr(task, name) for name in CHANGEABLE)


def _changed(task: Task, before: tuple[Any, ...]) -> list[str]:
    """Return the columns to write: the ones every change writes and those this one did."""
    return ALWAYS_WRITTEN + [
        name.removesuffix("_id") for name, was in zip(CHANGEABLE, before, strict=True)
        if getattr(task, name) != was]


def undo_seconds() -> int:
    """Return how long a worker's decision waits before it is sent (0: undo is off)."""
    return settings.INBOX_UNDO_SECONDS


def _refusal(row: Transition, *, task: Task, actor: User | None) -> Conflict | None:
    """Return what refuses the row on the task as read, or None.

    Holder first, then state, then (a worker's row) whether the actor may still hold it.
    """
    if row.holder and (actor is None or task.assignee_id != actor.pk):
        return Conflict(row.holder)
    if task.state not in row.sources:
        return IllegalTransition(
            f"Cannot {row.action.replace('_', ' ')} a task that is "
            f"{task.get_state_display().lower()}.")
    if row.eligible:
        problem = hold_problem(user=actor, task=task) if actor is not None else "nobody acts"
        if problem is not None:
            return AccessLost(problem)
    return None


def transition_problem(*, task: Task, action: str, actor: User | None) -> str | None:
    """Return why action would be refused on the task as read, or None (pages ask first).

    The same rules, in the same order, as transition applies under the row lock.
    """
    refusal = _refusal(TRANSITIONS[action], task=task, actor=actor)
    return refusal.message if refusal is not None else None


def task_receive(**fields: Any) -> Task:
    """Create a task from the intake's fields in the open transaction, with its first event.

    The "receive" row of the table: no state before, queued after; its effect (an offer,
    for a push queue) runs after the caller's transaction commits.
    """
    row = TRANSITIONS["receive"]
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("task_receive needs the intake's transaction.")
    now = timezone.now()
    task = Task(state=row.target_from(""), **fields)
    step = Step(actor=None, now=now, reason="", params={})
    event = event_new(task=task, action=row.action, from_state="", actor=None,
                      label=row.system, reason="", data=row.change(task, step), at=now)
    task.save(force_insert=True)
    event_save(event)
    effects.after_commit(task=task, effects=row.all_effects + _signal(event, now))
    return task


def tasks_receive(rows: list[dict[str, Any]]) -> list[Task]:
    """Create a task from each row of intake fields in the open transaction; return them.

    task_receive for one receive of the queue: the same "receive" row, the same rows
    written (each task, its first event, its signal when a bus is set) and the same
    effects after commit, in one INSERT of the tasks and one of their events. The caller
    makes sure no row's token digest is taken: one that is fails the whole INSERT
    (IntegrityError) and, with it, the caller's transaction.
    """
    row = TRANSITIONS["receive"]
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("tasks_receive needs the intake's transaction.")
    now = timezone.now()
    step = Step(actor=None, now=now, reason="", params={})
    tasks, events = [], []
    for fields in rows:
        task = Task(state=row.target_from(""), **fields)
        events.append(event_new(task=task, action=row.action, from_state="", actor=None,
                                label=row.system, reason="", data=row.change(task, step),
                                at=now))
        tasks.append(task)
    rows_insert(Task, tasks)
    # After the tasks, each with its chain head; the events' ids come back for the signals.
    rows_insert(TaskEvent, events)
    signal = _signals_write(events, now=now)
    for task in tasks:
        effects.after_commit(task=task, effects=row.all_effects + signal)
    return tasks


def _signal(event: TaskEvent, now: datetime.datetime) -> tuple[Effect, ...]:
    """Record the event as a change signal to relay, if a bus is set; return its effect."""
    return _signals_write([event], now=now)


def _signals_write(events: list[TaskEvent], *, now: datetime.datetime) -> tuple[Effect, ...]:
    """Record each event as a change signal to relay, if a bus is set; return the effect."""
    if not settings.INBOX_SIGNALS_BUS or not events:
        return ()
    # In the events' transaction: a signal exists exactly for each committed change.
    SignalOutbox.objects.bulk_create(
        SignalOutbox(event=event, task_id=event.task_id, version=event.version,
                     next_attempt_at=now) for event in events)
    return (Effect.SIGNAL,)
