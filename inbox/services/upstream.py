"""What Step Functions says of executions: an ended execution's open tasks are cancelled.

AWS sends a "Step Functions Execution Status Change" event to the default EventBridge bus
whenever an execution's status changes; the rule ``processes.aws.status_queue_ensure``
made puts those of ended executions (SUCCEEDED, FAILED, TIMED_OUT, ABORTED) on the status
queue, which ``status_poll`` long-polls (the clock process runs it without pause). A task
still open when its execution ended can no longer be answered: it is cancelled, with a
history event, and every page showing it hears so (inbox.live).

AWS delivers these events at least once and in no order, and may lose one: handling one
twice changes nothing (a cancelled task is closed, a final status is never rewritten in
the execution's row, ``execution_record``), and the clock's DescribeExecution
backstop (``inbox.services.clock.executions_check``) finds what an event missed. The
events carry the execution's input and output: nothing of a body is ever logged.
"""

import datetime
import json
import logging
from typing import Any

from django.conf import settings

from inbox.services.clock import execution_tasks_cancel
from inbox.services.intake import messages_done_delete
from processes import aws
from processes.services import execution_described_record

logger = logging.getLogger(__name__)

def status_event_execution(*, body: Any) -> tuple[str, str] | None:
    """Return the (execution ARN, status) an ended execution's status event names, or None.

    None when the body is not such an event (another source or type, a status that is not
    an end, a missing field).
    """
    if not isinstance(body, dict) or body.get("source") != aws.STATUS_CHANGE_SOURCE:
        return None
    if body.get("detail-type") != aws.STATUS_CHANGE_DETAIL_TYPE:
        return None
    detail = body.get("detail")
    if not isinstance(detail, dict):
        return None
    arn, status = detail.get("executionArn"), detail.get("status")
    if not isinstance(arn, str) or not arn or status not in aws.EXECUTION_ENDED:
        return None
    return arn, status


def execution_ended(*, execution_arn: str, status: str) -> int:
    """Cancel the open tasks of an execution that ended; return how many were cancelled."""
    return execution_tasks_cancel(execution_arn=execution_arn,
                                  reason=f"The execution is {status}.", system="upstream")


def status_poll(*, wait_seconds: int = aws.SQS_WAIT_MAX, budget_seconds: float = 25
                ) -> dict[str, int]:
    """Long-poll the status queue and act on each event; return counts.

    Every message is deleted once handled; one that is not an ended execution's status
    event is deleted too (and counted "ignored"), since it never will be. A failure on
    one message leaves it on the queue (its redrive policy moves it to the dead-letter
    queue after a few receives) and the rest go on.
    """
    url = aws.queue_url(name=settings.INBOX_STATUS_QUEUE)
    counts = {"cancelled": 0, "no_open_task": 0, "ignored": 0, "failed": 0}
    for messages in aws.messages_receive_batches(
            url=url, wait_seconds=wait_seconds, budget_seconds=budget_seconds,
            window_seconds=settings.INBOX_RECEIVE_WINDOW_MS / 1000):
        done = []
        for message in messages:
            try:
                outcome = _status_message(message)
            except Exception:
                counts["failed"] += 1
                logger.exception("Status event %s could not be handled",
                                 message.get("MessageId", ""))
                continue
            counts[outcome] += 1
            done.append(message)
        if done:
            messages_done_delete(url=url, messages=done, queue="Upstream")
    if counts["cancelled"]:
        logger.info("Upstream: %d ended execution(s) had open tasks, now cancelled",
                    counts["cancelled"])
    return counts


def _status_message(message: dict) -> str:
    try:
        body = json.loads(message.get("Body") or "")
    except ValueError:
        body = None
    named = status_event_execution(body=body)
    if named is None:
        logger.warning("Status event %s is not an ended execution's status change; deleted",
                       message.get("MessageId", ""))
        return "ignored"
    execution_arn, status = named
    execution_record(detail=body["detail"])
    return "cancelled" if execution_ended(execution_arn=execution_arn, status=status) \
        else "no_open_task"


def execution_record(*, detail: dict) -> bool:
    """Record an ended execution's status event in its row, if the inbox started it.

    The executions list (inbox.executions) then shows the end within a poll of the status
    queue instead of at the reconciler's next round. Return whether a row changed.
    """
    stop = detail.get("stopDate")  # epoch milliseconds in the event, unlike DescribeExecution
    return execution_described_record(execution_arn=detail["executionArn"], described={
        "status": detail["status"], "output": detail.get("output"),
        "error": detail.get("error") or "", "cause": detail.get("cause") or "",
        "stopDate": (datetime.datetime.fromtimestamp(stop / 1000, tz=datetime.UTC)
                     if isinstance(stop, (int, float)) and not isinstance(stop, bool)
                     else None)})
