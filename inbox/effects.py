"""What a committed transition sets off, performed after commit from this one module.

A transition (inbox.lifecycle) names its effects; ``after_commit`` turns each into a
Celery task enqueued by name once the transaction commits: the callback to Step
Functions (after the undo window of a worker's decision, INBOX_UNDO_SECONDS), an offer to
the next worker, a notice by e-mail. Enqueued by name, so no
domain module imports a Celery task module; the task modules import the services.

Every enqueue is robust: with the broker down, the committed change stands, the failed
enqueue is logged (with its traceback, by Django) and beat heals it (the outbox drain
sends the callback, dispatch_pending_task offers the task). A notice is not healed.
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
    CALLBACK = "callback"  # send the outbox row the transition wrote to Step Functions
    DISPATCH = "dispatch"  # offer a task back in a push queue to the next worker
    NOTIFY_OFFERED = "notify_offered"  # mail the worker an offer was made to
    NOTIFY_ESCALATED = "notify_escalated"  # mail the supervisors of the task's skill
    SIGNAL = "signal"  # relay the change signal to the EventBridge bus (when one is set)
    MIGRATED = "migrated"  # stop the execution a migrated task moved away from


# The Celery task each effect enqueues, by name (they live in inbox/tasks.py).
TASK_NAMES = {
    Effect.CALLBACK: "inbox.tasks.callback_send_task",
    Effect.DISPATCH: "inbox.tasks.dispatch_task",
    Effect.NOTIFY_OFFERED: "inbox.tasks.notify_task",
    Effect.NOTIFY_ESCALATED: "inbox.tasks.notify_task",
    Effect.SIGNAL: "inbox.tasks.signals_relay_task",
    Effect.MIGRATED: "inbox.tasks.migrations_finish_task",
}


# The callback's enqueue waits this much past the undo window: the sender's claim needs
# the row due by its own clock, and a send that comes early is skipped (the drain would
# heal it, a drain period later).
CALLBACK_MARGIN_SECONDS = 0.25


def after_commit(*, task: Task, effects: Iterable[Effect], outbox_id: int | None = None,
                 callback_delay: float = 0) -> None:
    """Enqueue each effect of a transition on task once the open transaction commits.

    callback_delay is the undo window the callback waits out (its outbox row is due then).
    """
    for name, arguments, countdown in _messages(task=task, effects=effects,
                                                outbox_id=outbox_id,
                                                callback_delay=callback_delay):
        _on_commit(name, arguments, countdown=countdown)


Message = tuple[str, tuple[Any, ...], float]


def after_commit_many(changes: Iterable[tuple[Task, Iterable[Effect], int | None, float]]
                      ) -> None:
    """Enqueue the effects of many transitions (task, effects, outbox_id, callback_delay)
    once the open transaction commits: one hook and one broker connection for them all.

    A batch's hundreds of messages each acquiring the broker connection cost a third of
    a backlog sweep's time (bench/sweeper.py), and building each message most of the rest
    of Celery's share: the callbacks and offers go as one message per BATCH_MAX
    (batched()).
    """
    messages = [message for task, effects, outbox_id, callback_delay in changes
                for message in _messages(task=task, effects=effects, outbox_id=outbox_id,
                                         callback_delay=callback_delay)]
    if messages:
        # After commit, as _on_commit's are, for the same reasons.
        transaction.on_commit(lambda: enqueue_all(messages), robust=True)


def _messages(*, task: Task, effects: Iterable[Effect], outbox_id: int | None,
              callback_delay: float) -> list[Message]:
    return _row_messages(task_id=task.pk, state=task.state, pushed=lambda: _pushed(task),
                         effects=effects, outbox_id=outbox_id, callback_delay=callback_delay)


def after_commit_rows(changes: Iterable[tuple[Any, str, bool, Iterable[Effect], int | None]]
                      ) -> None:
    """after_commit_many for changes the database applied and answered as rows (the
    clocks', inbox.lifecycle.clock_rows_applied): (task id, state, whether its queue pushes,
    effects, outbox id), no callback waiting out an undo window."""
    messages = [message for task_id, state, pushed, effects, outbox_id in changes
                for message in _row_messages(task_id=task_id, state=state,
                                             pushed=lambda pushed=pushed: pushed,
                                             effects=effects, outbox_id=outbox_id,
                                             callback_delay=0)]
    if messages:
        # After commit, as _on_commit's are, for the same reasons.
        transaction.on_commit(lambda: enqueue_all(messages), robust=True)


def _row_messages(*, task_id: Any, state: str, pushed: Callable[[], bool],
                  effects: Iterable[Effect], outbox_id: int | None,
                  callback_delay: float) -> list[Message]:
    messages = []
    for effect in effects:
        arguments = _arguments(task_id=task_id, state=state, pushed=pushed, effect=effect,
                               outbox_id=outbox_id)
        if arguments is None:
            continue
        delay = callback_delay + CALLBACK_MARGIN_SECONDS if (
            effect == Effect.CALLBACK and callback_delay) else 0
        messages.append((TASK_NAMES[effect], arguments, delay))
    return messages


def callback_after_commit(*, outbox_id: int) -> None:
    """Send an outbox row (a requeued callback) once the open transaction commits."""
    _on_commit(TASK_NAMES[Effect.CALLBACK], (outbox_id,))


# Begins a requested migration in the worker (inbox.services.migration.migration_begin).
MIGRATION_BEGIN_TASK = "inbox.tasks.migration_begin_task"


def migration_begin_after_commit(*, migration_id: int) -> None:
    """Begin a requested migration in the worker once the open transaction commits."""
    _on_commit(MIGRATION_BEGIN_TASK, (migration_id,))


def migration_stop_after_commit(*, task_id: str) -> None:
    """Stop what a task's migration left behind (inbox.services.migration.migrations_finish)
    once the open transaction commits: the row saying what to stop must be there."""
    _on_commit(TASK_NAMES[Effect.MIGRATED], (task_id,))


def _on_commit(name: str, arguments: tuple[Any, ...], *, countdown: float = 0) -> None:
    # After commit: a rolled-back change must never reach Step Functions, a worker or a
    # mailbox, and the Celery task must find the committed row. Robust: see the module's
    # docstring. (A lambda: Django's robust logging reads __qualname__, a partial has none.)
    if countdown:
        transaction.on_commit(lambda: enqueue_later(name, *arguments, countdown=countdown),
                              robust=True)
    else:
        transaction.on_commit(lambda: enqueue(name, *arguments), robust=True)


def _arguments(*, task_id: Any, state: str, pushed: Callable[[], bool], effect: Effect,
               outbox_id: int | None) -> tuple[Any, ...] | None:
    """Return the Celery task's arguments for one effect, or None when it has nothing to do.

    pushed answers whether the task's queue pushes (asked only for a dispatch).
    """
    if effect == Effect.CALLBACK:
        if outbox_id is None:
            raise ValueError("a callback effect needs the outbox row its transition wrote")
        return (outbox_id,)
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


def enqueue_later(name: str, *arguments: Any, countdown: float) -> None:
    """Enqueue the Celery task registered under name to run countdown seconds from now."""
    app.tasks[name].apply_async(arguments, countdown=countdown, producer=_producer.get())


# The Celery task that does, for a list of the one argument, what each of these does for
# one; a batch's messages to one of them go as one message per BATCH_MAX.
BATCH_NAMES = {
    TASK_NAMES[Effect.CALLBACK]: "inbox.tasks.callbacks_send_task",
    TASK_NAMES[Effect.DISPATCH]: "inbox.tasks.dispatch_many_task",
}
BATCH_MAX = 100


def batched(messages: list[Message]) -> list[Message]:
    """Return messages with those of a batch form grouped: one message per BATCH_MAX of the
    same task and countdown; identical messages once (the signal relay's, which takes no
    argument: one relay sends whatever is due). The rest keep their order."""
    out: list[Message] = []
    groups: dict[tuple[str, float], list[Any]] = {}
    seen: set[Message] = set()
    for name, arguments, countdown in messages:
        if name in BATCH_NAMES and len(arguments) == 1:
            groups.setdefault((name, countdown), []).append(arguments[0])
        elif not arguments:
            if (name, arguments, countdown) not in seen:
                seen.add((name, arguments, countdown))
                out.append((name, arguments, countdown))
        else:
            out.append((name, arguments, countdown))
    for (name, countdown), values in groups.items():
        if len(values) == 1:  # One alone: as a single transition sends it.
            out.append((name, (values[0],), countdown))
            continue
        for start in range(0, len(values), BATCH_MAX):
            out.append((BATCH_NAMES[name], (values[start:start + BATCH_MAX],), countdown))
    return out


def enqueue_all(messages: list[Message]) -> None:
    """Enqueue the messages, batched (batched()), over one broker connection; one that fails
    does not stop the others (each is logged with its traceback, and beat heals it, as
    after_commit's: the outbox drain sends the callbacks, dispatch_pending offers)."""
    with app.producer_or_acquire() as producer:
        token = _producer.set(producer)
        try:
            for name, arguments, countdown in batched(messages):
                try:
                    if countdown:
                        enqueue_later(name, *arguments, countdown=countdown)
                    else:
                        enqueue(name, *arguments)
                except Exception:
                    logger.exception("Enqueueing %s%r failed", name, arguments)
        finally:
            _producer.reset(token)
