"""What an admin does to heal the pipes: requeue a dead callback, redrive dead letters."""

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inbox.models import Outbox, OutboxStatus
from processes import aws

logger = logging.getLogger(__name__)

# The DLQ is read with a short long poll, which (unlike a 0 s short poll) asks every SQS
# server, so an existing message is not missed.
_REDRIVE_WAIT_SECONDS = 1


def outbox_requeue(*, outbox_id: int) -> bool:
    """Put a dead row back to pending for a fresh round of attempts; return if it was dead.

    Safe to resend: a dead row's decision was never accepted, and one accepted after all
    (a lost response) is found by the reconciliation.
    """
    with transaction.atomic():
        # A conditional update: only a dead row moves, and only once.
        requeued = Outbox.objects.filter(pk=outbox_id, status=OutboxStatus.DEAD).update(
            status=OutboxStatus.PENDING, attempts=0, next_attempt_at=timezone.now()
        )
        if requeued:
            # Due at once: the callbacks' sender sends it within its longest sleep.
            logger.info("Callback %s requeued", outbox_id)
    return bool(requeued)


def intake_redrive(*, max_messages: int = 10) -> int:
    """Move up to max_messages from the dead-letter queue back to the intake queue.

    For admins, after they fixed the cause (e.g. created a missing skill). Each message is
    sent again, then deleted from the dead-letter queue: a crash in between leaves a copy
    in both, and the intake sees the copy as a duplicate. Return how many were moved.
    """
    dlq_url = aws.queue_url(name=settings.INBOX_INTAKE_DLQ)
    queue_url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    moved = 0
    while moved < max_messages:
        batch = aws.messages_receive(
            url=dlq_url, max_messages=min(10, max_messages - moved),
            wait_seconds=_REDRIVE_WAIT_SECONDS,
        )
        if not batch:
            break
        for message in batch:
            aws.message_send(url=queue_url, body=message["Body"])
            aws.message_delete(url=dlq_url, receipt_handle=message["ReceiptHandle"])
            moved += 1
    if moved:
        logger.info("Intake: moved %d message(s) from the dead-letter queue back", moved)
    return moved
