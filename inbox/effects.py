"""What a committed transition sets off, performed after commit from this one module.

A transition (inbox.lifecycle) names its effects; ``after_commit`` turns each into a
Celery task enqueued by name once the transaction commits: an offer to the next worker, a
notice by e-mail, the change signal's relay, a migration's stop. Enqueued by name, so no
domain module imports a Celery task module; the task modules import the services.

The callback to Step Functions is the one effect with no message: the transition's
outbox row is what says to send it, and the callbacks' sender (manage.py callbacks_run,
inbox.services.callback.Sender) sends each row as it falls due (a worker's decision
once its undo window, INBOX_UNDO_SECONDS, closed). A Celery message per decision cost its
sender and the worker more CPU than sending the row (docs/BENCHMARKS.md), and a lost one
had to wait for beat's drain.

Every enqueue is robust: with the broker down, the committed change stands, the failed
enqueue is logged (with its traceback, by Django) and beat heals it (dispatch_pending_task
offers the task). A notice is not healed.
"""

import contextvars
import logging
from collections.abc import Callable, Iterable
from enum import StrEnum
from typing import Any

from django.db import transaction

from accounts.models import Dispatch, Skill
from config.celery import app
from inbox.models import Task, TaskState

logger = logging.getLogger(__name__)


class Effect(StrEnum):
    CALLBACK = "callback"  # the outbox row the transition wrote: the sender sends it
    DISPATCH = "dispatch"  # offer a task back in a push queue to the next worker
    NOTIFY_OFFERED = "notify_offered"  # mail the worker an offer was made to
    NOTIFY_ESCALATED = "notify_escalated"  # mail the supervisors of the task's skill
    SIGNAL = "signal"  # relay the change signal to the EventBridge bus (when one is set)
    MIGRATED = "migrated"  # stop the execution a migrated task moved away from


# The Celery task each effect enqueues, by name (they live in inbox/tasks.py); none for
# Effect.CALLBACK (see the module's docstring).
TASK_NAMES = {
    Effect.DISPATCH: "inbox.tasks.dispatch_task",
    Effect.NOTIFY_OFFERED: "inbox.tasks.notify_task",
    Effect.NOTIFY_ESCALATED: "inbox.tasks.notify_task",
    Effect.SIGNAL: "inbox.tasks.signals_relay_task",
    Effect.MIGRATED: "inbox.tasks.migrations_finish_task",
}


def after_commit(*, task: Task, effects: Iterable[Effect]) -> None:
    """Enqueue each effect of a transition on task once the open transaction commits."""
    for name, arguments in _messages(task=task, effects=effects):
        _on_commit(name, arguments)


Message = tuple[str, tuple[Any, ...]]


def after_commit_many(changes: Iterable[tuple[Task, Iterable[Effect]]]) -> None:
    """Enqueue the effects of many transitions (task, effects) once the open transaction
    commits: one hook and one broker connection for them all.

    A batch's hundreds of messages each acquiring the broker connection cost a third of
    a backlog sweep's time (bench/sweeper.py), and building each message most of the rest
    of Celery's share: the offers go as one message per BATCH_MAX (batched()).
    """
    messages = [message for task, effects in changes
                for message in _messages(task=task, effects=effects)]
    if messages:
        # After commit, as _on_commit's are, for the same reasons.
        transaction.on_commit(lambda: enqueue_all(messages), robust=True)


def _messages(*, task: Task, effects: Iterable[Effect]) -> list[Message]:
    return _row_messages(task_id=task.pk, state=task.state, pushed=lambda: _pushed(task),
                         effects=effects)


def after_commit_rows(changes: Iterable[tuple[Any, str, bool, Iterable[Effect]]]) -> None:
    """after_commit_many for changes the database applied and answered as rows (the
    clocks', inbox.lifecycle.clock_rows_applied): (task id, state, whether its queue pushes,
    effects)."""
    messages = [message for task_id, state, pushed, effects in changes
                for message in _row_messages(task_id=task_id, state=state,
                                             pushed=lambda pushed=pushed: pushed,
                                             effects=effects)]
    if messages:
        # After commit, as _on_commit's are, for the same reasons.
        transaction.on_commit(lambda: enqueue_all(messages), robust=True)


def _row_messages(*, task_id: Any, state: str, pushed: Callable[[], bool],
                  effects: Iterable[Effect]) -> list[Message]:
    messages = []
    for effect in effects:
        arguments = _arguments(task_id=task_id, state=state, pushed=pushed, effect=effect)
        if arguments is None:
            continue
        messages.append((TASK_NAMES[effect], arguments))
    return messages


# Begins a requested migration in the worker (inbox.services.migration.migration_begin).
MIGRATION_BEGIN_TASK = "inbox.tasks.migration_begin_task"


def migration_begin_after_commit(*, migration_id: int) -> None:
    """Begin a requested migration in the worker once the open transaction commits."""
    _on_commit(MIGRATION_BEGIN_TASK, (migration_id,))


def migration_stop_after_commit(*, task_id: str) -> None:
    """Stop what a task's migration left behind (inbox.services.migration.migrations_finish)
    once the open transaction commits: the row saying what to stop must be there."""
    _on_commit(TASK_NAMES[Effect.MIGRATED], (task_id,))


def _on_commit(name: str, arguments: tuple[Any, ...]) -> None:
    # After commit: a rolled-back change must never reach a worker or a mailbox, and the
    # Celery task must find the committed row. Robust: see the module's docstring. (A
    # lambda: Django's robust logging reads __qualname__, a partial has none.)
    transaction.on_commit(lambda: enqueue(name, *arguments), robust=True)


def _arguments(*, task_id: Any, state: str, pushed: Callable[[], bool],
               effect: Effect) -> tuple[Any, ...] | None:
    """Return the Celery task's arguments for one effect, or None when it has nothing to do.

    pushed answers whether the task's queue pushes (asked only for a dispatch).
    """
    if effect == Effect.CALLBACK:
        return None  # The outbox row is the message: the callbacks' sender sends it.
    if effect == Effect.DISPATCH:
        # Only a push queue offers; a pull queue's task waits for a take.
        if state != TaskState.QUEUED or not pushed():
            return None
        return (str(task_id),)
    if effect == Effect.NOTIFY_OFFERED:
        return ("offered", str(task_id))
    if effect == Effect.NOTIFY_ESCALATED:
        return ("escalated", str(task_id))
    if effect == Effect.MIGRATED:
        return (str(task_id),)
    return ()  # Effect.SIGNAL: the relay sends whatever is due


def _pushed(task: Task) -> bool:
    if Task.skill.is_cached(task):
        return task.skill.dispatch == Dispatch.PUSH
    return Skill.objects.filter(pk=task.skill_id, dispatch=Dispatch.PUSH).exists()


# The broker connection enqueue_all holds for the messages it sends; None: each acquires one.
_producer: contextvars.ContextVar[Any] = contextvars.ContextVar("producer", default=None)


def enqueue(name: str, *arguments: Any) -> None:
    """Enqueue the Celery task registered under name (inbox/tasks.py) with arguments."""
    producer = _producer.get()
    if producer is None:
        app.tasks[name].delay(*arguments)  # One message alone: as Celery sends one.
    else:
        app.tasks[name].apply_async(arguments, producer=producer)


DRAIN_TASK = "inbox.tasks.outbox_drain_task"


def drain_helpers_request(*, count: int, expires: float) -> None:
    """Ask count more outbox drains (helpers, which ask for none) of the Celery worker's
    processes; each is dropped if not started within expires seconds.

    Called by a drain that found a backlog, outside any transaction. A helper not asked
    (the broker down) costs only speed: the asking drain goes on alone, and the failure
    is logged with its traceback.
    """
    try:
        for _ in range(count):
            app.tasks[DRAIN_TASK].apply_async(kwargs={"helper": True}, expires=expires)
    except Exception:
        logger.exception("Asking for %d more outbox drain(s) failed; this drain goes on alone",
                         count)


# The Celery task that does, for a list of the one argument, what each of these does for
# one; a batch's messages to one of them go as one message per BATCH_MAX.
BATCH_NAMES = {
    TASK_NAMES[Effect.DISPATCH]: "inbox.tasks.dispatch_many_task",
}
BATCH_MAX = 100


def batched(messages: list[Message]) -> list[Message]:
    """Return messages with those of a batch form grouped: one message per BATCH_MAX of the
    same task; identical messages once (the signal relay's, which takes no argument: one
    relay sends whatever is due). The rest keep their order."""
    out: list[Message] = []
    groups: dict[str, list[Any]] = {}
    seen: set[Message] = set()
    for name, arguments in messages:
        if name in BATCH_NAMES and len(arguments) == 1:
            groups.setdefault(name, []).append(arguments[0])
        elif not arguments:
            if (name, arguments) not in seen:
                seen.add((name, arguments))
                out.append((name, arguments))
        else:
            out.append((name, arguments))
    for name, values in groups.items():
        if len(values) == 1:  # One alone: as a single transition sends it.
            out.append((name, (values[0],)))
            continue
        for start in range(0, len(values), BATCH_MAX):
            out.append((BATCH_NAMES[name], (values[start:start + BATCH_MAX],)))
    return out


def enqueue_all(messages: list[Message]) -> None:
    """Enqueue the messages, batched (batched()), over one broker connection; one that fails
    does not stop the others (each is logged with its traceback, and beat heals it, as
    after_commit's: dispatch_pending offers)."""
    with app.producer_or_acquire() as producer:
        token = _producer.set(producer)
        try:
            for name, arguments in batched(messages):
                try:
                    enqueue(name, *arguments)
                except Exception:
                    logger.exception("Enqueueing %s%r failed", name, arguments)
        finally:
            _producer.reset(token)
