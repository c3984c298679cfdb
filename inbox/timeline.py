"""An execution's timeline for supervisors: the stages it passed, read from Step Functions.

GetExecutionHistory carries the task token of every callback stage (TaskScheduled
parameters), so only the Celery worker reads it (``timeline_refresh``) and it keeps the
state names, types, times and outcomes, nothing else. The web process reads the stored
``ExecutionTimeline`` and asks for a refresh when it is missing or stale
(``timeline_for_page``); it never calls Step Functions itself.

A page follows a running execution: it fetches the timeline partial again every
FOLLOW_SECONDS, each fetch asking for a refresh when the stored read is older than
FRESH_SECONDS, and stops when a read shows the execution ended (whose history never
changes, so it is never read again) or after FOLLOW_MAX_SECONDS. Task events do not
tell every change of a history (a Wait, a Lambda step), so there is no push signal to
follow; however many pages follow one execution, its history is read at most once per
FRESH_SECONDS (the cache lock lets one refresh at a time enqueue).
"""

import datetime
import hashlib
import logging
from typing import Any

from django.core.cache import cache
from django.db import transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from kombu.exceptions import OperationalError

from config.errors import ExternalServiceError
from inbox.effects import enqueue
from inbox.models import ExecutionTimeline
from inbox.redaction import redact
from inbox.templatetags.inbox_pages import span_text
from processes import aws
from processes.resume import is_resume_state
from processes.services import execution_described_record
from processes.shown import is_show_state

logger = logging.getLogger(__name__)

# A running execution's timeline read this recently is shown as it is; an older one is
# read again. An ended execution's history never changes: once read, it is never read again.
FRESH_SECONDS = 10
# One refresh per execution at a time (a refresh that ends lets the next one go); a lost
# enqueue (worker down) is retried after this.
LOCK_SECONDS = 30
# How often a page following a running execution asks for its timeline (inbox.js).
FOLLOW_SECONDS = FRESH_SECONDS
# A page stops following after this long (it says so; a reload follows again).
FOLLOW_MAX_SECONDS = 30 * 60
# The latest events read per refresh; a longer history shows its latest stages only.
MAX_EVENTS = 1000

RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED = (
    "running", "succeeded", "failed", "timed_out", "aborted")
OUTCOME_LABELS = {RUNNING: "running", SUCCEEDED: "succeeded", FAILED: "failed",
                  TIMED_OUT: "timed out", ABORTED: "aborted"}
_EXECUTION_ENDS = {"ExecutionSucceeded": "SUCCEEDED", "ExecutionFailed": "FAILED",
                   "ExecutionTimedOut": "TIMED_OUT", "ExecutionAborted": "ABORTED"}
_STATUS_OUTCOME = {"SUCCEEDED": SUCCEEDED, "FAILED": FAILED, "TIMED_OUT": TIMED_OUT,
                   "ABORTED": ABORTED}
_ENTERED, _EXITED, _ABORTED = "StateEntered", "StateExited", "StateAborted"
# Aggregates of a Map's iterations: the states inside them have their own events.
_AGGREGATES = ("MapIteration", "MapRun")
# A new attempt of the state's work (a Retry): it runs again after a failure.
_ATTEMPT_SUFFIXES = ("Scheduled", "Started", "Submitted")
_SCRATCH_SUFFIXES = ("Failed", "TimedOut")


# Reading and reducing the history (Celery worker only) ------------------------------------


def timeline_reduce(*, events: list[dict], status: str,
                    stopped_at: datetime.datetime | None = None) -> list[dict[str, Any]]:
    """Return the states entered, oldest first: name, type, entered/exited times, outcome.

    events are GetExecutionHistory events in any order; only their type, timestamp and
    the state's name are read. The states a compiled human stage copies its shown fields
    with (processes.shown) and the router of a start (processes.resume) are left out: the
    stage itself follows them. A state still
    open when the execution ended (status not RUNNING) takes the execution's outcome.
    Failure events apply to the state entered last and still open, which is exact for a
    sequence of states and an approximation inside Parallel branches.
    """
    stages: list[dict[str, Any]] = []

    def latest_open(name: str | None = None) -> dict[str, Any] | None:
        for stage in reversed(stages):
            if stage["exited_at"] is None and name in (None, stage["name"]):
                return stage
        return None

    for event in sorted(events, key=lambda e: e["id"]):
        kind, at = event["type"], _iso(event["timestamp"])
        if kind.endswith(_ENTERED):
            name = str(event["stateEnteredEventDetails"]["name"])
            if is_show_state(name) or is_resume_state(name):
                # The compiler's copies of a human stage's shown fields, and its router of
                # a start (processes/resume.py): not stages.
                continue
            stages.append({"name": str(event["stateEnteredEventDetails"]["name"]),
                           "type": kind.removesuffix(_ENTERED), "entered_at": at,
                           "exited_at": None, "outcome": RUNNING})
        elif kind.endswith(_EXITED):
            stage = latest_open(str(event["stateExitedEventDetails"]["name"]))
            if stage is not None:  # None: entered before the events read (truncated)
                stage["exited_at"] = at
                if stage["outcome"] == RUNNING:
                    stage["outcome"] = SUCCEEDED
        elif kind.startswith(_AGGREGATES) or kind.startswith("Execution"):
            continue
        elif kind.endswith(_ABORTED):
            _settle(latest_open(), outcome=ABORTED, at=at)
        elif kind.endswith(_SCRATCH_SUFFIXES):
            _settle(latest_open(), outcome=TIMED_OUT if kind.endswith("TimedOut") else FAILED,
                    at=None)
        elif kind.endswith(_ATTEMPT_SUFFIXES):
            stage = latest_open()
            if stage is not None:
                stage["outcome"] = RUNNING
    if status in _STATUS_OUTCOME:
        end = _iso(stopped_at) if stopped_at else None
        for stage in stages:
            if stage["exited_at"] is None:
                # A Fail state or a failed state is never exited: the execution ended there.
                if stage["outcome"] == RUNNING:
                    stage["outcome"] = _STATUS_OUTCOME[status]
                stage["exited_at"] = end
    return stages


def _settle(stage: dict[str, Any] | None, *, outcome: str, at: str | None) -> None:
    if stage is None:
        return
    stage["outcome"] = outcome
    if at is not None:
        stage["exited_at"] = at


def _iso(moment: datetime.datetime | str) -> str:
    return moment if isinstance(moment, str) else moment.isoformat()


def timeline_refresh(*, execution_arn: str) -> ExecutionTimeline:
    """Read the execution's history from Step Functions and store its timeline.

    A failed read is stored too (error kind and message, the stages of the last good
    read kept), so the page shows it; the caller gets the row either way.
    """
    checked_at = timezone.now()
    try:
        described = aws.execution_describe(execution_arn=execution_arn)
        newest_first = aws.execution_history(execution_arn=execution_arn,
                                             max_events=MAX_EVENTS + 1, newest_first=True)
    except ExternalServiceError as exc:
        logger.warning("Timeline of %s not read: %s", execution_arn, exc.message)
        return _store(execution_arn=execution_arn, checked_at=checked_at,
                      error_code=exc.error_code or "Unknown", error=redact(exc.message))
    except Exception as exc:
        # A bug: the page says so instead of "Fetching..." forever, and the worker's
        # log has the traceback. Only the class name is kept: a message may echo data.
        _store(execution_arn=execution_arn, checked_at=checked_at,
               error_code=type(exc).__name__, error="Internal error: see the worker's log.")
        raise
    # The executions list (inbox.executions) reads the status this read found.
    execution_described_record(execution_arn=execution_arn, described=described)
    events = newest_first[:MAX_EVENTS]
    # DescribeExecution was asked first: the history can already show the end it missed.
    ends = [_EXECUTION_ENDS[e["type"]] for e in events if e["type"] in _EXECUTION_ENDS]
    status = ends[0] if ends else str(described.get("status", "UNKNOWN"))
    stages = timeline_reduce(events=events, status=status, stopped_at=described.get("stopDate"))
    return _store(execution_arn=execution_arn, checked_at=checked_at, fetched_at=checked_at,
                  status=status, stages=stages, truncated=len(newest_first) > MAX_EVENTS)


def _store(*, execution_arn: str, checked_at: datetime.datetime,
           **fields: Any) -> ExecutionTimeline:
    """Write a read's outcome, unless a later read was stored first; return the row."""
    if "error_code" not in fields:
        fields.update(error_code="", error="")
    with transaction.atomic():
        # Row lock: two refreshes of one execution (a lapsed lock) may finish in any order.
        row, _created = ExecutionTimeline.objects.select_for_update().get_or_create(
            execution_arn=execution_arn, defaults={"checked_at": checked_at})
        if row.checked_at > checked_at:
            return row  # A later read is stored: this older one must not replace it.
        row.checked_at = checked_at
        for name, value in fields.items():
            setattr(row, name, value)
        row.save()
    return row


# Asking for it (web process) --------------------------------------------------------------


def timeline_request(*, execution_arn: str) -> bool:
    """Enqueue a refresh of the execution's timeline unless one is under way; say if it did.

    Raises kombu's OperationalError when the broker cannot be reached.
    """
    key = _lock_key(execution_arn)
    # Every supervisor's page load and poll asks; the first one in LOCK_SECONDS enqueues.
    if not cache.add(key, 1, timeout=LOCK_SECONDS):
        return False
    try:
        # Enqueued at once, not on commit: the refresh reads nothing this request writes.
        enqueue("inbox.tasks.execution_timeline_task", execution_arn)
    except OperationalError:
        cache.delete(key)  # The next page load tries again.
        raise
    return True


def _lock_key(execution_arn: str) -> str:
    return "inbox:timeline:" + hashlib.sha256(execution_arn.encode()).hexdigest()


def timeline_request_done(*, execution_arn: str) -> None:
    """Let the next request of the execution's timeline enqueue (its refresh has ended)."""
    cache.delete(_lock_key(execution_arn))


def is_ended(row: ExecutionTimeline | None) -> bool:
    """Return whether the row is a good read of an ended execution (final: never re-read)."""
    return row is not None and not row.error_code and row.status in _STATUS_OUTCOME


def timeline_for_page(*, execution_arn: str,
                      now: datetime.datetime | None = None) -> dict[str, Any]:
    """Return what the timeline partial shows, asking for a refresh when missing or stale."""
    now = now or timezone.now()
    row = ExecutionTimeline.objects.filter(execution_arn=execution_arn).first()
    ended = is_ended(row)
    stale = not ended and (
        row is None or row.checked_at < now - datetime.timedelta(seconds=FRESH_SECONDS))
    request_problem = None
    if stale:
        try:
            timeline_request(execution_arn=execution_arn)
        except OperationalError as exc:
            logger.error("Timeline refresh of %s not enqueued: %s", execution_arn,
                         type(exc).__name__)
            request_problem = (f"The task queue cannot be reached ({type(exc).__name__}): "
                               "the timeline cannot be refreshed now.")
    return {
        "row": row,
        "pending": stale and request_problem is None,
        # The page re-reads the timeline while the execution runs (inbox.js), and stops
        # once a read shows it ended.
        "follow": row is not None and not ended,
        "follow_seconds": FOLLOW_SECONDS,
        "follow_max_seconds": FOLLOW_MAX_SECONDS,
        "request_problem": request_problem,
        "stages": stage_rows(row=row) if row else [],
    }


def stage_rows(*, row: ExecutionTimeline) -> list[dict[str, Any]]:
    """Return the row's stages with times as datetimes, how long each took, and labels."""
    shown = []
    for stage in row.stages:
        entered = parse_datetime(stage["entered_at"]) if stage.get("entered_at") else None
        exited = parse_datetime(stage["exited_at"]) if stage.get("exited_at") else None
        until = exited or (row.fetched_at if stage["outcome"] == RUNNING else None)
        took = (until - entered).total_seconds() if entered and until else None
        shown.append({**stage, "entered_at": entered, "exited_at": exited,
                      "took": None if took is None else (
                          span_text(took) if took >= 1 else "under 1 s"),
                      "outcome_label": OUTCOME_LABELS.get(stage["outcome"], stage["outcome"])})
    return shown
