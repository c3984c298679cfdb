"""Celery tasks of the inbox: each takes ids, calls one service, and is enqueued on commit."""

from inbox.tasks_callbacks import callback_send_task, outbox_drain_task
from inbox.tasks_clocks import (
    deadlines_sweep_task,
    executions_check_task,
    heartbeats_task,
    notify_task,
)
from inbox.tasks_dispatch import dispatch_pending_task, dispatch_task
from inbox.tasks_intake import intake_poll_task
from inbox.tasks_timeline import execution_timeline_task

__all__ = [
    "callback_send_task",
    "deadlines_sweep_task",
    "dispatch_pending_task",
    "dispatch_task",
    "execution_timeline_task",
    "executions_check_task",
    "heartbeats_task",
    "intake_poll_task",
    "notify_task",
    "outbox_drain_task",
]
