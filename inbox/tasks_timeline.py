"""The Celery task that reads an execution's history for the supervisor's timeline."""

from celery import shared_task

from inbox.timeline import timeline_refresh


@shared_task(ignore_result=True)
def execution_timeline_task(execution_arn: str) -> str:
    """Read the execution's history and store its timeline (enqueued by the task page).

    A failed read is stored and shown on the page, not retried here: the next page load
    after the timeline goes stale asks again.
    """
    row = timeline_refresh(execution_arn=execution_arn)
    return "failed" if row.error_code else "read"
