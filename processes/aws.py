"""Talk to AWS Step Functions and SQS, or to the local emulator; the only boto3 importer.

Every call goes through ``_call``, which turns botocore's errors into
``ExternalServiceError`` with a ``retryable`` flag. Request parameters can hold a task
token, so no parameter value ever reaches an exception message or a log line.
"""

import json
import re
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import boto3
from botocore import exceptions as boto_errors
from botocore.client import BaseClient
from botocore.config import Config
from django.conf import settings

from config.errors import ExternalServiceError

Service = Literal["stepfunctions", "sqs", "events", "logs"]

# Long enough for an SQS long poll (20 s) to come back with room to spare.
_READ_TIMEOUT = {"stepfunctions": 15, "sqs": 30, "events": 15, "logs": 15}
_CONNECT_TIMEOUT = 5
# One quick retry inside botocore; callers run their own bounded retries on `retryable`.
_MAX_ATTEMPTS = 2
# Connections a client keeps open: at least one per sender thread of the outbox drain
# (INBOX_CALLBACK_SENDERS) and the calls of other threads, so none waits for a socket.
_MAX_POOL_CONNECTIONS = 32
# A probe answers within a load balancer's or Prometheus' patience, or reports a failure.
_PROBE_CONNECT_TIMEOUT = 1
_PROBE_READ_TIMEOUT = 2

_THROTTLING_CODES = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "BandwidthLimitExceeded",
        "SlowDown",
        "KmsThrottled",
    }
)
_TRANSIENT_CODES = frozenset(
    {"RequestTimeout", "RequestTimeoutException", "PriorRequestNotComplete"}
)
_QUEUE_EXISTS_CODES = frozenset(
    {"QueueAlreadyExists", "QueueNameExists", "AWS.SimpleQueueService.QueueNameExists"}
)

# AWS validation messages echo the offending value ("Value 'xyz' at 'taskToken' failed
# to satisfy constraint"), and a task token is a long opaque run of characters.
_ECHOED_VALUE = re.compile(r"""(?i)(value\s*[:=]?\s*)(['"]).*?\2""")
_OPAQUE_RUN = re.compile(r"[A-Za-z0-9+/=_\-]{32,}")
_MESSAGE_LIMIT = 300

# Kept for 14 days (the SQS maximum) so a rejected envelope outlives the intake queue's
# own retention and an admin has time to look at it. The CloudFormation template
# (processes/infra.py) gives its queues the same attributes.
DLQ_RETENTION_SECONDS = 14 * 24 * 3600
# The intake worker validates, encrypts and upserts a batch of 10 well within this.
INTAKE_VISIBILITY_TIMEOUT = 60
INTAKE_WAIT_SECONDS = 20
# The clients built, by what they were built from (client); the first calls of several
# threads at once (the drain's senders) build one, under the lock.
_clients: dict[tuple[Service, str | None, str, bool, bool], BaseClient] = {}
_clients_lock = threading.Lock()


def client(*, service: Service, probe: bool = False) -> BaseClient:
    """Return the shared boto3 client for service, built from the current settings.

    Built once per process and settings (boto3 clients are safe to share between threads;
    sessions are not, so each client has its own, used only to build it).

    probe: the client of readiness checks and metrics (short timeouts, no retry).
    """
    endpoint_url, region = settings.AWS_ENDPOINT_URL, settings.AWS_REGION
    emulator = settings.INBOX_EMULATOR
    key = (service, endpoint_url, region, emulator, probe)
    # Read without the lock: every call of every sender thread comes here, and a dict
    # read is atomic; only a client not yet built takes the lock.
    built = _clients.get(key)
    if built is None:
        with _clients_lock:  # one build, however many threads ask for it at once
            built = _clients.get(key)
            if built is None:
                built = _clients[key] = _client(
                    service=service, endpoint_url=endpoint_url, region=region,
                    emulator=emulator, probe=probe)
    return built


def clients_forget() -> None:
    """Forget the clients built, so the next call builds new ones (a forked child must not
    share its parent's connections)."""
    with _clients_lock:
        _clients.clear()


def clients_build(*services: Service) -> None:
    """Build the shared clients of services now, as a long-running process starts.

    Building one loads botocore's models and endpoints (about 40 ms of CPU): paid at
    start, not by the first answer sent or the first check made. It calls nothing.
    """
    for service in services:
        client(service=service)


def _client(
    *, service: Service, endpoint_url: str | None, region: str, emulator: bool, probe: bool
) -> BaseClient:
    if probe:
        config = Config(
            connect_timeout=_PROBE_CONNECT_TIMEOUT,
            read_timeout=_PROBE_READ_TIMEOUT,
            retries={"mode": "standard", "max_attempts": 1},
        )
    else:
        config = Config(
            connect_timeout=_CONNECT_TIMEOUT,
            read_timeout=_READ_TIMEOUT[service],
            retries={"mode": "standard", "max_attempts": _MAX_ATTEMPTS},
            max_pool_connections=_MAX_POOL_CONNECTIONS,
        )
    credentials: dict[str, str] = {}
    if emulator:
        # The emulator accepts anything; fixed values keep a developer's real AWS
        # credentials (from the environment or ~/.aws) out of local traffic.
        credentials = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    # A Session per client: boto3's default session is not safe to share across threads.
    session = boto3.session.Session()
    return session.client(
        service, region_name=region, endpoint_url=endpoint_url, config=config, **credentials
    )


def _call(*, service: Service, operation: str, probe: bool = False,
          **params: Any) -> dict[str, Any]:
    """Call one API operation (a client method name) and translate botocore errors.

    probe: with the probe client (short timeouts, no retry).
    """
    aws = client(service=service, probe=probe)
    try:
        response = getattr(aws, operation)(**params)
    except (boto_errors.ClientError, boto_errors.BotoCoreError) as exc:
        api_name = aws.meta.method_to_api_mapping.get(operation, operation)
        # "from None": the original exception's text can echo request parameters.
        raise _external_error(exc, service=service, operation=api_name) from None
    response.pop("ResponseMetadata", None)
    return response


def _external_error(exc: Exception, *, service: str, operation: str) -> ExternalServiceError:
    """Return an ExternalServiceError for a botocore exception, without parameter values."""
    where = f"{service} {operation} failed"
    if isinstance(exc, boto_errors.ClientError):
        error = exc.response.get("Error", {})
        # moto leaves the code empty for some errors (InvalidDefinition on 5.2.5).
        code = str(error.get("Code") or "Unknown")
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        retryable = code in _THROTTLING_CODES or code in _TRANSIENT_CODES or status >= 500
        detail = _scrub(str(error.get("Message", "")))
        message = f"{where}: {code} (HTTP {status})" + (f": {detail}" if detail else "")
        return ExternalServiceError(message, retryable=retryable, error_code=code)
    code = type(exc).__name__
    if isinstance(exc, boto_errors.ParamValidationError):
        # Its text quotes the parameter values.
        return ExternalServiceError(
            f"{where}: {code}: the request parameters are invalid", retryable=False, error_code=code
        )
    network = isinstance(
        exc, boto_errors.ConnectionError | boto_errors.HTTPClientError
    ) and not isinstance(exc, boto_errors.SSLError)
    return ExternalServiceError(
        f"{where}: {code}: {_scrub(str(exc))}", retryable=network, error_code=code
    )


def _scrub(text: str) -> str:
    """Return text with echoed values and token-shaped runs removed, cut to a short length."""
    text = _ECHOED_VALUE.sub(r"\1\2[redacted]\2", text)
    text = _OPAQUE_RUN.sub("[redacted]", text)
    if len(text) > _MESSAGE_LIMIT:
        text = text[: _MESSAGE_LIMIT - 3] + "..."
    return text


# SQS ---------------------------------------------------------------------------------


def queue_url(*, name: str) -> str:
    """Return the URL of the queue called name."""
    return _call(service="sqs", operation="get_queue_url", QueueName=name)["QueueUrl"]


def queue_attributes(*, url: str) -> dict[str, str]:
    """Return every attribute of the queue at url."""
    response = _call(
        service="sqs", operation="get_queue_attributes", QueueUrl=url, AttributeNames=["All"]
    )
    return response.get("Attributes", {})


def _queue_ensure(*, name: str, attributes: dict[str, str]) -> tuple[str, str]:
    """Create the queue or bring an existing one to attributes; return its URL and ARN."""
    try:
        url = _call(service="sqs", operation="create_queue", QueueName=name, Attributes=attributes)[
            "QueueUrl"
        ]
    except ExternalServiceError as exc:
        if exc.error_code not in _QUEUE_EXISTS_CODES:
            raise
        # The queue exists with other attributes (e.g. a changed max receive count).
        url = queue_url(name=name)
        _call(service="sqs", operation="set_queue_attributes", QueueUrl=url, Attributes=attributes)
    arn = _call(
        service="sqs", operation="get_queue_attributes", QueueUrl=url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    return url, arn


def intake_queues_ensure() -> dict[str, str]:
    """Create the intake queue and its dead-letter queue if missing; return URLs and ARNs.

    Safe to run any number of times: existing queues are brought to the configured
    attributes (redrive after settings.INBOX_INTAKE_MAX_RECEIVES receives).
    """
    dlq_url, dlq_arn = _queue_ensure(
        name=settings.INBOX_INTAKE_DLQ,
        attributes={"MessageRetentionPeriod": str(DLQ_RETENTION_SECONDS)},
    )
    redrive = {
        "deadLetterTargetArn": dlq_arn,
        "maxReceiveCount": settings.INBOX_INTAKE_MAX_RECEIVES,
    }
    url, arn = _queue_ensure(
        name=settings.INBOX_INTAKE_QUEUE,
        attributes={
            "VisibilityTimeout": str(INTAKE_VISIBILITY_TIMEOUT),
            "ReceiveMessageWaitTimeSeconds": str(INTAKE_WAIT_SECONDS),
            "RedrivePolicy": json.dumps(redrive),
        },
    )
    return {"queue_url": url, "queue_arn": arn, "dlq_url": dlq_url, "dlq_arn": dlq_arn}


# What Step Functions tells EventBridge when an execution ends (AWS's documented event).
STATUS_CHANGE_SOURCE = "aws.states"
STATUS_CHANGE_DETAIL_TYPE = "Step Functions Execution Status Change"
EXECUTION_ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")


def status_queue_ensure() -> dict[str, str]:
    """Route the account's execution status changes to the inbox's status queue.

    Create (or bring up to date) the status queue and its dead-letter queue, an
    EventBridge rule on the default bus for "Step Functions Execution Status Change"
    events of ended executions, the queue as the rule's target, and a queue policy that
    lets that rule (and nothing else) send to it. Idempotent; return names and ARNs.
    """
    dlq_url, dlq_arn = _queue_ensure(
        name=settings.INBOX_STATUS_DLQ,
        attributes={"MessageRetentionPeriod": str(DLQ_RETENTION_SECONDS)},
    )
    rule = settings.INBOX_STATUS_RULE
    rule_arn = _call(
        service="events", operation="put_rule", Name=rule, State="ENABLED",
        Description="Execution status changes for the human-task inbox",
        EventPattern=json.dumps({
            "source": [STATUS_CHANGE_SOURCE],
            "detail-type": [STATUS_CHANGE_DETAIL_TYPE],
            "detail": {"status": list(EXECUTION_ENDED)},
        }),
    )["RuleArn"]
    url, arn = _queue_ensure(
        name=settings.INBOX_STATUS_QUEUE,
        attributes={
            "VisibilityTimeout": str(INTAKE_VISIBILITY_TIMEOUT),
            "ReceiveMessageWaitTimeSeconds": str(INTAKE_WAIT_SECONDS),
            "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn,
                                         "maxReceiveCount": settings.INBOX_INTAKE_MAX_RECEIVES}),
            "Policy": json.dumps({
                "Version": "2012-10-17",
                "Statement": [{
                    "Sid": "execution-status-from-eventbridge",
                    "Effect": "Allow",
                    "Principal": {"Service": "events.amazonaws.com"},
                    "Action": "sqs:SendMessage",
                    "Resource": "*",
                    "Condition": {"ArnEquals": {"aws:SourceArn": rule_arn}},
                }],
            }),
        },
    )
    _call(service="events", operation="put_targets", Rule=rule,
          Targets=[{"Id": "inbox-status-queue", "Arn": arn}])
    return {"queue_url": url, "queue_arn": arn, "dlq_url": dlq_url, "dlq_arn": dlq_arn,
            "rule_arn": rule_arn}


def events_put(*, entries: list[dict[str, Any]]) -> list[str | None]:
    """Put up to ten events on EventBridge in one call; return each entry's error code.

    None where the entry was accepted; PutEvents answers entry by entry.
    """
    answer = _call(service="events", operation="put_events", Entries=entries)
    return [result.get("ErrorCode") or None for result in answer.get("Entries", [])]


def messages_receive(
    *,
    url: str,
    max_messages: int = 10,
    wait_seconds: int = INTAKE_WAIT_SECONDS,
    visibility_timeout: int | None = None,
) -> list[dict[str, Any]]:
    """Receive up to max_messages from the queue at url, long-polling wait_seconds.

    Message bodies may hold task tokens: hand them on, never log them.
    """
    params: dict[str, Any] = {
        "QueueUrl": url,
        "MaxNumberOfMessages": max_messages,
        "WaitTimeSeconds": wait_seconds,
        "MessageSystemAttributeNames": ["ApproximateReceiveCount"],
    }
    if visibility_timeout is not None:
        params["VisibilityTimeout"] = visibility_timeout
    return _call(service="sqs", operation="receive_message", **params).get("Messages", [])


# The longest wait SQS allows for one long poll.
SQS_WAIT_MAX = 20


def messages_receive_batches(*, url: str, wait_seconds: int, budget_seconds: float,
                             max_messages: int = 10, visibility_timeout: int | None = None,
                             ahead: bool = False, window_seconds: float = 0.0,
                             ) -> Iterator[list[dict[str, Any]]]:
    """Yield the batches received from the queue at url until one comes back empty or
    budget_seconds are used; each long poll waits at most wait_seconds (and SQS's 20).

    ahead: receive the next batch in a thread of its own while the caller handles the one
    yielded, so the caller's work and SQS's round trip overlap. The messages of a receive
    still in flight when the caller stops early are not lost: SQS hands them out again
    after their visibility timeout.

    window_seconds: after a batch that was not full, wait this long before the next
    receive, so the messages arriving meanwhile come in one batch (Lambda's batching window
    for SQS): at a trickle each receive would otherwise carry one message and cost a whole
    round trip, a transaction and a delete. A full batch is followed at once (a backlog is
    read as fast as before), and so is the first receive (a quiet queue's first message
    is not held); a message waits at most the window more than without it.
    """
    deadline = time.monotonic() + budget_seconds

    def receive(pause: float) -> list[dict[str, Any]]:
        if pause > 0:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return []
        return messages_receive(
            url=url, max_messages=max_messages,
            wait_seconds=max(0, min(wait_seconds, SQS_WAIT_MAX, int(remaining))),
            visibility_timeout=visibility_timeout,
        )

    def pause_after(messages: list[dict[str, Any]]) -> float:
        return window_seconds if len(messages) < max_messages else 0.0

    if not ahead:
        messages = receive(0.0)
        while messages:
            yield messages
            messages = receive(pause_after(messages))
        return
    receiver = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqs-receive-ahead")
    try:
        pending = receiver.submit(receive, 0.0)
        while messages := pending.result():
            pending = receiver.submit(receive, pause_after(messages))
            yield messages
    finally:
        # Stopped early: the receive in flight is not waited for (a long poll can take
        # 20 s); its messages come back after their visibility timeout.
        receiver.shutdown(wait=False, cancel_futures=True)


def message_delete(*, url: str, receipt_handle: str) -> None:
    """Delete a received message from the queue at url."""
    _call(service="sqs", operation="delete_message", QueueUrl=url, ReceiptHandle=receipt_handle)


def messages_delete(*, url: str, receipt_handles: list[str]) -> list[str]:
    """Delete up to ten received messages from the queue at url in one call.

    Return the receipt handles SQS did not delete (each entry of a batch fails alone).
    """
    entries = [{"Id": str(index), "ReceiptHandle": handle}
               for index, handle in enumerate(receipt_handles)]
    answer = _call(service="sqs", operation="delete_message_batch", QueueUrl=url,
                   Entries=entries)
    return [receipt_handles[int(failed["Id"])] for failed in answer.get("Failed", [])]


# Step Functions --------------------------------------------------------------------------


def _state_machine_find(*, name: str) -> str | None:
    """Return the ARN of the state machine called name, or None."""
    token: str | None = None
    while True:
        params: dict[str, Any] = {"maxResults": 1000}
        if token:
            params["nextToken"] = token
        page = _call(service="stepfunctions", operation="list_state_machines", **params)
        for machine in page.get("stateMachines", []):
            if machine["name"] == name:
                return machine["stateMachineArn"]
        token = page.get("nextToken")
        if not token:
            return None


def state_machine_create_or_update(*, name: str, definition: dict, role_arn: str,
                                   logging: dict[str, Any] | None = None) -> str:
    """Create a Standard state machine, or update the one called name; return its ARN.

    logging: the API's loggingConfiguration (level, includeExecutionData, destinations);
    None leaves a new machine without logs and an existing one's as they are.
    """
    body = json.dumps(definition)
    extra: dict[str, Any] = {} if logging is None else {"loggingConfiguration": logging}
    arn = _state_machine_find(name=name)
    if arn is None:
        try:
            return _call(
                service="stepfunctions",
                operation="create_state_machine",
                name=name,
                definition=body,
                roleArn=role_arn,
                type="STANDARD",
                **extra,
            )["stateMachineArn"]
        except ExternalServiceError as exc:
            # Another deploy created it between the lookup and the create.
            if exc.error_code != "StateMachineAlreadyExists":
                raise
            arn = _state_machine_find(name=name)
            if arn is None:
                raise
    _call(
        service="stepfunctions",
        operation="update_state_machine",
        stateMachineArn=arn,
        definition=body,
        roleArn=role_arn,
        **extra,
    )
    return arn


def state_machine_describe(*, state_machine_arn: str) -> dict[str, Any]:
    """Return DescribeStateMachine's answer (definition, roleArn, loggingConfiguration...)."""
    return _call(service="stepfunctions", operation="describe_state_machine",
                 stateMachineArn=state_machine_arn)


# CloudWatch Logs ------------------------------------------------------------------------


def log_group_ensure(*, name: str, retention_days: int) -> None:
    """Create the log group called name if missing, and keep its logs retention_days."""
    try:
        _call(service="logs", operation="create_log_group", logGroupName=name)
    except ExternalServiceError as exc:
        if exc.error_code != "ResourceAlreadyExistsException":
            raise
    _call(service="logs", operation="put_retention_policy", logGroupName=name,
          retentionInDays=retention_days)


def execution_start(*, state_machine_arn: str, name: str, input: dict) -> str:
    """Start an execution called name (idempotent per name on AWS); return its ARN."""
    return _call(
        service="stepfunctions",
        operation="start_execution",
        stateMachineArn=state_machine_arn,
        name=name,
        input=json.dumps(input),
    )["executionArn"]


def executions_running_page(*, state_machine_arn: str, page_token: str | None = None,
                            page_size: int = 1000) -> tuple[list[dict[str, Any]], str | None]:
    """Return one page of the state machine's RUNNING executions and the next page's token.

    ListExecutions: at most page_size (up to 1,000) executions a call, newest first; the
    token is None after the last page (AWS keeps a token valid for 24 hours).
    """
    params: dict[str, Any] = {"stateMachineArn": state_machine_arn, "statusFilter": "RUNNING",
                              "maxResults": page_size}
    if page_token:
        params["nextToken"] = page_token
    page = _call(service="stepfunctions", operation="list_executions", **params)
    return page.get("executions", []), page.get("nextToken") or None


def execution_describe(*, execution_arn: str) -> dict[str, Any]:
    """Return DescribeExecution's answer for the execution (status, input, output...)."""
    return _call(
        service="stepfunctions", operation="describe_execution", executionArn=execution_arn
    )


def execution_stop(*, execution_arn: str, error: str, cause: str) -> None:
    """Stop the execution (it ends ABORTED) with error and cause."""
    _call(
        service="stepfunctions",
        operation="stop_execution",
        executionArn=execution_arn,
        error=error,
        cause=cause,
    )


def task_success(*, token: str, output: dict) -> None:
    """Send SendTaskSuccess with output for the task that token identifies.

    The token is a secret: it reaches neither an exception message nor a log line.
    """
    _call(
        service="stepfunctions",
        operation="send_task_success",
        taskToken=token,
        output=json.dumps(output),
    )


def task_failure(*, token: str, error: str, cause: str) -> None:
    """Send SendTaskFailure with error and cause for the task that token identifies.

    The token is a secret: it reaches neither an exception message nor a log line.
    """
    _call(
        service="stepfunctions",
        operation="send_task_failure",
        taskToken=token,
        error=error,
        cause=cause,
    )


# SQS: sending (intake redrive) ----------------------------------------------------------


def message_send(*, url: str, body: str) -> str:
    """Send a message with body to the queue at url; return its MessageId.

    The body may hold a task token: it reaches neither an exception message nor a log line.
    """
    return _call(service="sqs", operation="send_message", QueueUrl=url, MessageBody=body)[
        "MessageId"
    ]


# Step Functions: execution history (callback reconciliation) -----------------------------

# GetExecutionHistory returns at most 1,000 events per page.
_HISTORY_PAGE_MAX = 1000


def execution_history(
    *, execution_arn: str, max_events: int = 1000, newest_first: bool = False
) -> list[dict]:
    """Return the first max_events events of the execution's history, oldest first.

    With newest_first, return the last max_events events, newest first (reverseOrder).
    The history holds task tokens (the TaskScheduled parameters of every callback
    stage): keep it in memory, and never log it or put any of it in a message.
    """
    events: list[dict] = []
    page_token: str | None = None
    while len(events) < max_events:
        params: dict[str, Any] = {
            "executionArn": execution_arn,
            "maxResults": min(_HISTORY_PAGE_MAX, max_events - len(events)),
            "reverseOrder": newest_first,
        }
        if page_token:
            params["nextToken"] = page_token
        page = _call(service="stepfunctions", operation="get_execution_history", **params)
        events.extend(page.get("events", []))
        page_token = page.get("nextToken")
        if not page_token:
            break
    if newest_first:
        # The emulator ignores reverseOrder and maxResults (one page, oldest first); AWS
        # honours them. Event ids grow with time, so sorting gives the same answer on both.
        events.sort(key=lambda event: event["id"], reverse=True)
    return events[:max_events]


def task_heartbeat(*, token: str) -> None:
    """Tell Step Functions the human stage of token is still being worked on."""
    _call(service="stepfunctions", operation="send_task_heartbeat", taskToken=token)


# Probes (readiness, metrics): the probe client, short timeouts, no retries -------------


def states_ping() -> None:
    """Check that Step Functions answers (ListStateMachines, one result)."""
    _call(probe=True, service="stepfunctions", operation="list_state_machines", maxResults=1)


def sqs_ping() -> None:
    """Check that SQS answers and the intake queue exists (GetQueueUrl)."""
    _call(probe=True, service="sqs", operation="get_queue_url",
          QueueName=settings.INBOX_INTAKE_QUEUE)


def queue_depth(*, name: str) -> int:
    """Return the queue's ApproximateNumberOfMessages (visible messages), probe timeouts."""
    url = _call(probe=True, service="sqs", operation="get_queue_url", QueueName=name)["QueueUrl"]
    attributes = _call(
        probe=True, service="sqs", operation="get_queue_attributes", QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])


def error_is_throttling(*, error: ExternalServiceError) -> bool:
    """Return whether error is AWS throttling the caller (as opposed to a 5xx or network)."""
    return error.error_code in _THROTTLING_CODES
