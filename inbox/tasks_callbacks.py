"""Celery tasks of the callback outbox: thin entry points to ``inbox.callbacks``."""

import logging

from celery import shared_task

from inbox.callbacks import callback_send, outbox_drain

logger = logging.getLogger(__name__)


@shared_task
def callback_send_task(outbox_id: int) -> str:
    """Send one outbox row (enqueued on commit by the transition that wrote it).

    A row that must wait (backoff, no SendTask capacity) is not rescheduled here: it keeps
    its next_attempt_at, and outbox_drain_task sends it when it is due.
    """
    return callback_send(outbox_id=outbox_id)


@shared_task
def outbox_drain_task() -> int:
    """Send the due rows nobody sent: retries and lost enqueues (Celery beat, every 5 s)."""
    handled = outbox_drain()
    if handled:
        logger.info("Outbox drain handled %d callback(s)", handled)
    return handled
