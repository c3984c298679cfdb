"""Send the outbox's callbacks to Step Functions: each decision at most once.

A transition that decides a task's outcome writes an Outbox row in its own transaction,
due at once or, for a worker's complete or reject, once its undo window of
INBOX_UNDO_SECONDS closed (an undo within it withdraws the row, see inbox.lifecycle's
"undo" row). The row is the message: ``Sender``, the callbacks' sender (manage.py
callbacks_run), sleeps until the next row falls due, then claims and sends the due rows
in batches, retries included, and goes on without a call slower than CALL_WAIT_SECONDS
(recording it once it returned); ``outbox_drain`` from Celery beat is the backstop while
no sender runs.

``callback_send`` claims the row with a conditional update that pushes its next attempt
a lease into the future, so two senders never send one row at once; a sender that dies
mid-call leaves the row to be claimed again when the lease runs out. The token is
decrypted and Step Functions called outside any transaction. ``outbox_drain`` does the
same for a batch: one statement claims up to a window's worth of due rows (SKIP LOCKED
on PostgreSQL, so drains running at once take disjoint rows), their permits are taken
from the rate limit in one increment, a bounded pool of threads sends them at once (the
threads only call Step Functions; the database is the drain's own thread's), and the
accepted ones are recorded in one transaction of a fixed number of statements. Then:

- accepted: the row is ``sent`` and the task closes (completed, rejected, timed out);
- throttling, 5xx, network errors: the row goes back to ``pending`` with exponential
  backoff and full jitter, and is ``dead`` after INBOX_CALLBACK_MAX_ATTEMPTS;
- an invalid callback (output not JSON or over 256 KiB, error or cause too long), any
  other 4xx or an unreadable token: ``dead`` at once, with the reason in ``last_error``;
- TaskTimedOut, InvalidToken, TaskDoesNotExist: Step Functions no longer waits for this
  token. DescribeExecution and GetExecutionHistory tell why: if this very decision was
  accepted earlier (a lost response), the row is ``reconciled`` and the task closes as if
  sent; otherwise the row is ``reconciled`` without ``sent_at`` and the task ``expired``
  with the true reason.

SendTask* calls pass a rate limit shared by every process (``inbox.ratelimit``). The
token, and the execution history that contains it, never reach a log line, an exception
message or ``last_error``.
"""

import datetime
import json
import logging
import operator
import random
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from dataclasses import dataclass
from enum import StrEnum
from functools import reduce
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from config.compiled import CompiledRead, Earliest, Many
from config.errors import ExternalServiceError
from inbox import effects, metrics
from inbox.callback_history import (
    history_is_decision,
    history_outcome_reason,
    history_task_outcome,
)
from inbox.lifecycle import IllegalTransition, transition, transitions_apply
from inbox.models import Outbox, OutboxKind, OutboxStatus, Task
from inbox.ratelimit import SENDTASK, rate_take
from inbox.redaction import redact
from inbox.tokens import TokenVaultError, token_decrypt
from processes import aws

logger = logging.getLogger(__name__)

# Step Functions' limits on SendTaskSuccess and SendTaskFailure parameters.
OUTPUT_MAX_BYTES = 256 * 1024
ERROR_MAX_CHARS = 256
CAUSE_MAX_CHARS = 32_768

# Step Functions no longer waits for the token; AWS says TaskTimedOut where the emulator
# says InvalidToken, and TaskDoesNotExist for a task it has forgotten.
_GONE_CODES = frozenset({"TaskTimedOut", "InvalidToken", "TaskDoesNotExist"})
_EXECUTION_GONE_CODES = frozenset({"ExecutionDoesNotExist"})
_LAST_ERROR_MAX = 2000

# Defaults of the settings below; each may be overridden in settings.py.
DEFAULTS: dict[str, Any] = {
    "INBOX_CALLBACK_MAX_ATTEMPTS": 8,
    "INBOX_CALLBACK_BACKOFF_BASE_SECONDS": 2.0,
    "INBOX_CALLBACK_BACKOFF_MAX_SECONDS": 300.0,
    # Longer than one send plus a reconciliation (botocore: 5 s connect, 15 s read, 2 tries).
    "INBOX_CALLBACK_LEASE_SECONDS": 120,
    # Below the 300/s refill of the smaller regions. Across a window boundary a fixed
    # window can pass twice this within one second: a burst for Step Functions' token
    # bucket to absorb (check the region's bucket size when raising the rate).
    "INBOX_SENDTASK_RATE": 250,
    "INBOX_SENDTASK_MAX_WAIT_SECONDS": 1.0,
    # A fresh row belongs to the callbacks' sender for this long before beat's drain takes it.
    "INBOX_OUTBOX_DRAIN_GRACE_SECONDS": 10,
    "INBOX_CALLBACK_HISTORY_MAX_EVENTS": 1000,
    # Threads of one drain sending its claimed rows at once (one shared boto3 client).
    "INBOX_CALLBACK_SENDERS": 8,
}


class SendResult(StrEnum):
    SENT = "sent"
    RECONCILED = "reconciled"
    EXPIRED = "expired"
    RETRY = "retry"
    DEAD = "dead"
    RATE_LIMITED = "rate_limited"
    SKIPPED = "skipped"


def _setting(name: str) -> Any:
    return getattr(settings, name, DEFAULTS[name])


# Sending ------------------------------------------------------------------------------


def callback_send(*, outbox_id: int) -> str:
    """Send one outbox row to Step Functions if it is due; return a SendResult.

    Return "skipped" when the row is not pending, not yet due, or claimed by another
    sender. Call it outside any transaction: it calls Step Functions.
    """
    row = _claim(outbox_id=outbox_id)
    if row is None:
        return SendResult.SKIPPED
    token = _token_or_dead(row)
    if token is None:
        return SendResult.DEAD
    wait = _rate_wait()
    if wait is not None:
        _release([row], delay=wait)
        return SendResult.RATE_LIMITED
    refusal = _attempt(row, token=token)
    if refusal is not None:
        return _refused(row, token=token, exc=refusal)
    _delivered([row], status=OutboxStatus.SENT, sent_at=timezone.now())
    return SendResult.SENT


def _token_or_dead(row: Outbox) -> str | None:
    """Return the claimed row's token to send, or None after making a row that cannot be
    sent dead (out of attempts, an invalid callback, an unreadable token)."""
    max_attempts = _setting("INBOX_CALLBACK_MAX_ATTEMPTS")
    if row.attempts > max_attempts:
        # Earlier senders claimed it and stopped without an outcome (crash, lost lease).
        _dead(row, reason=f"Gave up after {max_attempts} attempts without an outcome.")
        return None
    problem = callback_problem(kind=row.kind, output=row.output, error=row.error,
                               cause=row.cause)
    if problem:
        metrics.callback_error_count(kind=metrics.CallbackError.INVALID)
        _dead(row, reason=f"Invalid callback, not sent: {problem}")
        return None
    try:
        return token_decrypt(row.task.token_ciphertext)
    except TokenVaultError as exc:
        metrics.callback_error_count(kind=metrics.CallbackError.TOKEN_UNREADABLE)
        _dead(row, reason=exc.message)
        return None


def _attempt(row: Outbox, *, token: str) -> ExternalServiceError | None:
    """Call SendTaskSuccess or SendTaskFailure for the row; return Step Functions' refusal.

    Touches no database (the drain runs it in its sender threads); any other exception
    (a crash mid-call) propagates, and the row's lease brings it back.
    """
    try:
        if row.kind == OutboxKind.SUCCESS:
            aws.task_success(token=token, output=row.output)
        else:
            aws.task_failure(token=token, error=row.error, cause=row.cause)
    except ExternalServiceError as exc:
        return exc
    return None


def _refused(row: Outbox, *, token: str, exc: ExternalServiceError) -> str:
    """Record what Step Functions' refusal of the row means: reconcile, retry or dead."""
    if exc.error_code in _GONE_CODES:
        metrics.callback_error_count(kind=metrics.CallbackError.TOKEN_REFUSED)
        return _reconcile(row, token=token, refusal=exc)
    if exc.retryable:
        metrics.callback_error_count(
            kind=metrics.CallbackError.THROTTLED if aws.error_is_throttling(error=exc)
            else metrics.CallbackError.TRANSIENT)
        return _retry_or_dead(row, exc=exc)
    metrics.callback_error_count(kind=metrics.CallbackError.REJECTED)
    return _dead(row, reason=exc.message)


def callback_problem(*, kind: str, output: Any, error: str, cause: str) -> str | None:
    """Return why Step Functions would refuse this callback, or None if it is valid.

    Checked before sending because the emulator accepts invalid output (and fails the
    execution later) where AWS refuses it.
    """
    if kind == OutboxKind.SUCCESS:
        try:
            json.dumps(output, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return f"the output is not valid JSON ({exc})"
        size = len(json.dumps(output).encode())
        if size > OUTPUT_MAX_BYTES:
            return (
                f"the output is {size} bytes of JSON; Step Functions accepts at most "
                f"{OUTPUT_MAX_BYTES} (256 KiB)"
            )
        return None
    if not error:
        return "a failure needs an error name"
    if len(error) > ERROR_MAX_CHARS:
        return f"the error name is {len(error)} characters; at most {ERROR_MAX_CHARS}"
    if len(cause) > CAUSE_MAX_CHARS:
        return f"the cause is {len(cause)} characters; at most {CAUSE_MAX_CHARS}"
    return None


def _claim(*, outbox_id: int) -> Outbox | None:
    """Claim a due pending row for one attempt; return it (with what sending it reads), or
    None if not ours to send. The batch's claim and read, for one row."""
    rows = _claimed_rows(_claim_ids([outbox_id]))
    return rows[0] if rows else None


def _ours(row: Outbox) -> Q:
    """Match the row only while this attempt still holds it (its lease not taken over)."""
    return Q(pk=row.pk, status=OutboxStatus.PENDING, attempts=row.attempts)


def _rate_wait() -> float | None:
    """Wait (bounded) for a SendTask* permit; return None when granted, else the wait left."""
    rate = int(_setting("INBOX_SENDTASK_RATE"))
    deadline = time.monotonic() + float(_setting("INBOX_SENDTASK_MAX_WAIT_SECONDS"))
    while True:
        permit = rate_take(name=SENDTASK, limit=rate)
        if permit.granted:
            return None
        # Spread the waiters over the start of the next window.
        pause = permit.wait + random.uniform(0, 0.05)  # noqa: S311 (jitter, not a secret)
        if time.monotonic() + pause > deadline:
            return pause
        time.sleep(pause)


def _release(rows: list[Outbox], *, delay: float) -> None:
    """Give the claims back without counting an attempt: no call was made (one UPDATE)."""
    # Conditional on each claim: a sender whose lease was taken over changes nothing.
    Outbox.objects.filter(reduce(operator.or_, (_ours(row) for row in rows))).update(
        attempts=F("attempts") - 1,
        next_attempt_at=timezone.now() + datetime.timedelta(seconds=delay),
    )
    for row in rows:
        logger.info("Callback %s of task %s waits for SendTask capacity", row.pk,
                    row.task_id)


def backoff_seconds(*, attempt: int) -> float:
    """Return the delay before retry number attempt: exponential, capped, full jitter."""
    base = float(_setting("INBOX_CALLBACK_BACKOFF_BASE_SECONDS"))
    cap = float(_setting("INBOX_CALLBACK_BACKOFF_MAX_SECONDS"))
    return random.uniform(0, min(cap, base * 2 ** max(attempt - 1, 0)))  # noqa: S311


def _retry_or_dead(row: Outbox, *, exc: ExternalServiceError) -> str:
    max_attempts = _setting("INBOX_CALLBACK_MAX_ATTEMPTS")
    if row.attempts >= max_attempts:
        return _dead(row, reason=f"Gave up after {row.attempts} attempts: {exc.message}")
    delay = backoff_seconds(attempt=row.attempts)
    # Conditional on the claim: a sender whose lease was taken over changes nothing.
    Outbox.objects.filter(_ours(row)).update(
        next_attempt_at=timezone.now() + datetime.timedelta(seconds=delay),
        last_error=_error_text(exc.message),
    )
    logger.warning(
        "Callback %s of task %s failed (attempt %d of %d), retrying in %.1f s: %s",
        row.pk, row.task_id, row.attempts, max_attempts, delay, exc.message,
    )
    return SendResult.RETRY


def _dead(row: Outbox, *, reason: str) -> str:
    """Stop trying: the row stays for the admins, with why, and can be requeued."""
    # Only from pending: a row another sender settled meanwhile keeps its outcome.
    with transaction.atomic():
        changed = Outbox.objects.filter(pk=row.pk, status=OutboxStatus.PENDING).update(
            status=OutboxStatus.DEAD, last_error=_error_text(reason)
        )
        if changed:
            _task_close(row, lambda: transition(
                task_id=row.task_id, action="callback_failed", reason=_error_text(reason)))
    if changed:
        metrics.callback_dead_count()
    logger.error("Callback %s of task %s is dead: %s", row.pk, row.task_id, reason)
    return SendResult.DEAD


def _delivered(rows: list[Outbox], *, status: OutboxStatus, sent_at: datetime.datetime,
               note: str = "") -> None:
    """Record that Step Functions has the rows' decisions, and close their tasks, in one
    transaction of a fixed number of statements however many rows there are."""
    if not rows:
        return
    with transaction.atomic():
        # Only from pending: the truth (it landed) wins over a retry still in flight, and
        # a row already settled by another sender is left alone.
        settled = _settle([row.pk for row in rows], status=status, sent_at=sent_at,
                          note=note)
        # The row locks serialise the close with any other transition of these tasks
        # (a cancel by the execution reconciler); in key order, so two closers never
        # wait on each other.
        tasks = {task.pk: task for task in _CLOSING_READ.run(
            "all", task_ids=sorted({task_id for task_id, _ in settled.values()}))}
        kinds: dict[str, list[Task]] = {}
        for task_id, kind in settled.values():
            kinds.setdefault(kind, []).append(tasks[task_id])
        for kind, closing in kinds.items():
            batch = transitions_apply(action="delivered", tasks=closing, kind=kind)
            for task_id, refusal in batch.refused.items():
                # The task was closed meanwhile (e.g. cancelled by the execution reconciler).
                logger.warning("Task %s of a delivered callback was not closed: %s",
                               task_id, refusal.message)
    for row in rows:
        logger.info("Callback %s (%s) of task %s %s", row.pk, row.kind, row.task_id,
                    status if row.pk in settled else "already settled")


# The tasks _delivered closes, locked (compiled once per count of tasks, config.compiled).
_CLOSING_READ = CompiledRead(
    lambda shape, *, task_ids: Task.objects.select_for_update().filter(pk__in=task_ids)
    .defer("input", "input_order").order_by("pk"),
    task_ids=Many(Task._meta.pk))


def _settle(ids: list[int], *, status: OutboxStatus, sent_at: datetime.datetime,
            note: str) -> dict[int, tuple[Any, str]]:
    """Mark the pending rows among ids settled (one UPDATE); return the task and kind of
    each row it changed, by row id."""
    if not ids:
        return {}
    table = connection.ops.quote_name(Outbox._meta.db_table)
    marks = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET status = %s, sent_at = %s, last_error = %s "  # noqa: S608
            f"WHERE status = %s AND id IN ({marks}) RETURNING id, task_id, kind",
            [str(status), connection.ops.adapt_datetimefield_value(sent_at), note,
             str(OutboxStatus.PENDING), *ids],
        )
        rows = cursor.fetchall()
    task_id = Outbox._meta.get_field("task").target_field
    return {pk: (task_id.to_python(task), kind) for pk, task, kind in rows}


def _task_close(row: Outbox, close: Callable[[], object]) -> None:
    try:
        close()
    except IllegalTransition as exc:
        # The task was closed meanwhile (e.g. cancelled by the execution reconciler).
        logger.warning("Task %s of callback %s was not closed: %s", row.task_id, row.pk,
                       exc.message)


def _error_text(text: str) -> str:
    # A second line of defence: the messages used here never hold the token.
    return redact(text)[:_LAST_ERROR_MAX]


# Reconciliation ---------------------------------------------------------------------


def _reconcile(row: Outbox, *, token: str, refusal: ExternalServiceError) -> str:
    """Find out why Step Functions refused the token and record the true outcome."""
    task = row.task
    try:
        described = aws.execution_describe(execution_arn=task.execution_arn)
        history = aws.execution_history(
            execution_arn=task.execution_arn,
            max_events=_setting("INBOX_CALLBACK_HISTORY_MAX_EVENTS"),
        )
    except ExternalServiceError as exc:
        if exc.error_code in _EXECUTION_GONE_CODES:
            return _expired(row, reason=(
                f"Step Functions refused the callback ({refusal.error_code}) and the "
                "execution no longer exists there."
            ))
        if exc.retryable:
            return _retry_or_dead(row, exc=exc)
        return _dead(row, reason=f"Cannot reconcile after {refusal.error_code}: {exc.message}")
    outcome = history_task_outcome(history=history, token=token, stage=task.stage,
                                   entered_at=task.entered_at)
    status = described.get("status", "UNKNOWN")
    if outcome is not None:
        if history_is_decision(event=outcome, kind=row.kind, output=row.output,
                               error=row.error, cause=row.cause):
            _delivered(
                [row], status=OutboxStatus.RECONCILED, sent_at=outcome["timestamp"],
                note=f"Step Functions had already accepted this decision ({refusal.error_code} "
                     "on a later attempt: an earlier response was lost).",
            )
            return SendResult.RECONCILED
        return _expired(row, reason=history_outcome_reason(event=outcome))
    if status != "RUNNING":
        return _expired(row, reason=f"Step Functions no longer waits: execution {status}.")
    # Running, yet the token is refused and no outcome recorded: the stored token or the
    # history does not match. A human must look; the task stays as it is.
    return _dead(row, reason=(
        f"Step Functions refused the token ({refusal.error_code}) while the execution is "
        f"RUNNING and its history shows no outcome for stage {task.stage!r}."
    ))


def _expired(row: Outbox, *, reason: str) -> str:
    """Settle a decision Step Functions will never take, and expire its task with why."""
    with transaction.atomic():
        settled = Outbox.objects.filter(pk=row.pk, status=OutboxStatus.PENDING).update(
            status=OutboxStatus.RECONCILED, last_error=_error_text(f"Not delivered: {reason}")
        )
        if settled:
            _task_close(row, lambda: transition(task_id=row.task_id, action="expire",
                                                reason=reason))
    logger.warning("Callback %s of task %s not delivered, task expired: %s", row.pk,
                   row.task_id, reason)
    return SendResult.EXPIRED


# The outbox as a whole ----------------------------------------------------------------


def outbox_drain(*, batch: int = 100, budget_seconds: float = 0.0, helpers: int = 0,
                 grace_seconds: float | None = None) -> int:
    """Send due pending rows in batches; return how many were handled.

    One batch claims up to batch rows (and no more than one window of the SendTask rate);
    after a full batch another follows while budget_seconds (from the start) last and
    the rate limit granted every permit, its calls on their way while the batch before
    is recorded. A row never tried is taken only grace_seconds after it was due (default
    INBOX_OUTBOX_DRAIN_GRACE_SECONDS: beat's drain, the backstop, leaves a fresh row to
    the sender, outbox_relay, which passes 0). Call it outside any transaction: it calls
    Step Functions.

    helpers: when the first batch comes full (a backlog), ask for this many more drains
    (inbox.effects.drain_helpers_request) to run beside this one in other processes for
    the rest of the budget; their claims are disjoint (SKIP LOCKED) and the rate limit is
    shared, so together they send no row twice and no faster than the SendTask rate.
    """
    deadline = time.monotonic() + budget_seconds
    senders = max(1, int(_setting("INBOX_CALLBACK_SENDERS")))
    with ThreadPoolExecutor(max_workers=senders, thread_name_prefix="callback-send") as pool:
        handled, last = _batches(pool, batch=batch, deadline=deadline, helpers=helpers,
                                 grace_seconds=grace_seconds)
        # Leaving the pool waits for the last batch's calls (recorded below) to return.
    return handled + _recorded(last)


def _batches(pool: ThreadPoolExecutor, *, batch: int, deadline: float, helpers: int = 0,
             grace_seconds: float | None, late: list["_Sending"] | None = None,
             ) -> tuple[int, "_Sending | None"]:
    """Claim and send batch after batch (outbox_drain); return how many were recorded and
    the last batch, its calls still on their way, for the caller to record.

    late: the sender's list of calls left on their way (Sender): each batch's calls are
    then waited for at most CALL_WAIT_SECONDS before the next claim, and those still out
    are put there. None: every call is waited for.
    """
    handled = 0
    wait = None if late is None else CALL_WAIT_SECONDS
    left_out = 0 if late is None else len(late)
    previous: _Sending | None = None
    while True:
        limit = min(batch, int(_setting("INBOX_SENDTASK_RATE")))
        rows = _claim_due(limit=limit, grace_seconds=grace_seconds) if limit > 0 else []
        if helpers > 0 and previous is None and len(rows) == limit > 0:
            effects.drain_helpers_request(count=helpers,
                                          expires=max(1.0, deadline - time.monotonic()))
        ready, settled = _prepared(rows)
        sending = _send_start(pool, ready)
        handled += settled
        if previous is not None:
            handled += _recorded(previous, wait=wait, late=late)
        previous = sending
        if sending.held_back or len(rows) < limit or time.monotonic() >= deadline:
            return handled, previous
        if late is not None and len(late) > left_out:
            # Calls were left out: the caller's next round claims only what their number
            # leaves room for (Sender), so no more than a batch's worth waits in the pool.
            return handled, previous


# Rows one round of the sender claims at once, and how long it goes on with batch after
# batch before it reads the next due time again.
RELAY_BATCH = 100
RELAY_BUDGET_SECONDS = 1.0
# How long the sender waits for a batch's calls before it goes on without the slow ones
# (a SendTask call takes milliseconds; botocore's timeouts end a hung one only after
# seconds), and how often it looks for their return meanwhile.
CALL_WAIT_SECONDS = 1.0
LATE_LOOK_SECONDS = 0.25


class Sender:
    """The callbacks' sender (manage.py callbacks_run): its rounds, and the threads and the
    calls they share.

    Each round sends the pending rows that are due, as outbox_drain does, and waits for
    its calls at most CALL_WAIT_SECONDS: those that returned are recorded together (one
    batch, as before), and a call still out (a slow or hung Step Functions call, until
    botocore's timeouts end it) is left on its way and recorded by a later round once it
    returned. So a hung call holds back one row and one thread, not every answer due
    behind it. Its row stays claimed meanwhile: its lease (INBOX_CALLBACK_LEASE_SECONDS,
    above botocore's timeouts and retries) keeps any other sender from sending it again.
    Call it outside any transaction: it calls Step Functions. One thread uses a Sender.
    """

    def __init__(self) -> None:
        senders = max(1, int(_setting("INBOX_CALLBACK_SENDERS")))
        self._pool = ThreadPoolExecutor(max_workers=senders, thread_name_prefix="callback-send")
        self.late: list[_Sending] = []

    def round(self, *, most: float) -> float:
        """Record the late calls that returned, send the rows that are due; return how many
        seconds to sleep before the next round (outbox_relay)."""
        waited, self.late = self.late, []
        for sending in waited:
            _recorded(sending, wait=0, late=self.late)
        sleep = self._send(most=most)
        return min(sleep, LATE_LOOK_SECONDS) if self.late else sleep

    def out(self) -> int:
        """How many calls are left on their way."""
        return sum(len(sending.calls) for sending in self.late)

    def _send(self, *, most: float) -> float:
        # At most a batch's worth of calls out, waiting in the pool or running: a claimed
        # row's lease must not run out before its call has even started.
        room = RELAY_BATCH - self.out()
        if room <= 0:
            return LATE_LOOK_SECONDS
        due = _next_due()
        now = timezone.now()
        if due is not None and due <= now:
            deadline = time.monotonic() + RELAY_BUDGET_SECONDS
            before = len(self.late)
            handled, last = _batches(self._pool, batch=room, deadline=deadline,
                                     grace_seconds=0, late=self.late)
            handled += _recorded(last, wait=CALL_WAIT_SECONDS, late=self.late)
            if handled or len(self.late) > before:
                return 0.0  # more may have fallen due meanwhile: look again at once
            # Nothing claimed: another sender holds them, or the rate limit held them back
            # (their next attempt moved on): the next round reads when.
            return most
        if due is None:
            return most
        return min(most, (due - now).total_seconds())

    def close(self) -> None:
        """Wait for the calls still out (botocore's timeouts bound them) and record them;
        stop the threads."""
        waited, self.late = self.late, []
        for sending in waited:
            _recorded(sending)
        self._pool.shutdown(wait=True)


def outbox_relay(*, most: float) -> float:
    """One round of the sender (Sender.round), every call recorded before it returns;
    return how many seconds to sleep before the next round: until the next row falls
    due, at most most. For one round alone (callbacks_run --once, scripts, tests).
    """
    sender = Sender()
    try:
        return sender.round(most=most)
    finally:
        sender.close()


def _next_due() -> datetime.datetime | None:
    """When the earliest pending row falls due (read from the end of outbox_due)."""
    return _NEXT_DUE.run()[0]


# Compiled once: the sender reads it on every round and every wake-up.
_NEXT_DUE = Earliest(lambda: [
    (Outbox.objects.filter(status=OutboxStatus.PENDING), "next_attempt_at")])


def callbacks_send(*, outbox_ids: list[int]) -> int:
    """Send the given outbox rows (one batch's on-commit callbacks) that are due; return
    how many got an outcome. Rows not pending, not yet due or claimed by another sender
    are skipped, as callback_send skips them. One claim, one read, the batch's permits in
    one increment and the calls from a pool, as a drain's batch. Call it outside any
    transaction: it calls Step Functions."""
    rows = _claimed_rows(_claim_ids(outbox_ids))
    ready, settled = _prepared(rows)
    senders = max(1, min(int(_setting("INBOX_CALLBACK_SENDERS")), len(ready) or 1))
    with ThreadPoolExecutor(max_workers=senders, thread_name_prefix="callback-send") as pool:
        sending = _send_start(pool, ready)
        # Leaving the pool waits for the calls (recorded below) to return.
    return settled + _recorded(sending)


def _claim_ids(outbox_ids: list[int]) -> dict[int, int]:
    """Claim those of the rows that are due and pending for one attempt each (one UPDATE);
    return each claimed row's id and its attempts."""
    if not outbox_ids:
        return {}
    now = timezone.now()
    lease = datetime.timedelta(seconds=_setting("INBOX_CALLBACK_LEASE_SECONDS"))
    ops, table = connection.ops, connection.ops.quote_name(Outbox._meta.db_table)
    ids = sorted({int(pk) for pk in outbox_ids})
    pending = str(OutboxStatus.PENDING)
    with connection.cursor() as cursor:
        # A conditional update: of two senders racing for a row, exactly one changes it,
        # and the lease keeps it from being due again while this attempt runs. An undo
        # racing this claim withdraws the row only if it is unclaimed
        # (inbox.lifecycle._undone).
        cursor.execute(
            f"UPDATE {table} SET attempts = attempts + 1, next_attempt_at = %s "  # noqa: S608
            f"WHERE status = %s AND next_attempt_at <= %s "
            f"AND id IN ({', '.join(['%s'] * len(ids))}) RETURNING id, attempts",
            [ops.adapt_datetimefield_value(now + lease), pending,
             ops.adapt_datetimefield_value(now), *ids],
        )
        return dict(cursor.fetchall())


def _claim_due(*, limit: int, grace_seconds: float | None = None) -> list[Outbox]:
    """Claim up to limit due pending rows for one attempt each (one UPDATE); return them.
    A row never tried is claimed grace_seconds after it was due (outbox_drain)."""
    now = timezone.now()
    lease = datetime.timedelta(seconds=_setting("INBOX_CALLBACK_LEASE_SECONDS"))
    if grace_seconds is None:
        grace_seconds = _setting("INBOX_OUTBOX_DRAIN_GRACE_SECONDS")
    grace = datetime.timedelta(seconds=grace_seconds)
    ops, table = connection.ops, connection.ops.quote_name(Outbox._meta.db_table)
    # SKIP LOCKED: two drains at once claim disjoint rows, neither waiting on the other.
    # Without it (SQLite), the one statement runs under the database's single write lock.
    skip_locked = (" FOR UPDATE SKIP LOCKED"
                   if connection.features.has_select_for_update_skip_locked else "")
    pending = str(OutboxStatus.PENDING)
    with connection.cursor() as cursor:
        # A conditional update, as _claim_ids's: of two senders racing for a row, exactly
        # one changes it, and the lease keeps it from being due again while this attempt
        # runs. An undo racing this claim withdraws the row only if it is unclaimed
        # (inbox.lifecycle._undone): the row lock makes the second of the two see the
        # first's change, and of the two exactly one wins.
        # MATERIALIZED: the due rows are picked once. As a plain subquery PostgreSQL may
        # scan it again for each row it updates, and each scan skips the rows this very
        # statement already changed, claiming more than limit.
        cursor.execute(
            f"WITH due AS MATERIALIZED ("  # noqa: S608
            f"SELECT id FROM {table} WHERE status = %s AND next_attempt_at <= %s "
            f"AND (attempts > 0 OR next_attempt_at <= %s) "
            f"ORDER BY next_attempt_at LIMIT %s{skip_locked}) "
            f"UPDATE {table} SET attempts = attempts + 1, next_attempt_at = %s "
            f"WHERE status = %s AND id IN (SELECT id FROM due) RETURNING id, attempts",
            [pending, ops.adapt_datetimefield_value(now),
             ops.adapt_datetimefield_value(now - grace), limit,
             ops.adapt_datetimefield_value(now + lease), pending],
        )
        claimed = dict(cursor.fetchall())
    return _claimed_rows(claimed)


def _claimed_rows(claimed: dict[int, int]) -> list[Outbox]:
    """Read the claimed rows (id: attempts) with what sending them needs, oldest due first."""
    if not claimed:
        return []
    rows = list(
        Outbox.objects.filter(pk__in=claimed).select_related("task")
        .only(*_SENT_FIELDS).order_by("next_attempt_at", "pk")
    )
    for row in rows:
        # The claim's own count fences every later write of this attempt (_ours).
        row.attempts = claimed[row.pk]
    return rows


# What sending and recording a row read (its task's input, above all, stays unread).
_SENT_FIELDS = ("task", "decision_version", "kind", "output", "error", "cause", "status",
                "attempts", "next_attempt_at", "task__token_ciphertext",
                "task__execution_arn", "task__stage", "task__entered_at")


@dataclass
class _Sending:
    """A batch on its way: each row's call in the pool, and the rows held back."""

    calls: list[tuple[Outbox, str, Future]]
    held_back: list[Outbox]


def _prepared(rows: list[Outbox]) -> tuple[list[tuple[Outbox, str]], int]:
    """Return the claimed rows to send with their tokens, and how many were made dead."""
    ready: list[tuple[Outbox, str]] = []
    dead = 0
    for row in rows:
        try:
            token = _token_or_dead(row)
        except Exception:
            # One broken row must not stop the batch; its lease brings it back later.
            logger.exception("Callback %s could not be sent", row.pk)
            continue
        if token is None:
            dead += 1
        else:
            ready.append((row, token))
    return ready, dead


def _send_start(pool: ThreadPoolExecutor, ready: list[tuple[Outbox, str]]) -> _Sending:
    """Hand each row to the pool once the rate limit granted its permit; give back (for a
    later drain) the rows still without one after INBOX_SENDTASK_MAX_WAIT_SECONDS."""
    calls: list[tuple[Outbox, str, Future]] = []
    waiting = list(ready)
    rate = int(_setting("INBOX_SENDTASK_RATE"))
    max_wait = float(_setting("INBOX_SENDTASK_MAX_WAIT_SECONDS"))
    pause, deadline = 0.0, time.monotonic() + max_wait
    while waiting:
        # Before any call: the permits of the whole batch, in one increment.
        permit = rate_take(name=SENDTASK, limit=rate, count=len(waiting))
        if permit.calls:
            # The wait is bounded from the last permit granted, as _rate_wait's is.
            deadline = time.monotonic() + max_wait
        for row, token in waiting[:permit.calls]:
            calls.append((row, token, pool.submit(_attempt, row, token=token)))
        waiting = waiting[permit.calls:]
        if not waiting:
            break
        # Spread the waiters over the start of the next window. The bound is on the wait
        # for that window, not the jitter: after a sleep into a window, the next one
        # starts almost max_wait after the grant, and the jitter alone would give back
        # half of such batches (test_the_limiter_is_asked_before_each_send failed so).
        pause = permit.wait + random.uniform(0, 0.05)  # noqa: S311 (jitter, not a secret)
        if time.monotonic() + permit.wait > deadline:
            break
        time.sleep(pause)
    held_back = [row for row, _ in waiting]
    if held_back:
        _release(held_back, delay=pause)
    return _Sending(calls=calls, held_back=held_back)


def _recorded(sending: _Sending | None, *, wait: float | None = None,
              late: list[_Sending] | None = None) -> int:
    """Wait for the batch's calls and record what came of each; return how many got an
    outcome (a crash mid-call is none: the row's lease brings it back later).

    wait: wait at most this many seconds, record the calls that returned and put the
    others, still on their way, on late (Sender). None: wait for every call.
    """
    if sending is None:
        return 0
    calls = sending.calls
    if wait is not None and late is not None:
        done, _ = futures_wait([call for _, _, call in calls], timeout=wait)
        out = [one for one in calls if one[2] not in done]
        if out:
            late.append(_Sending(calls=out, held_back=[]))
            calls = [one for one in calls if one[2] in done]
    accepted, refused = [], []
    for row, token, call in calls:
        crash = call.exception()
        if crash is not None:
            logger.error("Callback %s could not be sent", row.pk,
                         exc_info=(type(crash), crash, crash.__traceback__))
        elif (refusal := call.result()) is not None:
            refused.append((row, token, refusal))
        else:
            accepted.append(row)
    _delivered(accepted, status=OutboxStatus.SENT, sent_at=timezone.now())
    handled = len(accepted)
    for row, token, refusal in refused:
        try:
            _refused(row, token=token, exc=refusal)
        except Exception:
            logger.exception("Callback %s could not be recorded", row.pk)
            continue
        handled += 1
    return handled
