"""What a committed transition sets off, performed after commit from this one module.

A transition (inbox.lifecycle) names its effects; ``after_commit`` turns each into a
Celery task enqueued by name once the transaction commits: the callback to Step
Functions, an offer to the next worker, a notice by e-mail. Enqueued by name, so no
domain module imports a Celery task module; the task modules import the services.

Every enqueue is robust: with the broker down, the committed change stands, the failed
enqueue is logged (with its traceback, by Django) and beat heals it (the outbox drain
sends the callback, dispatch_pending_task offers the task). A notice is not healed.
"""

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from django.db import transaction

from accounts.models import Dispatch, Skill
from config.celery import app
from inbox.models import Task, TaskState


class Effect(StrEnum):
    CALLBACK = "callback"  # send the outbox row the transition wrote to Step Functions
    DISPATCH = "dispatch"  # offer a task back in a push queue to the next worker
    NOTIFY_OFFERED = "notify_offered"  # mail the worker an offer was made to
    NOTIFY_ESCALATED = "notify_escalated"  # mail the supervisors of the task's skill
    SIGNAL = "signal"  # relay the change signal to the EventBridge bus (when one is set)


# The Celery task each effect enqueues, by name (they live in inbox/tasks.py).
TASK_NAMES = {
    Effect.CALLBACK: "inbox.tasks.callback_send_task",
    Effect.DISPATCH: "inbox.tasks.dispatch_task",
    Effect.NOTIFY_OFFERED: "inbox.tasks.notify_task",
    Effect.NOTIFY_ESCALATED: "inbox.tasks.notify_task",
    Effect.SIGNAL: "inbox.tasks.signals_relay_task",
}


def after_commit(*, task: Task, effects: Iterable[Effect], outbox_id: int | None = None) -> None:
    """Enqueue each effect of a transition on task once the open transaction commits."""
    for effect in effects:
        arguments = _arguments(task=task, effect=effect, outbox_id=outbox_id)
        if arguments is None:
            continue
        _on_commit(TASK_NAMES[effect], arguments)


def callback_after_commit(*, outbox_id: int) -> None:
    """Send an outbox row (a requeued callback) once the open transaction commits."""
    _on_commit(TASK_NAMES[Effect.CALLBACK], (outbox_id,))


def _on_commit(name: str, arguments: tuple[Any, ...]) -> None:
    # After commit: a rolled-back change must never reach Step Functions, a worker or a
    # mailbox, and the Celery task must find the committed row. Robust: see the module's
    # docstring. (A lambda: Django's robust logging reads __qualname__, a partial has none.)
    transaction.on_commit(lambda: enqueue(name, *arguments), robust=True)


def _arguments(*, task: Task, effect: Effect, outbox_id: int | None) -> tuple[Any, ...] | None:
    """Return the Celery task's arguments for one effect, or None when it has nothing to do."""
    if effect == Effect.CALLBACK:
        if outbox_id is None:
            raise ValueError("a callback effect needs the outbox row its transition wrote")
        return (outbox_id,)
    if effect == Effect.DISPATCH:
        # Only a push queue offers; a pull queue's task waits for a take.
        if task.state != TaskState.QUEUED or not _pushed(task):
            return None
        return (str(task.pk),)
    if effect == Effect.NOTIFY_OFFERED:
        return ("offered", str(task.pk))
    if effect == Effect.NOTIFY_ESCALATED:
        return ("escalated", str(task.pk))
    return ()  # Effect.SIGNAL: the relay sends whatever is due


def _pushed(task: Task) -> bool:
    if Task.skill.is_cached(task):
        return task.skill.dispatch == Dispatch.PUSH
    return Skill.objects.filter(pk=task.skill_id, dispatch=Dispatch.PUSH).exists()


def enqueue(name: str, *arguments: Any) -> None:
    """Enqueue the Celery task registered under name (inbox/tasks.py) with arguments."""
    app.tasks[name].delay(*arguments)
