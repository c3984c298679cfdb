"""What an execution's history says it waits for: its open human-stage waits.

A human stage's TaskScheduled event (``sqs:sendMessage.waitForTaskToken``) that no
TaskSucceeded, TaskFailed or TaskTimedOut closed yet is a wait; its parameters hold the
SQS message body Step Functions sent, with the token it injected. Read by the orphan check
(inbox.services.orphans) and by migrations (inbox.services.migration). The history holds
task tokens: nothing of an event's parameters reaches a log line or an error.
"""

import datetime
import json
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from processes.envelope import envelope_read

# The newest events of an execution read per check (one GetExecutionHistory page): a
# stage waiting for its token is among the last events of its branch.
HISTORY_EVENTS = 1000
_HUMAN_RESOURCE = ("sqs", "sendMessage.waitForTaskToken")
# What ends a scheduled task; TaskStarted and TaskSubmitted only lead to one of these.
_TASK_ENDS = frozenset({"TaskSucceeded", "TaskFailed", "TaskTimedOut", "TaskStartFailed",
                        "TaskSubmitFailed"})
_TASK_STEPS = frozenset({"TaskStarted", "TaskSubmitted"})


@dataclass(frozen=True)
class Wait:
    """A human stage's TaskScheduled event that nothing closed yet."""

    event_id: int
    scheduled_at: datetime.datetime | None
    parameters: str


def waits_open(events: list[dict[str, Any]]) -> list[Wait]:
    """Return the human stages an execution's history shows waiting, oldest first.

    events: the history in any order. Each end event (TaskSucceeded...) closes the
    TaskScheduled its chain of previousEventId leads back to through TaskStarted and
    TaskSubmitted, so the waits of parallel branches or Map iterations are told apart; an
    end whose chain leads nowhere known closes the latest task scheduled before it.
    """
    ordered = sorted(events, key=lambda event: event["id"])
    by_id = {event["id"]: event for event in ordered}
    scheduled = [event for event in ordered if event["type"] == "TaskScheduled"]
    closed: set[int] = set()
    for end in ordered:
        if end["type"] not in _TASK_ENDS:
            continue
        step = by_id.get(end.get("previousEventId"))
        while step is not None and step["type"] in _TASK_STEPS:
            step = by_id.get(step.get("previousEventId"))
        if step is not None and step["type"] == "TaskScheduled":
            closed.add(step["id"])
            continue
        before = [event["id"] for event in scheduled
                  if event["id"] < end["id"] and event["id"] not in closed]
        if before:
            closed.add(before[-1])
    waits = []
    for event in scheduled:
        details = event.get("taskScheduledEventDetails") or {}
        if (details.get("resourceType"), details.get("resource")) != _HUMAN_RESOURCE:
            continue
        if event["id"] in closed:
            continue
        waits.append(Wait(event_id=event["id"], scheduled_at=_moment(event.get("timestamp")),
                          parameters=details.get("parameters") or ""))
    return waits


def _moment(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value if timezone.is_aware(value) else value.replace(tzinfo=datetime.UTC)
    return None


def wait_body(wait: Wait) -> str | None:
    """Return the SQS message body a wait's TaskScheduled parameters hold, or None.

    Step Functions records the resolved Parameters as JSON text; their MessageBody is the
    envelope as an object (a compiled stage), or as text (a hand-written one that built the
    string itself).
    """
    try:
        parameters = json.loads(wait.parameters)
    except ValueError:
        return None
    body = parameters.get("MessageBody") if isinstance(parameters, dict) else None
    if isinstance(body, str):
        return body
    if isinstance(body, dict):
        return json.dumps(body)
    return None


def envelope_token(body: str | None) -> str | None:
    """Return the task token of the envelope a wait's message body holds, or None when the
    body is missing, not an envelope, or holds no token."""
    envelope, unreadable = envelope_read(body or "")
    token = envelope.get("taskToken") if isinstance(envelope, dict) and not unreadable else None
    return token if isinstance(token, str) and token else None
