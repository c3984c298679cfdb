"""Change signals for other systems: every task event, relayed to an EventBridge bus.

A signal says what changed and never the task's data: task id, version, action, state,
skill, process and stage. A consumer that needs more fetches it through the authorized
API. The lifecycle writes a SignalOutbox row with each event (when INBOX_SIGNALS_BUS is
set); ``signals_relay`` sends the due ones after commit and again from beat, so delivery
is at least once. Per task the signals go out in version order: a batch holds at most
one signal of a task, the oldest it has pending, so version n+1 leaves only after
EventBridge took version n. Consumers make it idempotent by (task id, version).
"""

import datetime
import json
import logging
import random
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from config.errors import ExternalServiceError
from inbox.models import SignalOutbox
from processes import aws

logger = logging.getLogger(__name__)

DETAIL_TYPE = "Inbox Task Changed"
# PutEvents takes at most ten entries a call.
ENTRIES_PER_CALL = 10
BACKOFF_BASE_SECONDS = 2.0
BACKOFF_MAX_SECONDS = 300.0
# Longer than one PutEvents call with its retries (botocore: 5 s connect, 15 s read, 2 tries).
LEASE_SECONDS = 60


def signal_detail(*, row: SignalOutbox) -> dict[str, Any]:
    """Return the detail of one signal: identifiers and what happened, never data."""
    event, task = row.event, row.task
    return {"task": str(task.pk), "version": event.version, "action": event.action,
            "state": event.to_state, "skill": task.skill.slug, "process": task.process_name,
            "processVersion": task.process_version, "stage": task.stage,
            "at": event.at.isoformat()}


def signals_relay(*, batch: int = 100) -> dict[str, int]:
    """Send due signals, oldest first and one per task a call; return sent/failed counts.

    Rows are claimed with a lease (their next attempt moved LEASE_SECONDS on) in a short
    transaction, sent outside it, and settled conditioned on that lease: a relay that
    died mid-call leaves its rows to be claimed again once the lease runs out.
    """
    result = {"sent": 0, "failed": 0}
    if not settings.INBOX_SIGNALS_BUS:
        return result
    now = timezone.now()
    lease = now + datetime.timedelta(seconds=LEASE_SECONDS)
    with transaction.atomic():
        # SKIP LOCKED: two relays at once claim different rows.
        due = list(
            SignalOutbox.objects.select_for_update(skip_locked=True)
            .filter(sent_at__isnull=True, next_attempt_at__lte=now)
            .order_by("pk").values_list("pk", "task_id", "version")[:batch]
        )
        # Only the oldest pending signal of each task: a later version waits for it.
        oldest = dict(
            SignalOutbox.objects.filter(sent_at__isnull=True,
                                        task_id__in={task for _, task, _ in due})
            .values_list("task_id").annotate(first=Min("version")))
        ready = [pk for pk, task, version in due if oldest.get(task) == version]
        SignalOutbox.objects.filter(pk__in=ready).update(next_attempt_at=lease)
    rows = list(SignalOutbox.objects.filter(pk__in=ready)
                .select_related("event", "task", "task__skill").order_by("pk"))
    for start in range(0, len(rows), ENTRIES_PER_CALL):
        _send(rows[start:start + ENTRIES_PER_CALL], result=result, lease=lease)
    if result["failed"]:
        logger.error("%d change signal(s) not relayed yet (bus %s)", result["failed"],
                     settings.INBOX_SIGNALS_BUS)
    return result


def _send(rows: list[SignalOutbox], *, result: dict[str, int],
          lease: datetime.datetime) -> None:
    entries = [{"Source": settings.INBOX_SIGNALS_SOURCE, "DetailType": DETAIL_TYPE,
                "Detail": json.dumps(signal_detail(row=row)),
                "Resources": [], "EventBusName": settings.INBOX_SIGNALS_BUS}
               for row in rows]
    try:
        codes = aws.events_put(entries=entries)
    except ExternalServiceError as exc:
        codes = [exc.error_code or "Unavailable"] * len(rows)
        logger.warning("Relaying %d signal(s) failed, retried later: %s", len(rows),
                       exc.message)
    now = timezone.now()
    for row, code in zip(rows, codes, strict=False):
        # Conditioned on this relay's lease: a relay that took the row over after the
        # lease ran out settles it, not this one.
        mine = SignalOutbox.objects.filter(pk=row.pk, sent_at__isnull=True,
                                           next_attempt_at=lease)
        if code is None:
            result["sent"] += mine.update(sent_at=now, last_error="")
        else:
            attempts = row.attempts + 1
            result["failed"] += mine.update(
                attempts=attempts, last_error=f"PutEvents refused the entry: {code}",
                next_attempt_at=now + datetime.timedelta(seconds=_backoff(attempts)))


def _backoff(attempts: int) -> float:
    """Exponential backoff with full jitter, capped."""
    ceiling = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2 ** (attempts - 1))
    return random.uniform(0, ceiling)  # noqa: S311 (jitter, not a secret)
