"""Read an execution's history for the callback sender: what ended a task's wait.

Step Functions refuses a token it no longer waits for (TaskTimedOut, InvalidToken,
TaskDoesNotExist), and a lost response to a call that did land looks the same. The
history tells the two apart: the task's TaskScheduled event (its parameters carry the
token) leads, through previousEventId, to the event that ended the wait.

The history holds the task tokens of every callback stage: these functions only compare
against them in memory; nothing here logs or returns any part of the parameters.
"""

import datetime
import json
from typing import Any

from inbox.models import OutboxKind

_TASK_OUTCOMES = frozenset(
    {"TaskSucceeded", "TaskFailed", "TaskTimedOut", "TaskStartFailed", "TaskSubmitFailed"}
)


def history_task_outcome(*, history: list[dict], token: str, stage: str,
                         entered_at: datetime.datetime) -> dict | None:
    """Return the history event that ended a task's wait (succeeded, failed, timed out).

    The task's TaskScheduled event is the one whose parameters carry its token; failing
    that (a history without parameters), the one after the stage's entry at entered_at.
    Return None if the wait has not ended or the task is not found.
    """
    by_id = {event["id"]: event for event in history}
    scheduled = next(
        (e for e in history if e["type"] == "TaskScheduled" and _carries(e, token)), None
    )
    if scheduled is None:
        entered = next(
            (e for e in history if e["type"] == "TaskStateEntered"
             and e.get("stateEnteredEventDetails", {}).get("name") == stage
             and abs((e["timestamp"] - entered_at).total_seconds()) < 1),
            None,
        )
        if entered is not None:
            scheduled = next(
                (e for e in history if e["type"] == "TaskScheduled"
                 and e.get("previousEventId") == entered["id"]),
                None,
            )
    if scheduled is None:
        return None
    for event in history:
        if event["type"] in _TASK_OUTCOMES and _descends(event, scheduled["id"], by_id):
            return event
    return None


def _carries(event: dict, token: str) -> bool:
    """Return whether the TaskScheduled event's parameters hold token as a value."""
    parameters = event.get("taskScheduledEventDetails", {}).get("parameters") or ""
    try:
        return token in _strings(json.loads(parameters))
    except ValueError:
        return token in parameters


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return set().union(*(_strings(item) for item in value))
    return set()


def _descends(event: dict, ancestor_id: int, by_id: dict[int, dict]) -> bool:
    """Return whether ancestor_id is on the event's previousEventId chain."""
    current, steps = event, 0
    while current is not None and steps < 50:
        previous = current.get("previousEventId")
        if previous == ancestor_id:
            return True
        current, steps = by_id.get(previous), steps + 1
    return False


def history_is_decision(*, event: dict, kind: str, output: Any, error: str, cause: str) -> bool:
    """Return whether the outcome event is this callback (kind, output or error and cause)."""
    if kind == OutboxKind.SUCCESS:
        if event["type"] != "TaskSucceeded":
            return False
        sent = event.get("taskSucceededEventDetails", {}).get("output")
        try:
            return sent is not None and json.loads(sent) == output
        except ValueError:
            return False
    if event["type"] != "TaskFailed":
        return False
    details = event.get("taskFailedEventDetails", {})
    # The emulator drops the cause; AWS keeps it, and then it must match too.
    return details.get("error") == error and details.get("cause", cause) == cause


def history_outcome_reason(*, event: dict) -> str:
    """Return, for a task's records, how the stage ended when this decision did not land."""
    at = event["timestamp"].isoformat()
    if event["type"] == "TaskTimedOut":
        error = event.get("taskTimedOutEventDetails", {}).get("error") or "States.Timeout"
        return f"The stage timed out in Step Functions ({error}) at {at}, before the decision."
    if event["type"] == "TaskSucceeded":
        return f"Step Functions received another answer for this stage at {at}."
    if event["type"] == "TaskFailed":
        error = event.get("taskFailedEventDetails", {}).get("error") or "an error"
        return f"Step Functions received another outcome for this stage ({error}) at {at}."
    return f"The stage ended in Step Functions with {event['type']} at {at}."
