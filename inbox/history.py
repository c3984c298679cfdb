"""A task's history: append-only events, each hash chained to the one before.

inbox.lifecycle appends one event per transition, in the transition's transaction;
``events_verify`` (and ``manage.py history_verify``) finds a broken or altered link. On
PostgreSQL a trigger also refuses every UPDATE and DELETE of an event (migration 0005).
"""

import datetime
import hashlib
import json
from collections.abc import Iterator
from typing import Any

from accounts.models import User
from inbox.bulk import row_insert
from inbox.models import GENESIS_HASH, Task, TaskEvent

__all__ = ["GENESIS_HASH", "HISTORY_COLUMNS", "HistoryText", "event_hash", "event_new",
           "event_save", "events_verify", "history_json_sql"]


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


# A history read in the statement that reads (or takes) its task, on PostgreSQL: each
# event's columns in this order, as one JSON array per event, oldest first. The take's
# function (migrations 0012, 0016) answers the same; history_json_sql is the same read for
# a statement of the ORM's (selectors.access_task with history).
HISTORY_COLUMNS = ("id", "version", "action", "from_state", "to_state", "actor_id",
                   "actor_label", "reason", "data", "at", "prev_hash", "hash")
_EVENT_NAMES = [field.attname for field in TaskEvent._meta.concrete_fields]


def history_json_sql(task_id_column: str) -> str:
    """Return a subquery answering, as JSON text, the history of the task whose id is
    task_id_column (SQL of the outer statement; a model's own column, never input), or
    NULL for a task without events. PostgreSQL only."""
    columns = ", ".join(f"e.{name}" for name in HISTORY_COLUMNS)
    # Only the models' own names go into the text; the caller's column likewise.
    return (f"(SELECT json_agg(json_build_array({columns}) ORDER BY e.version)::text "  # noqa: S608
            f"FROM {TaskEvent._meta.db_table} e WHERE e.task_id = {task_id_column})")


class HistoryText:
    """A task's history read as JSON text with its task, made into events when first read.

    Most reads never look at it: the page's take redirects, a script takes and releases.
    Only the answers that show the history (the API's, the page swapped in place) pay for
    it. extra: events appended since the text was read, by the reader's own change
    (with_event).
    """

    __slots__ = ("_alias", "_events", "_extra", "_task_id", "_text")

    def __init__(self, text: str | None, *, task_id: Any, alias: str,
                 extra: tuple[TaskEvent, ...] = ()) -> None:
        self._text, self._task_id, self._alias, self._extra = text, task_id, alias, extra
        self._events: list[TaskEvent] | None = None

    def with_event(self, event: TaskEvent) -> "HistoryText":
        """This history with event after it (the next version's, written by the reader)."""
        return HistoryText(self._text, task_id=self._task_id, alias=self._alias,
                           extra=(*self._extra, event))

    def _decoded(self) -> list[TaskEvent]:
        if self._events is None:
            read = (history_decoded(self._text, task_id=self._task_id, alias=self._alias)
                    if self._text is not None else [])
            self._events = [*read, *self._extra]
        return self._events

    def __iter__(self) -> Iterator[TaskEvent]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())


def history_decoded(text: str, *, task_id: Any, alias: str) -> list[TaskEvent]:
    """Return the events of a history read as JSON text, as the ORM reads them."""
    events = []
    for values in json.loads(text):
        row = dict(zip(HISTORY_COLUMNS, values, strict=True))
        row["at"] = datetime.datetime.fromisoformat(row["at"])
        row["task_id"] = task_id
        # from_db takes every column in the model's own order.
        events.append(TaskEvent.from_db(alias, _EVENT_NAMES,
                                        [row[name] for name in _EVENT_NAMES]))
    return events
