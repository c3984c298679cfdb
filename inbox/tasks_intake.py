"""The Celery task that drains the SQS intake queue (Celery beat starts it every few seconds)."""

import logging
import uuid

from celery import shared_task
from django.core.cache import cache

from inbox.intake import intake_poll

logger = logging.getLogger(__name__)

LOCK_KEY = "inbox:intake-poll"
# Above the poll's budget (25 s) plus an SQS read timeout (30 s), so a live poller never
# loses its lock; a crashed one's lock lapses and the next beat tick polls again.
LOCK_SECONDS = 120


@shared_task(ignore_result=True)
def intake_poll_task() -> dict[str, int] | None:
    """Poll the intake queue once, unless another poller holds the lock; return the counts.

    The lock only saves work: two pollers at once are harmless (SQS hides a received
    message from the other, and a redelivered envelope is a duplicate).
    """
    owner = uuid.uuid4().hex
    if not cache.add(LOCK_KEY, owner, timeout=LOCK_SECONDS):
        return None
    try:
        counts = intake_poll()
    finally:
        # Only our own lock: after a stall past LOCK_SECONDS another poller holds it. The
        # get-then-delete is not atomic; losing that race costs one extra poller, not data.
        if cache.get(LOCK_KEY) == owner:
            cache.delete(LOCK_KEY)
    if any(counts.values()):
        logger.info("Intake: %s", ", ".join(f"{n} {o}" for o, n in counts.items() if n))
    return counts
