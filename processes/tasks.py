"""Celery tasks of the processes room: thin entry points to the services."""

import logging

from celery import shared_task

from processes.services import executions_reconcile

logger = logging.getLogger(__name__)


@shared_task
def executions_reconcile_task() -> int:
    """Refresh a batch of running executions from Step Functions (Celery beat, every 30 s)."""
    checked = executions_reconcile()
    if checked:
        logger.info("Reconciled %d running execution(s)", checked)
    return checked
