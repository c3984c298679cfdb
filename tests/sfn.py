"""Helpers for tests that drive real executions on the local emulator."""

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from django.conf import settings

from processes import aws
from processes.compiler import Target, compile_spec
from processes.spec import spec_load

ENDED = frozenset({"SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"})


def unique(prefix: str) -> str:
    """Return prefix with a random suffix: the emulator is shared by the whole session."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def execution_wait(
    *, execution_arn: str, statuses: frozenset[str] | set[str] = ENDED, timeout: float = 30
) -> dict:
    """Poll DescribeExecution until the status is one of statuses, for at most timeout s."""
    deadline = time.monotonic() + timeout
    while True:
        described = aws.execution_describe(execution_arn=execution_arn)
        if described["status"] in statuses:
            return described
        if time.monotonic() > deadline:
            raise AssertionError(
                f"execution still {described['status']} after {timeout} s, wanted "
                f"{sorted(statuses)}; error={described.get('error')!r}"
            )
        time.sleep(0.05)


def task_message_wait(*, execution_arn: str | None = None, stage: str | None = None,
                      match: Callable[[dict], bool] | None = None,
                      parent_arn: str | None = None, timeout: float = 20) -> dict:
    """Receive and delete the intake message of an execution's human stage; return its body.

    Without execution_arn, match picks the message (a child execution's ARN is not known).
    With parent_arn, fail at once if that (parent) execution ends before the message comes.

    The intake queue is shared by the whole session, so other tests' messages are left
    alone: they come back after a one-second visibility timeout.
    """
    queue = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if parent_arn is not None:
            parent = aws.execution_describe(execution_arn=parent_arn)
            if parent["status"] != "RUNNING":
                raise AssertionError(
                    f"the parent ended {parent['status']} ({parent.get('error')}) before its "
                    "child's human stage sent a message"
                )
        for message in aws.messages_receive(url=queue, wait_seconds=1, visibility_timeout=1):
            body = json.loads(message["Body"])
            wanted = (
                execution_arn in (None, body.get("execution"))
                and stage in (None, body.get("stage"))
                and (match is None or match(body))
            )
            if wanted:
                aws.message_delete(url=queue, receipt_handle=message["ReceiptHandle"])
                return body
    raise AssertionError(
        f"no intake message of {execution_arn or 'the match'} (stage {stage}) within {timeout} s"
    )


# The demo invoice process on the emulator ---------------------------------------------

SPECS = Path(__file__).resolve().parents[1] / "processes" / "specs"
SMALL_INVOICE = {"invoice_id": "INV-7", "supplier": "ACME", "amount": 900, "currency": "EUR"}
APPROVE = {"decision": "approve", "comment": "fine"}


def invoice_machine_deploy(*, stage_timeout: int | None = None,
                           execution_timeout: int | None = None) -> str:
    """Deploy invoice-approval, optionally with a short review or execution timeout."""
    queue_url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    queue_arn = aws.queue_attributes(url=queue_url)["QueueArn"]
    _arn, partition, _sqs, region, account, _name = queue_arn.split(":")
    target = Target(queue_url, f"arn:{partition}:states:{region}:{account}:stateMachine:")
    asl = compile_spec(spec_load(SPECS / "invoice-approval.yaml"), target=target)
    if stage_timeout is not None:
        asl["States"]["review"]["TimeoutSeconds"] = stage_timeout
    if execution_timeout is not None:
        asl["TimeoutSeconds"] = execution_timeout
    return aws.state_machine_create_or_update(
        name=unique("cb-invoice"), definition=asl, role_arn=settings.INBOX_STATES_ROLE_ARN
    )
