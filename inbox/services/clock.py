"""The clocks: the sweeper that applies timeouts, heartbeats, and upstream checks.

Deadlines are indexed columns (partial indexes hold only running clocks), so a sweep
costs what is due, not what is stored. Each clock's due rows are locked with
SELECT ... FOR UPDATE SKIP LOCKED in bounded batches and changed together by one
inbox.lifecycle.transitions_apply per action, a fixed number of statements whatever the
batch holds: two sweepers at once, or one run twice, apply each timeout once. A batch that
fails is applied again one task at a time, so one broken task holds back only itself.
Celery beat runs the sweep every few seconds; it is the guarantee, whatever else
(countdowns) may shorten the wait.
"""

import datetime
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from config.compiled import Earliest
from config.errors import Conflict, ExternalServiceError
from inbox.lifecycle import clock_rows_applied, transition, transitions_apply
from inbox.models import CLOSED_STATES, OPEN_STATES, Task, TaskEvent, TaskState
from inbox.ratelimit import SENDTASK, rate_take
from inbox.selectors import open_task_ids_of_execution, open_tasks_of_execution
from inbox.tokens import token_decrypt
from processes import aws
from processes.contract import HEARTBEATS_PER_PERIOD

logger = logging.getLogger(__name__)

BATCH = 200
ESCALATE = "escalate"


# What happens when a clock runs out. The sweeper applies each clock's due rows in batches
# (below); these one-task handlers are its fallback for a batch that failed, each
# conditioned on the state and version the sweeper saw, so a task that changed meanwhile
# (accepted at the last moment, or handled by another sweeper) is left alone: a handler run
# twice, or from two processes at once, applies a timeout once.

LAPSED = "Nobody accepted the offer in time; it goes to the next worker."
WORK_RAN_OUT = "The work clock ran out before the task was finished; it is back in the queue."
ESCALATED = "The overall clock ran out; the supervisors have the escalation clock to act."
ESCALATION_RAN_OUT = "The escalation clock ran out before the escalated task was finished."
# An abort's reason: {duration} is the task's overall seconds as _duration says them.
OVERALL_RAN_OUT = "The overall clock ran out ({duration})."
# What each clock's rows say, as inbox.lifecycle.clock_rows_applied takes them.
REASONS = {"offer": {"reason": LAPSED}, "work": {"reason": WORK_RAN_OUT},
           "overall": {"escalated": ESCALATED, "ran_out": ESCALATION_RAN_OUT,
                       "abort": OVERALL_RAN_OUT}}


def offer_lapse(*, task_id: Any, version: int) -> Task:
    """Withdraw an offer nobody answered; its worker is not offered the task again soon."""
    return transition(task_id=task_id, action="offer_timeout", expected_version=version,
                      reason=LAPSED)


def work_timeout(*, task_id: Any, version: int) -> Task:
    """Take a task back from a worker who held it past its work clock."""
    return transition(task_id=task_id, action="work_timeout", expected_version=version,
                      reason=WORK_RAN_OUT)


def overall_timeout(*, task_id: Any, version: int,
                    now: datetime.datetime | None = None) -> Task:
    """Run the task's timeout policy: abort (tell Step Functions) or escalate once.

    now is the moment the sweeper saw the clock run out; the escalation clock starts there.
    """
    task = Task.objects.get(pk=task_id)
    # Once only: a task reassigned or returned after its escalation, and still open when
    # the escalation clock runs out, is aborted, not escalated again.
    escalated = TaskEvent.objects.filter(task_id=task_id, action=ESCALATE).exists()
    if task.on_timeout == "escalate" and not escalated:
        return transition(task_id=task_id, action=ESCALATE, expected_version=version,
                          reason=ESCALATED, since=now or timezone.now())
    return transition(task_id=task_id, action="overall_timeout", expected_version=version,
                      reason=_abort_reason(task, escalated=escalated))


def _abort_reason(task: Task, *, escalated: bool) -> str:
    if escalated:
        return ESCALATION_RAN_OUT
    return OVERALL_RAN_OUT.format(duration=_duration(task))


# The same, for a batch of due rows the sweeper's transaction locked: one transitions_apply
# per action, each returning how many it applied. A refused row changed since it was read
# (it is not due now) and is left alone, as the one-task handlers' Conflict is.


def offer_lapses(tasks: list[Task], *, now: datetime.datetime) -> int:
    return len(transitions_apply(action="offer_timeout", tasks=tasks, reason=LAPSED).applied)


def work_timeouts(tasks: list[Task], *, now: datetime.datetime) -> int:
    return len(transitions_apply(action="work_timeout", tasks=tasks,
                                 reason=WORK_RAN_OUT).applied)


def overall_timeouts(tasks: list[Task], *, now: datetime.datetime) -> int:
    """Escalate the tasks whose policy says so and that never escalated; abort the others."""
    # One query for the batch; the rows are locked, so no escalation is written meanwhile.
    escalated = set(TaskEvent.objects.filter(task_id__in=[task.pk for task in tasks],
                                             action=ESCALATE).values_list("task_id", flat=True))
    escalating = [task for task in tasks
                  if task.on_timeout == "escalate" and task.pk not in escalated]
    chosen = {task.pk for task in escalating}
    aborting = [task for task in tasks if task.pk not in chosen]
    applied = 0
    if escalating:
        # The escalation clock starts at this sweep's now, not at whatever time it is then.
        applied += len(transitions_apply(action=ESCALATE, tasks=escalating, reason=ESCALATED,
                                         since=now).applied)
    if aborting:
        applied += len(transitions_apply(
            action="overall_timeout", tasks=aborting,
            reason=lambda task: _abort_reason(task, escalated=task.pk in escalated)).applied)
    return applied


@dataclass(frozen=True)
class Clock:
    """One clock: its name, its due filter, its deadline column and what applies it."""

    name: str
    due: Q
    column: str
    batch_apply: Callable[..., int]
    one_apply: Callable[..., Task]


def clocks(now: datetime.datetime) -> list[Clock]:
    """Return the clocks, each with its rows due at now."""
    return [
        Clock("offer", Q(state=TaskState.OFFERED, offer_deadline__lte=now), "offer_deadline",
              offer_lapses, offer_lapse),
        Clock("work", Q(state=TaskState.IN_PROGRESS, work_deadline__lte=now), "work_deadline",
              work_timeouts, work_timeout),
        Clock("overall", Q(state__in=OPEN_STATES, overall_deadline__lte=now),
              "overall_deadline", overall_timeouts,
              functools.partial(overall_timeout, now=now)),
    ]


# Read by no timeout (nor written): left out of the rows the sweeper locks and reads.
UNREAD = ("input", "input_order", "token_ciphertext")


def due_locked(clock: Clock, *, batch: int) -> QuerySet[Task]:
    """Return the query that locks a clock's due rows, earliest deadline first, at most batch.

    Whole rows but the big columns no timeout touches, with their skill (dispatch asks
    whether its queue pushes).
    """
    # SKIP LOCKED: a second sweeper takes other due rows instead of waiting for these.
    # of=self: the skills joined in stay unlocked; locked, a second sweeper would skip
    # every due task of a skill the first holds.
    return (Task.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("skill").defer(*UNREAD).filter(clock.due)
            .order_by(clock.column)[:batch])


def deadlines_sweep(*, batch: int | None = None, now: datetime.datetime | None = None
                    ) -> dict[str, int]:
    """Apply every due timeout, at most batch (BATCH) per clock; return how many per clock."""
    batch = batch or BATCH
    now = now or timezone.now()
    handled: dict[str, int] = {"failed": 0}
    for clock in clocks(now):
        try:
            with transaction.atomic():
                handled[clock.name] = clock_apply(clock, batch=batch, now=now)
        except Exception:
            # One broken task must not hold back every other deadline: the batch rolled
            # back (its effects with it), and its rows are applied one at a time instead.
            logger.exception("A batch of %s timeouts failed; applying them one at a time",
                             clock.name)
            handled[clock.name], failed = _one_at_a_time(clock, batch=batch)
            handled["failed"] += failed
    return handled


def clock_apply(clock: Clock, *, batch: int, now: datetime.datetime) -> int:
    """Apply at most batch of a clock's due rows in the open transaction; return how many.

    On PostgreSQL the database applies them, one statement (inbox.lifecycle_sql); elsewhere
    they are locked, read and applied here (transitions_apply). The same rows either way.
    """
    applied = clock_rows_applied(clock=clock.name, due=now, batch=batch,
                                 reasons=REASONS[clock.name])
    if applied is not None:
        return applied
    return clock.batch_apply(list(due_locked(clock, batch=batch)), now=now)


def _one_at_a_time(clock: Clock, *, batch: int) -> tuple[int, int]:
    """Apply a clock's due rows each in its own transition; return (applied, failed)."""
    applied = failed = 0
    with transaction.atomic():
        # SKIP LOCKED: a second sweeper takes other due rows instead of waiting for these.
        rows = list(Task.objects.select_for_update(skip_locked=True).filter(clock.due)
                    .order_by(clock.column).values_list("pk", "version")[:batch])
        for task_id, version in rows:
            try:
                clock.one_apply(task_id=task_id, version=version)
                applied += 1
            except Conflict:
                continue  # Changed since it was read (accepted, finished): not due now.
            except Exception:
                # It stays due, is retried on the next sweep, and is logged loudly each time.
                failed += 1
                logger.exception("The %s timeout of task %s failed", clock.name, task_id)
    return applied, failed


def next_deadline() -> datetime.datetime | None:
    """Return the earliest running deadline of any clock, or None when no clock runs.

    One statement: each clock's earliest deadline read from the end of its partial index.
    """
    return min((moment for moment in _EARLIEST.run() if moment is not None), default=None)


# The clocks' filters are the sweep's own (clocks()); compiled once, run every round.
_EARLIEST = Earliest(lambda: [
    (Task.objects.filter(state=TaskState.OFFERED), "offer_deadline"),
    (Task.objects.filter(state=TaskState.IN_PROGRESS), "work_deadline"),
    (Task.objects.filter(state__in=OPEN_STATES), "overall_deadline"),
])


def deadlines_wait(*, most: float, now: datetime.datetime | None = None) -> float:
    """Apply what is due, then return how long to sleep before the next sweep (at most most).

    Sweeps only when the earliest running deadline has passed. No wait while a sweep
    handled a whole batch (a backlog is worked off at once); else until the next
    deadline, or most seconds, so a nearer deadline set meanwhile by another process (an
    offer, a take) is seen within most seconds.
    """
    return deadlines_round(most=most, now=now)[0]


def deadlines_round(*, most: float, batch: int | None = None,
                    now: datetime.datetime | None = None) -> tuple[float, dict[str, int]]:
    """One round of the clock's deadline loop (deadlines_wait); return how long to sleep
    and what its sweep handled per clock (empty when nothing was due, so no sweep ran).

    batch: the sweep's rows per clock (BATCH); bench/sweeper.py runs the loop with others.
    """
    batch = batch or BATCH
    now = now or timezone.now()
    upcoming = next_deadline()
    handled: dict[str, int] = {}
    # The three MINs first: with nothing due (most rounds), no clock's transaction and
    # locking read is run at all. The sweep's own filters are the MINs' (clocks()).
    if upcoming is not None and upcoming <= now:
        handled = deadlines_sweep(batch=batch, now=now)
        if max(handled.get(clock, 0) for clock in ("offer", "work", "overall")) >= batch:
            return 0.0, handled
        upcoming = next_deadline()
    if upcoming is None:
        return most, handled
    return max(0.0, min(most, (upcoming - timezone.now()).total_seconds())), handled


# Heartbeats ------------------------------------------------------------------------------


def heartbeat_interval(seconds: int) -> datetime.timedelta:
    """Send HEARTBEATS_PER_PERIOD (3) heartbeats per HeartbeatSeconds: one lost is harmless."""
    return datetime.timedelta(seconds=max(1, seconds // HEARTBEATS_PER_PERIOD))


def heartbeats_send(*, batch: int = BATCH, now: datetime.datetime | None = None
                    ) -> dict[str, int]:
    """Send SendTaskHeartbeat for open tasks whose stage has HeartbeatSeconds and is due.

    Heartbeats take from the SendTask* budget after the answers: only while less than
    INBOX_HEARTBEAT_SHARE_PERCENT of the second's budget is used. Without a permit the
    round stops and the rest stay due for the next one ("deferred").
    """
    now = now or timezone.now()
    result = {"sent": 0, "retry": 0, "expired": 0, "deferred": 0}
    rate = settings.INBOX_SENDTASK_RATE
    share = rate * settings.INBOX_HEARTBEAT_SHARE_PERCENT // 100
    due = list(
        Task.objects.filter(next_heartbeat_at__lte=now).exclude(state__in=CLOSED_STATES)
        .order_by("next_heartbeat_at")
        .values_list("pk", "next_heartbeat_at", "heartbeat_seconds")[:batch]
    )
    for index, (task_id, seen, seconds) in enumerate(due):
        if not rate_take(name=SENDTASK, limit=rate, ceiling=share).granted:
            # Before the claim: a heartbeat without a permit stays due, nothing is lost.
            result["deferred"] = len(due) - index
            break
        # Claim by moving the time on, conditioned on the value read: another sender that
        # read the same row updates nothing and skips it.
        claimed = Task.objects.filter(pk=task_id, next_heartbeat_at=seen).update(
            next_heartbeat_at=now + heartbeat_interval(seconds or 3)
        )
        if not claimed:
            continue
        ciphertext = Task.objects.filter(pk=task_id).values_list("token_ciphertext",
                                                                 flat=True).first()
        try:
            aws.task_heartbeat(token=token_decrypt(ciphertext))
            result["sent"] += 1
        except ExternalServiceError as exc:
            if exc.retryable:
                result["retry"] += 1
                logger.warning("Heartbeat of task %s will be retried: %s", task_id, exc.message)
                continue
            if exc.error_code in ("TaskTimedOut", "InvalidToken", "TaskDoesNotExist"):
                result["expired"] += 1
                _expire(task_id, f"Step Functions refused a heartbeat ({exc.error_code}): "
                        "it no longer waits for this task.")
                continue
            raise
    return result


def _expire(task_id: Any, reason: str) -> None:
    try:
        transition(task_id=task_id, action="expire", system="heartbeats", reason=reason)
    except Conflict:
        pass  # Closed meanwhile: nothing left to expire.


# Executions that ended upstream ------------------------------------------------------------


def executions_check(*, batch: int = 50, now: datetime.datetime | None = None) -> dict[str, int]:
    """Cancel open tasks whose execution stopped, failed, timed out or no longer exists.

    Checks the executions of open tasks least recently checked first, at most batch
    executions per run (each one DescribeExecution call).
    """
    now = now or timezone.now()
    result = {"checked": 0, "cancelled": 0, "failed": 0}
    arns: list[str] = []
    # Streamed, and left as soon as batch executions are found: tasks of one execution
    # share it, so a few rows more than batch are read, never the whole table.
    for arn in (
        Task.objects.filter(state__in=OPEN_STATES)
        .order_by(F("execution_checked_at").asc(nulls_first=True))
        .values_list("execution_arn", flat=True).iterator(chunk_size=batch * 2)
    ):
        if arn not in arns:
            arns.append(arn)
        if len(arns) >= batch:
            break
    for arn in arns:
        result["checked"] += 1
        try:
            status = aws.execution_describe(execution_arn=arn)["status"]
            reason = f"The execution is {status}." if status != "RUNNING" else ""
        except ExternalServiceError as exc:
            if exc.error_code != "ExecutionDoesNotExist":
                # Throttled, or AWS failing: this execution waits for the next run; the
                # others are still checked.
                result["failed"] += 1
                logger.warning("Checking execution %s failed: %s", arn, exc.message)
                continue
            reason = "The execution no longer exists."
        if not reason:
            open_tasks_of_execution(execution_arn=arn).update(execution_checked_at=now)
            continue
        result["cancelled"] += execution_tasks_cancel(execution_arn=arn, reason=reason,
                                                      system="reconciler")
    return result


def _duration(task: Task) -> str:
    seconds = task.overall_seconds
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def execution_tasks_cancel(*, execution_arn: str, reason: str, system: str) -> int:
    """Cancel the open tasks of an execution that ended upstream; return how many.

    Shared by the backstop above and the status events (inbox.services.upstream): each
    task is its own transition, and one closed meanwhile (answered, or cancelled by the
    other path) is passed over.
    """
    cancelled = 0
    for task_id in open_task_ids_of_execution(execution_arn=execution_arn):
        try:
            transition(task_id=task_id, action="cancel", system=system,
                       reason=f"{reason} Nobody may work on it.")
            cancelled += 1
        except Conflict:
            continue
    return cancelled
