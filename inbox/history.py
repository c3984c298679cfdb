"""A task's history: append-only events, each hash chained to the one before.

inbox.lifecycle appends one event per transition, in the transition's transaction;
``events_verify`` (and ``manage.py history_verify``) finds a broken or altered link. On
PostgreSQL a trigger also refuses every UPDATE and DELETE of an event (migration 0005).
"""

import datetime
import hashlib
import json

from accounts.models import User
from inbox.bulk import row_insert
from inbox.models import GENESIS_HASH, Task, TaskEvent

__all__ = ["GENESIS_HASH", "event_hash", "event_new", "event_save", "events_verify"]


def event_hash(*, prev_hash: str, task_id: str, version: int, action: str, from_state: str,
               to_state: str, actor: str, reason: str, data: dict, at: datetime.datetime) -> str:
    """Return the SHA-256 of an event's content chained to the previous event's hash."""
    content = json.dumps(
        [prev_hash, str(task_id), version, action, from_state, to_state, actor, reason, data,
         at.isoformat()],
        sort_keys=True, separators=(",", ":"), default=str,
    )
    return hashlib.sha256(content.encode()).hexdigest()


def event_new(*, task: Task, action: str, from_state: str, actor: User | None, label: str,
              reason: str, data: dict, at: datetime.datetime) -> TaskEvent:
    """Return the unsaved event of a change applied to task (its new state and version).

    It links to task.chain_head, the hash of the task's latest event, and moves the head
    on to its own hash: the caller saves the task (with chain_head) and the event in the
    same transaction, the task's row lock keeping the chain linear.
    """
    previous = task.chain_head
    event = TaskEvent(
        task=task, version=task.version, action=action, from_state=from_state,
        to_state=task.state, actor=actor, actor_label=label, reason=reason, data=data, at=at,
        prev_hash=previous,
        hash=event_hash(prev_hash=previous, task_id=str(task.pk), version=task.version,
                        action=action, from_state=from_state, to_state=task.state,
                        actor=label, reason=reason, data=data, at=at),
    )
    task.chain_head = event.hash
    return event


def event_save(event: TaskEvent) -> TaskEvent:
    """Insert an event from event_new, once its task's row (with the new head) is written."""
    row_insert(event)
    return event


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
    head = Task.objects.filter(pk=task.pk).values_list("chain_head", flat=True).first()
    if head != previous:
        return f"the task's chain head does not name its latest event (v{task.version})"
    return None
