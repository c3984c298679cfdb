"""Orphaned waits: executions waiting at a human stage whose envelope never became a task.

A human stage puts its envelope on the intake queue and waits for its token. If that
message is lost (deleted by hand, a purged queue, expired in the dead-letter queue), the
execution waits until its stage's TimeoutSeconds and nobody is ever asked: nothing in the
inbox knows of it. ``orphans_check`` (Celery beat, every INBOX_ORPHANS_CHECK_EVERY_SECONDS)
walks the RUNNING executions of every deployed state machine (ListExecutions, page by page)
and reads each one's history (GetExecutionHistory): a TaskScheduled event of
``sqs:sendMessage.waitForTaskToken`` that no TaskSucceeded, TaskFailed or TaskTimedOut
closed is a wait (inbox.waits), and a wait whose token has no task at all in the inbox, and
whose task did not move to a newer version (a migration), is an orphan. Its
TaskScheduled parameters hold the SQS message body Step Functions sent, with the token it
injected: the body goes through the normal intake (``inbox.services.intake.intake_messages``,
as an SQS message would), so validation, the token digest's idempotency, the task's first
event and its effects are the same. A task already closed for that token is no orphan: its
answer is on its way or was given.

Every AWS call of a run takes a permit from one budget shared by every process (the rate
limiter, INBOX_ORPHANS_CHECK_CALLS per period). A cursor in the cache (the state machine
and the ListExecutions page it stopped at) lets a large fleet be covered over several runs,
and each execution checked is left alone for INBOX_ORPHANS_RECHECK_SECONDS. A wait younger
than INBOX_ORPHANS_GRACE_SECONDS is not judged yet: its message may still be on the queue.

The history holds task tokens: nothing of an event's parameters, and no body, reaches a log
line, an exception message or the cache (the cursor holds a page token of ListExecutions,
the checked marks a digest of the execution's ARN).
"""

import datetime
import hashlib
import logging
import uuid

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from config.errors import ExternalServiceError
from inbox.metrics import orphan_recovered_count
from inbox.models import IntakeError, Task
from inbox.ratelimit import rate_take
from inbox.services.intake import Outcome, intake_messages
from inbox.services.migration import moved_away
from inbox.tokens import token_digest
from inbox.waits import HISTORY_EVENTS, Wait, envelope_token, wait_body, waits_open
from processes import aws
from processes.models import ProcessVersion

logger = logging.getLogger(__name__)

# The rate limiter's name for the check's AWS calls (ListExecutions, GetExecutionHistory).
BUDGET = "orphans"
LOCK_KEY = "inbox:orphans-check"
# Above the longest run: a budget of calls at the AWS client's timeouts.
LOCK_SECONDS = 600
CURSOR_KEY = "inbox:orphans:cursor"
# The cursor outlives a quiet day; AWS keeps a ListExecutions token valid for 24 hours.
CURSOR_SECONDS = 24 * 3600
CHECKED_KEY = "inbox:orphans:checked:{arn}"
# Executions per ListExecutions call (its maximum): one call lists a thousand.
PAGE_SIZE = 1000


# One execution ---------------------------------------------------------------------------


def execution_orphans_recover(*, execution_arn: str, now: datetime.datetime | None = None,
                              ) -> dict[str, int]:
    """Read one execution's history and take in each of its orphaned waits; return counts.

    Counts: "recovered" (a task now exists), "has_task" (a task exists for the token),
    "recent" (younger than the grace period), "migrated" (its task moved to a newer
    version: the execution's stop is asked for again), "invalid" (the intake refused the envelope,
    or failed on it: recorded as an IntakeError either way), "unreadable" (the history
    shows no envelope with a token). One
    GetExecutionHistory call (HISTORY_EVENTS newest events).
    """
    now = now or timezone.now()
    counts = dict.fromkeys(("recovered", "has_task", "recent", "invalid", "unreadable",
                            "migrated"), 0)
    events = aws.execution_history(execution_arn=execution_arn, max_events=HISTORY_EVENTS,
                                   newest_first=True)
    grace = datetime.timedelta(seconds=settings.INBOX_ORPHANS_GRACE_SECONDS)
    for wait in waits_open(events):
        if wait.scheduled_at is not None and now - wait.scheduled_at < grace:
            counts["recent"] += 1
            continue
        body = wait_body(wait)
        token = envelope_token(body)
        if body is None or token is None:
            # Not the envelope shape at all; the intake would only refuse it again.
            counts["unreadable"] += 1
            logger.warning("Orphans: execution %s waits (event %d) but its history holds "
                           "no readable message body", execution_arn, wait.event_id)
            continue
        # Any task, open or closed: a closed one's answer is on its way, or was given.
        digest = token_digest(token)
        if Task.objects.filter(token_digest=digest).exists():
            counts["has_task"] += 1
            continue
        if moved_away(digest=digest):
            # Its task moved to a newer version and this execution was left to be
            # stopped: no orphan (moved_away asked for the stop again).
            counts["migrated"] += 1
            continue
        outcome = _intake(execution_arn=execution_arn, wait=wait, body=body)
        if outcome == Outcome.CREATED:
            counts["recovered"] += 1
            orphan_recovered_count()
            logger.warning("Orphans: execution %s waited (event %d) with no task in the "
                           "inbox; its envelope is taken in from the history",
                           execution_arn, wait.event_id)
        elif outcome == Outcome.DUPLICATE:
            # The queue's message was taken in meanwhile: no orphan after all.
            counts["has_task"] += 1
        else:
            counts["invalid"] += 1
            logger.warning("Orphans: the intake refused the envelope of execution %s "
                           "(event %d, %s); see the intake errors", execution_arn,
                           wait.event_id, outcome)
    return counts


def _intake(*, execution_arn: str, wait: Wait, body: str) -> Outcome:
    """Hand body to the intake as the SQS message it should have been."""
    # Stable per wait, so a refused envelope keeps one IntakeError row, counted again on
    # each attempt (as SQS counts receives), and cleared once it is taken in.
    message_id = "orphan-" + hashlib.sha256(
        f"{execution_arn}#{wait.event_id}".encode()).hexdigest()[:32]
    tried = IntakeError.objects.filter(message_id=message_id).values_list(
        "receive_count", flat=True).first() or 0
    message = {"MessageId": message_id, "Body": body,
               "Attributes": {"ApproximateReceiveCount": str(tried + 1)}}
    [outcome] = intake_messages(messages=[message])
    return outcome


# The fleet --------------------------------------------------------------------------------


class _BudgetSpent(Exception):
    """The run's permits are used up; the cursor stays where the run stopped."""


class _Budget:
    """The permits of one run: at most calls, each also taken from the shared window."""

    def __init__(self, calls: int) -> None:
        self.calls = calls
        self.used = 0

    def take(self) -> None:
        if self.used >= self.calls or not rate_take(
                name=BUDGET, limit=settings.INBOX_ORPHANS_CHECK_CALLS,
                window_seconds=settings.INBOX_ORPHANS_CHECK_EVERY_SECONDS).granted:
            raise _BudgetSpent
        self.used += 1


def _machines() -> list[str]:
    """Return the ARNs of the deployed state machines, oldest deploy first, each once."""
    arns = ProcessVersion.objects.order_by("pk").values_list("state_machine_arn", flat=True)
    return list(dict.fromkeys(arn for arn in arns if arn))


def _checked_key(execution_arn: str) -> str:
    return CHECKED_KEY.format(arn=hashlib.sha256(execution_arn.encode()).hexdigest())


def orphans_check(*, calls: int | None = None, now: datetime.datetime | None = None
                  ) -> dict[str, int]:
    """Check the next RUNNING executions of the deployed state machines for orphaned waits.

    Resume where the last run stopped; stop when calls AWS calls are used (the run's share,
    INBOX_ORPHANS_CHECK_CALLS unless given) or the shared budget of the period is, or at the
    end of the fleet (the next run starts again at its beginning). Return counts: the
    execution_orphans_recover counts summed, "checked", "skipped" (checked recently),
    "calls", "stopped" (1 when the budget stopped the run), "failed" (executions whose
    history could not be read; they are checked again on a later run). Raise
    ExternalServiceError when ListExecutions fails for another reason than throttling.
    """
    now = now or timezone.now()
    budget = _Budget(settings.INBOX_ORPHANS_CHECK_CALLS if calls is None else calls)
    counts = dict.fromkeys(("checked", "skipped", "recovered", "has_task", "recent",
                            "invalid", "unreadable", "migrated", "failed", "stopped",
                            "calls"), 0)
    machines = _machines()
    cursor = cache.get(CURSOR_KEY) or {}
    start = machines.index(cursor["machine"]) if cursor.get("machine") in machines else 0
    token = cursor.get("token") if cursor.get("machine") in machines else None
    try:
        for machine in machines[start:]:
            _machine_check(machine=machine, token=token, budget=budget, counts=counts,
                           now=now)
            # The next machine from its first page.
            token = None
        cache.delete(CURSOR_KEY)
    except _BudgetSpent:
        # The cursor is kept where the run stopped (_machine_check).
        counts["stopped"] = 1
    finally:
        counts["calls"] = budget.used
    return counts


def _machine_check(*, machine: str, token: str | None, budget: _Budget,
                   counts: dict[str, int], now: datetime.datetime) -> None:
    """Check the machine's RUNNING executions from page token on.

    When the run stops here (the budget, or AWS failing), the cursor keeps this machine and
    the page being checked: the next run lists that page again and skips the executions
    this run checked.
    """
    try:
        while True:
            budget.take()
            try:
                executions, following = aws.executions_running_page(
                    state_machine_arn=machine, page_token=token, page_size=PAGE_SIZE)
            except ExternalServiceError as exc:
                if exc.error_code == "StateMachineDoesNotExist":
                    logger.warning("Orphans: state machine %s of a deployed version does not "
                                   "exist upstream; its executions are not checked", machine)
                    return
                if exc.error_code == "InvalidToken" and token:
                    # The page token expired (24 hours): this machine again from its start.
                    token = None
                    continue
                if aws.error_is_throttling(error=exc):
                    # AWS's own budget is spent: the next run resumes at this page.
                    raise _BudgetSpent from exc
                raise
            arns = [execution["executionArn"] for execution in executions]
            # One cache read for the page's marks, not one per execution.
            marked = cache.get_many([_checked_key(arn) for arn in arns])
            for arn in arns:
                if _checked_key(arn) in marked:
                    counts["skipped"] += 1
                    continue
                budget.take()
                _execution_check(arn=arn, counts=counts, now=now)
            if following is None:
                return
            token = following
    except (_BudgetSpent, ExternalServiceError):
        cache.set(CURSOR_KEY, {"machine": machine, "token": token}, timeout=CURSOR_SECONDS)
        raise


def _execution_check(*, arn: str, counts: dict[str, int], now: datetime.datetime) -> None:
    try:
        found = execution_orphans_recover(execution_arn=arn, now=now)
    except ExternalServiceError as exc:
        if aws.error_is_throttling(error=exc):
            # AWS's own budget for histories is spent: stop; this one is checked next run.
            raise _BudgetSpent from exc
        # AWS failing, or the execution ended meanwhile: checked again on a later run.
        counts["checked"] += 1
        counts["failed"] += 1
        logger.warning("Orphans: the history of execution %s could not be read: %s", arn,
                       exc.message)
        return
    counts["checked"] += 1
    for name, value in found.items():
        counts[name] += value
    if not found["recent"]:
        # A wait still within its grace is judged on a later run; the others not for a while.
        cache.set(_checked_key(arn), 1, timeout=settings.INBOX_ORPHANS_RECHECK_SECONDS)


def orphans_check_once() -> dict[str, int] | None:
    """Run orphans_check unless another run holds the lock; return its counts.

    Two runs at once would share the budget but race over the cursor.
    """
    owner = uuid.uuid4().hex
    if not cache.add(LOCK_KEY, owner, timeout=LOCK_SECONDS):
        return None
    try:
        counts = orphans_check()
    finally:
        # Only our own lock (see intake_poll_once for the race this leaves, and its cost).
        if cache.get(LOCK_KEY) == owner:
            cache.delete(LOCK_KEY)
    if counts["recovered"] or counts["invalid"] or counts["failed"]:
        logger.info("Orphans: %s", ", ".join(f"{n} {o}" for o, n in counts.items() if n))
    return counts
