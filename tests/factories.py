"""Builders for test data that enters through the real intake path."""

import json
import uuid
from typing import Any


def envelope(**overrides: Any) -> dict[str, Any]:
    """Return a valid human-task/v1 envelope with a fresh token and execution."""
    execution = f"arn:aws:states:us-east-1:123456789012:execution:test:{uuid.uuid4().hex}"
    body: dict[str, Any] = {
        "kind": "human-task/v1",
        "taskToken": f"token-{uuid.uuid4()}-{uuid.uuid4()}",
        "execution": execution,
        "stage": "review",
        "enteredAt": "2026-11-30T09:00:00.000Z",
        "process": {"name": "invoice-approval", "version": 1},
        "skill": "invoice-review",
        "minProficiency": 1,
        "title": "Review invoice INV-42",
        "form": "approve-reject",
        "input": {"invoice_id": "INV-42", "amount": 12500},
        "priority": 50,
        "timeouts": {"offer": 300, "work": 1800, "overall": 86400},
        "onTimeout": "abort",
        "excludeWorkersOf": [],
    }
    body.update(overrides)
    return body


def sqs_message(body: dict[str, Any] | str, *, receive_count: int = 1) -> dict[str, Any]:
    """Return an SQS message as boto3's receive_message gives it."""
    return {
        "MessageId": str(uuid.uuid4()),
        "ReceiptHandle": uuid.uuid4().hex,
        "Body": body if isinstance(body, str) else json.dumps(body),
        "Attributes": {"ApproximateReceiveCount": str(receive_count)},
    }
