"""Celery tasks of the inbox: each takes ids, calls one service, and returns its outcome.

Thin entry points, enqueued by name (inbox.effects) after the change that needs them
commits, or run by beat (config/settings.py CELERY_BEAT_SCHEDULE). They import the
services; no service imports them. The clocks are not Celery tasks: they run in their own
process (manage.py clock_run), so nothing queued ahead of them can make a deadline late.
"""

import logging

from celery import shared_task
from django.conf import settings

from config.errors import ExternalServiceError
from inbox.notifications import notify
from inbox.services.callback import callback_send, callbacks_send, outbox_drain
from inbox.services.dispatcher import dispatch_pending, task_dispatch, tasks_dispatch
from inbox.services.intake import intake_poll_once
from inbox.services.migration import migration_begin, migrations_finish
from inbox.services.orphans import orphans_check_once
from inbox.services.signals import signals_relay
from inbox.timeline import timeline_refresh, timeline_request_done

logger = logging.getLogger(__name__)


# Callbacks ------------------------------------------------------------------------------


# The callbacks' sender (manage.py callbacks_run) sends each decision's row as it falls
# due; nothing enqueues these two any more. They stay registered for one release, so the
# messages an earlier release's web and clock enqueued before a deploy are consumed (their
# rows would be sent anyway: a message finding its row sent is skipped).


@shared_task
def callback_send_task(outbox_id: int) -> str:
    """Send one outbox row (a message of an earlier release: see above)."""
    return callback_send(outbox_id=outbox_id)


@shared_task
def callbacks_send_task(outbox_ids: list[int]) -> int:
    """Send a batch's outbox rows (a message of an earlier release: see above)."""
    return callbacks_send(outbox_ids=outbox_ids)


# A drain goes on with batch after batch for this long: under beat's 5 s period, so a
# backlog (Celery down, a burst of decisions) drains at the whole SendTask rate.
DRAIN_BUDGET_SECONDS = 4.0
# Rows a drain claims at once (fewer when the SendTask rate allows fewer a second).
DRAIN_BATCH = 100


@shared_task
def outbox_drain_task(helper: bool = False) -> int:
    """Send the due rows nobody sent (Celery beat, every 5 s): the backstop while no
    callbacks' sender runs, taking a row never tried only INBOX_OUTBOX_DRAIN_GRACE_SECONDS
    after it fell due.

    On a backlog it asks for INBOX_OUTBOX_DRAINS - 1 helpers: this task again, run by the
    worker's other processes with helper=True, which ask for none.
    """
    helpers = 0 if helper else settings.INBOX_OUTBOX_DRAINS - 1
    handled = outbox_drain(batch=DRAIN_BATCH, budget_seconds=DRAIN_BUDGET_SECONDS,
                           helpers=helpers)
    if handled:
        logger.info("Outbox drain handled %d callback(s)", handled)
    return handled


# Offers and notices ---------------------------------------------------------------------


@shared_task(ignore_result=True)
def dispatch_task(task_id: str) -> None:
    """Offer one queued push-queue task to the best eligible worker."""
    task_dispatch(task_id=task_id)


@shared_task(ignore_result=True)
def dispatch_many_task(task_ids: list[str]) -> int:
    """Offer each of a batch's queued push-queue tasks (one message for them all)."""
    return tasks_dispatch(task_ids=task_ids)


@shared_task(ignore_result=True)
def dispatch_pending_task() -> int:
    """Offer queued push-queue tasks nobody had been available for; bounded per run."""
    return dispatch_pending()


@shared_task(ignore_result=True, autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def notify_task(kind: str, task_id: str) -> int:
    """Send one notification e-mail (retried when the mail server does not answer)."""
    return notify(kind=kind, task_id=task_id)


@shared_task(ignore_result=True)
def signals_relay_task() -> dict[str, int]:
    """Relay the due change signals to the EventBridge bus (on commit, and beat every 5 s)."""
    return signals_relay()


# Intake and the timeline ----------------------------------------------------------------


@shared_task(ignore_result=True)
def intake_poll_task() -> dict[str, int] | None:
    """Poll the intake queue once, unless another poller holds the lock; return the counts."""
    return intake_poll_once()


@shared_task(ignore_result=True)
def execution_timeline_task(execution_arn: str) -> str:
    """Read the execution's history and store its timeline (enqueued by the task page).

    A failed read is stored and shown on the page, not retried here: the next page load
    after the timeline goes stale asks again.
    """
    try:
        row = timeline_refresh(execution_arn=execution_arn)
    finally:
        # The next page asking (a page following a running execution) may enqueue again.
        timeline_request_done(execution_arn=execution_arn)
    return "failed" if row.error_code else "read"


@shared_task(ignore_result=True)
def orphans_check_task() -> dict[str, int] | None:
    """Look for executions waiting with no task and take their envelopes in (beat, 60 s)."""
    return orphans_check_once()


# Migrations ------------------------------------------------------------------------------


@shared_task(ignore_result=True, autoretry_for=(ExternalServiceError,), retry_backoff=True,
             retry_jitter=True, max_retries=8)
def migration_begin_task(migration_id: int) -> str:
    """Start a requested migration's new execution (enqueued by the request's commit).

    Retried with backoff while Step Functions fails; asking for the migration again
    begins a row still starting again.
    """
    return migration_begin(migration_id=migration_id)


@shared_task(ignore_result=True, autoretry_for=(ExternalServiceError,), retry_backoff=True,
             retry_jitter=True, max_retries=8)
def migrations_finish_task(task_id: str) -> int:
    """Stop the executions a task's migrations left behind (enqueued by the move).

    Retried with backoff while Step Functions fails; after that the orphan check and the
    next process_migrate run ask again (the migration keeps its last error).
    """
    return migrations_finish(task_id=task_id)
