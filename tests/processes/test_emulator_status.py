"""Execution status in the local emulator: StopExecution and status-change events.

moto 5.2.5 alone leaves a stopped execution that waits for a task token RUNNING, and
emits no "Step Functions Execution Status Change" events; these tests fail without the
shims of processes/emulator/status.py. They use boto3 clients of their own, as any
program talking to Step Functions, EventBridge and SQS would.
"""

import datetime
import importlib
import json
import time
from collections.abc import Callable, Iterator

import boto3
import pytest
from botocore.exceptions import ClientError
from django.conf import settings

from processes.emulator import EmulatorError
from processes.emulator.status import event_envelope_shim, execution_status_shim
from tests.sfn import unique

ROLE_ARN = "arn:aws:iam::123456789012:role/inbox-states"
DETAIL_TYPE = "Step Functions Execution Status Change"
ENDED = ("SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED")
ENVELOPE = {"version", "id", "detail-type", "source", "account", "time", "region", "resources",
            "detail"}
DETAIL = {"executionArn", "stateMachineArn", "name", "status", "startDate", "stopDate", "input",
          "inputDetails", "output", "outputDetails", "error", "cause"}


def _client(service: str):
    return boto3.client(
        service,
        endpoint_url=settings.AWS_ENDPOINT_URL,
        region_name=settings.AWS_REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def sfn(emulator):
    return _client("stepfunctions")


@pytest.fixture
def sqs(emulator):
    return _client("sqs")


@pytest.fixture
def human_stage(sfn, sqs) -> Callable[..., tuple[str, str, str]]:
    """Return a function that starts an execution waiting for a task token.

    It deploys a machine whose one Task sends its token to a queue of the test's own and
    waits (timeout seconds; with catch, any error is caught into a Pass state), starts it
    with input, and returns (state machine ARN, execution ARN, token).
    """

    def start(*, input: dict, timeout: int = 60, catch: bool = False) -> tuple[str, str, str]:
        queue = sqs.create_queue(QueueName=unique("stage"))["QueueUrl"]
        task: dict = {
            "Type": "Task",
            "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
            "Parameters": {"QueueUrl": queue, "MessageBody": {"token.$": "$$.Task.Token"}},
            "TimeoutSeconds": timeout,
            "End": True,
        }
        states = {"Review": task}
        if catch:
            task["Catch"] = [{"ErrorEquals": ["States.ALL"], "Next": "Caught"}]
            states["Caught"] = {"Type": "Pass", "Result": "caught", "End": True}
        machine = sfn.create_state_machine(
            name=unique("stage"),
            definition=json.dumps({"StartAt": "Review", "States": states}),
            roleArn=ROLE_ARN,
        )["stateMachineArn"]
        execution = sfn.start_execution(
            stateMachineArn=machine, name=unique("run"), input=json.dumps(input)
        )["executionArn"]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for message in sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=1).get(
                "Messages", []
            ):
                return machine, execution, json.loads(message["Body"])["token"]
        raise AssertionError(f"no task message from {execution} within 20 s")

    return start


@pytest.fixture
def status_events(sqs) -> Iterator[Callable[..., list[dict]]]:
    """A rule on the default event bus sending status changes to a queue of the test's own.

    Yields a function returning the events of one execution, as the queue received them
    (the whole message bodies, parsed), once the wanted statuses all arrived. The rule is
    removed afterwards: every rule of the default bus sees every execution's events.
    """
    events = _client("events")
    queue = sqs.create_queue(QueueName=unique("status"))["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    rule = unique("status")
    events.put_rule(
        Name=rule,
        EventPattern=json.dumps({
            "source": ["aws.states"],
            "detail-type": [DETAIL_TYPE],
            "detail": {"status": ["RUNNING", *ENDED]},
        }),
    )
    events.put_targets(Rule=rule, Targets=[{"Id": "status-queue", "Arn": queue_arn}])
    received: list[dict] = []

    def of(execution_arn: str, *, statuses: tuple[str, ...], timeout: float = 15) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            mine = [e for e in received if e["detail"]["executionArn"] == execution_arn]
            if sorted(e["detail"]["status"] for e in mine) == sorted(statuses):
                return mine
            if time.monotonic() > deadline:
                got = [e["detail"]["status"] for e in mine]
                raise AssertionError(f"events {got} for {execution_arn}, wanted {statuses}")
            for message in sqs.receive_message(
                QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1
            ).get("Messages", []):
                body = json.loads(message["Body"])
                body["raw"] = message["Body"]
                received.append(body)
                sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])

    yield of
    events.remove_targets(Rule=rule, Ids=["status-queue"])
    events.delete_rule(Name=rule)


def _ms(moment: datetime.datetime) -> int:
    return round(moment.timestamp() * 1000)


def _refused(call: Callable[[], object]) -> str:
    """Return the error code of a refused call; fail if it was accepted."""
    with pytest.raises(ClientError) as caught:
        call()
    return caught.value.response["Error"]["Code"]


def _holds_token(event: dict, token: str) -> bool:
    # Computed outside an assert, so a failure never prints the token.
    return token in event["raw"]


def _the(events: list[dict], status: str) -> dict:
    (event,) = [e for e in events if e["detail"]["status"] == status]
    return event


# StopExecution ----------------------------------------------------------------------------


@pytest.mark.emulator
def test_stop_ends_a_waiting_execution_aborted_at_once(sfn, human_stage):
    """DescribeExecution and ListExecutions say ABORTED, with stopDate, right after the stop."""
    machine, execution, _token = human_stage(input={"invoice": "INV-1"})

    stopped = sfn.stop_execution(executionArn=execution)
    described = sfn.describe_execution(executionArn=execution)

    assert described["status"] == "ABORTED"
    assert described["stopDate"] == stopped["stopDate"]
    assert described["stopDate"] >= described["startDate"]
    (listed,) = sfn.list_executions(stateMachineArn=machine)["executions"]
    assert (listed["status"], listed["stopDate"]) == ("ABORTED", described["stopDate"])
    assert sfn.list_executions(stateMachineArn=machine, statusFilter="RUNNING")[
        "executions"
    ] == []
    history = sfn.get_execution_history(executionArn=execution)["events"]
    assert history[-1]["type"] == "ExecutionAborted"
    assert [e["type"] for e in history].count("ExecutionAborted") == 1


@pytest.mark.emulator
def test_a_stopped_execution_refuses_its_token(sfn, human_stage):
    """SendTaskSuccess, SendTaskHeartbeat and SendTaskFailure answer InvalidToken.

    AWS answers TaskTimedOut; the inbox treats both as "the execution moved on".
    """
    _machine, execution, token = human_stage(input={})
    sfn.stop_execution(executionArn=execution)

    assert _refused(lambda: sfn.send_task_success(taskToken=token, output="{}")) == "InvalidToken"
    assert _refused(lambda: sfn.send_task_heartbeat(taskToken=token)) == "InvalidToken"
    assert _refused(
        lambda: sfn.send_task_failure(taskToken=token, error="HumanTask.Rejected")
    ) == "InvalidToken"
    assert sfn.describe_execution(executionArn=execution)["status"] == "ABORTED"


@pytest.mark.emulator
def test_a_stopped_execution_stays_aborted_when_its_wait_times_out(
    sfn, human_stage, status_events
):
    """The wait left behind times out after 1 s; neither the Catch nor the timeout shows.

    moto alone would end this execution FAILED (States.Timeout) when the wait times out.
    """
    _machine, execution, _token = human_stage(input={}, timeout=1, catch=True)
    sfn.stop_execution(executionArn=execution)
    stopped = sfn.describe_execution(executionArn=execution)
    history = sfn.get_execution_history(executionArn=execution)["events"]

    time.sleep(2.5)  # Past the Task's TimeoutSeconds: the stranded wait has ended.

    later = sfn.describe_execution(executionArn=execution)
    assert (later["status"], later["stopDate"]) == ("ABORTED", stopped["stopDate"])
    assert "error" not in later and "output" not in later
    assert sfn.get_execution_history(executionArn=execution)["events"] == history
    events = status_events(execution, statuses=("RUNNING", "ABORTED"))
    assert [e["detail"]["status"] for e in events] == ["RUNNING", "ABORTED"]


# Status-change events ---------------------------------------------------------------------


@pytest.mark.emulator
def test_stop_publishes_the_aborted_event_in_aws_shape(sfn, human_stage, status_events):
    """The SQS target receives AWS's whole event: envelope and detail, nothing else."""
    input = {"invoice": "INV-2", "note": "<source> and <time> stay as they are"}
    machine, execution, token = human_stage(input=input)
    sfn.stop_execution(executionArn=execution)
    described = sfn.describe_execution(executionArn=execution)

    events = status_events(execution, statuses=("RUNNING", "ABORTED"))

    aborted = _the(events, "ABORTED")
    account, region = execution.split(":")[4], execution.split(":")[3]
    assert set(aborted) - {"raw"} == ENVELOPE
    assert aborted["version"] == "0"
    assert aborted["detail-type"] == DETAIL_TYPE
    assert aborted["source"] == "aws.states"
    assert (aborted["account"], aborted["region"]) == (account, region)
    assert aborted["resources"] == [execution]
    assert datetime.datetime.fromisoformat(aborted["time"]).tzinfo is not None
    detail = aborted["detail"]
    assert set(detail) == DETAIL
    assert detail["executionArn"] == execution
    assert detail["stateMachineArn"] == machine
    assert detail["name"] == execution.rsplit(":", 1)[1]
    assert detail["status"] == "ABORTED"
    assert abs(detail["startDate"] - _ms(described["startDate"])) <= 1
    assert abs(detail["stopDate"] - _ms(described["stopDate"])) <= 1
    assert json.loads(detail["input"]) == input
    assert detail["inputDetails"] == {"included": True}
    assert (detail["output"], detail["outputDetails"]) == (None, None)
    assert (detail["error"], detail["cause"]) == (None, None)
    running = _the(events, "RUNNING")["detail"]
    assert (running["stopDate"], running["output"]) == (None, None)
    assert running["startDate"] == detail["startDate"]
    assert aborted["id"] != _the(events, "RUNNING")["id"]
    leaked = any(_holds_token(event, token) for event in events)
    assert not leaked, "a status event holds the task token"


@pytest.mark.emulator
def test_a_succeeded_execution_publishes_its_output(sfn, human_stage, status_events):
    """SendTaskSuccess ends the execution; its event carries the execution's own output."""
    machine, execution, token = human_stage(input={"invoice": "INV-3"})
    sfn.send_task_success(taskToken=token, output=json.dumps({"decision": "approve"}))

    events = status_events(execution, statuses=("RUNNING", "SUCCEEDED"))

    described = sfn.describe_execution(executionArn=execution)
    assert described["status"] == "SUCCEEDED"
    detail = _the(events, "SUCCEEDED")["detail"]
    assert (detail["executionArn"], detail["stateMachineArn"]) == (execution, machine)
    assert json.loads(detail["output"]) == json.loads(described["output"]) == {
        "decision": "approve"
    }
    assert detail["outputDetails"] == {"included": True}
    assert abs(detail["stopDate"] - _ms(described["stopDate"])) <= 1
    assert (detail["error"], detail["cause"]) == (None, None)
    leaked = any(_holds_token(event, token) for event in events)
    assert not leaked, "a status event holds the task token"


@pytest.mark.emulator
def test_a_failed_execution_publishes_its_error(sfn, human_stage, status_events):
    """SendTaskFailure fails the execution; its event carries the error, no output."""
    machine, execution, token = human_stage(input={"invoice": "INV-4"})
    sfn.send_task_failure(taskToken=token, error="HumanTask.Rejected", cause="a duplicate")

    events = status_events(execution, statuses=("RUNNING", "FAILED"))

    described = sfn.describe_execution(executionArn=execution)
    detail = _the(events, "FAILED")["detail"]
    assert (detail["executionArn"], detail["stateMachineArn"]) == (execution, machine)
    assert detail["error"] == described["error"] == "HumanTask.Rejected"
    # moto drops SendTaskFailure's cause (a known difference); the event says what it has.
    assert detail["cause"] == described.get("cause")
    assert (detail["output"], detail["outputDetails"]) == (None, None)
    assert abs(detail["stopDate"] - _ms(described["stopDate"])) <= 1
    leaked = any(_holds_token(event, token) for event in events)
    assert not leaked, "a status event holds the task token"


@pytest.mark.emulator
def test_a_timed_out_execution_publishes_its_event(sfn, status_events):
    """An execution past its TimeoutSeconds (1 s) sends TIMED_OUT with a stopDate."""
    machine = sfn.create_state_machine(
        name=unique("slow"),
        definition=json.dumps({
            "TimeoutSeconds": 1,
            "StartAt": "Wait",
            "States": {"Wait": {"Type": "Wait", "Seconds": 30, "End": True}},
        }),
        roleArn=ROLE_ARN,
    )["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=machine, name=unique("run"), input="{}")[
        "executionArn"
    ]

    events = status_events(execution, statuses=("RUNNING", "TIMED_OUT"))

    detail = _the(events, "TIMED_OUT")["detail"]
    assert sfn.describe_execution(executionArn=execution)["status"] == "TIMED_OUT"
    assert detail["stopDate"] >= detail["startDate"] + 1000
    assert (detail["output"], detail["error"]) == (None, None)


# The shims themselves, in this process (they patch moto's classes; monkeypatch undoes it) --

EXECUTION_MODULE = "moto.stepfunctions.parser.backend.execution"
SHIM_MARK = "inbox_execution_status_shim"


def _unpatched(value: object) -> object:
    """Return moto's own method behind a shim's wrapper (value itself if not wrapped)."""
    if isinstance(value, staticmethod):
        return staticmethod(_unpatched(value.__func__))
    return getattr(value, "__wrapped__", value) if hasattr(value, SHIM_MARK) else value


@pytest.fixture
def moto_classes(monkeypatch) -> dict[str, type]:
    """Return the moto classes the shims patch, unpatched, as they were again after the test.

    The emulator command's tests run serve in this process, which applies the shims: each
    patched method is replaced by moto's own for the test.
    """
    execution = importlib.import_module(EXECUTION_MODULE)
    models = importlib.import_module("moto.stepfunctions.parser.models")
    events = importlib.import_module("moto.events.utils")
    patched = {
        execution.Execution: ("start", "stop"),
        execution.BaseExecutionWorkerCommunication: ("terminated",),
        models.StepFunctionsParserBackend: ("send_task_failure",),
        events.EventTemplateParser: ("parse",),
    }
    for owner, names in patched.items():
        for name in names:
            monkeypatch.setattr(owner, name, _unpatched(owner.__dict__[name]))
    return {owner.__name__: owner for owner in patched}


def _state(classes: dict[str, type]) -> dict[tuple[str, str], object]:
    return {(owner.__name__, name): value for owner in classes.values()
            for name, value in vars(owner).items()
            if name in ("start", "stop", "terminated", "send_task_failure", "parse")}


def test_applying_the_status_shims_twice_is_harmless(moto_classes):
    """A second application leaves every patched method as the first one made it."""
    before = _state(moto_classes)
    execution_status_shim()
    event_envelope_shim()
    once = _state(moto_classes)
    execution_status_shim()
    event_envelope_shim()

    assert _state(moto_classes) == once
    assert all(once[key] is not before[key] for key in before)
    event = {"version": "0", "id": "1", "detail-type": DETAIL_TYPE, "source": "aws.states",
             "account": "123456789012", "time": 1.5, "region": "us-east-1", "resources": [],
             "detail": {"note": "<source>"}, "ingestion-time": 1.5}
    parse = moto_classes["EventTemplateParser"].parse
    assert parse(None, {}, event) == {k: v for k, v in event.items() if k != "ingestion-time"}
    assert parse('{"only": <source>}', {"source": "$.detail"}, event) == {
        "only": {"note": "<source>"}
    }


def test_the_status_shim_names_a_moved_moto_method(moto_classes, monkeypatch):
    """An Execution.stop without the arguments the shim passes is an EmulatorError."""

    def stop(self, when):  # The shape a future moto might have.
        pass

    monkeypatch.setattr(moto_classes["Execution"], "stop", stop)

    with pytest.raises(EmulatorError, match=r"Execution\.stop\(stop_date, error, cause\)"):
        execution_status_shim()
