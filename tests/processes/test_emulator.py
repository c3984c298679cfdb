"""The local emulator (moto, ASL execution on) and processes.aws, the one AWS client module."""

import json
import socket
import sys
import threading
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from botocore.stub import Stubber
from django.conf import settings
from django.core.management import CommandError, call_command
from django.test import override_settings

from config.errors import ExternalServiceError
from processes import aws
from tests.sfn import execution_wait, task_message_wait, unique

ROLE_ARN = "arn:aws:iam::123456789012:role/inbox-states"


def _emulator_config() -> dict:
    """Return GET /moto-api/config of the running emulator, read with plain urllib."""
    port = settings.INBOX_EMULATOR_PORT
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/moto-api/config", timeout=5) as response:
        return json.load(response)


def _pass_machine(result: dict) -> dict:
    return {
        "StartAt": "Pass",
        "States": {
            "Pass": {"Type": "Pass", "Result": result, "Next": "Done"},
            "Done": {"Type": "Succeed"},
        },
    }


# The emulator -----------------------------------------------------------------------


@pytest.mark.emulator
def test_emulator_answers_at_the_configured_endpoint(emulator):
    """The fixture's endpoint is the one settings give every boto3 client."""
    assert emulator == settings.AWS_ENDPOINT_URL
    assert emulator == f"http://127.0.0.1:{settings.INBOX_EMULATOR_PORT}"
    assert "stepfunctions" in _emulator_config()


@pytest.mark.emulator
def test_emulator_reports_asl_execution_on(emulator):
    """GET /moto-api/config shows stepfunctions.execute_state_machine true."""
    assert _emulator_config()["stepfunctions"] == {"execute_state_machine": True}


@pytest.mark.emulator
def test_emulator_runs_lambda_without_docker(emulator):
    """An invoke answers with its payload (test_idempotency_key runs automation stages)."""
    assert _emulator_config()["lambda"] == {"use_docker": False}


@pytest.mark.emulator
def test_intake_queue_redrives_to_its_dlq_after_five_receives(emulator):
    """The emulator command created the intake queue with a redrive policy to the DLQ."""
    intake = aws.queue_attributes(url=aws.queue_url(name=settings.INBOX_INTAKE_QUEUE))
    dlq = aws.queue_attributes(url=aws.queue_url(name=settings.INBOX_INTAKE_DLQ))

    redrive = json.loads(intake["RedrivePolicy"])
    assert redrive["deadLetterTargetArn"] == dlq["QueueArn"]
    assert int(redrive["maxReceiveCount"]) == settings.INBOX_INTAKE_MAX_RECEIVES == 5
    assert intake["ReceiveMessageWaitTimeSeconds"] == "20"
    assert int(intake["VisibilityTimeout"]) > 0


@pytest.mark.emulator
def test_intake_queues_ensure_is_idempotent_and_applies_changed_settings(emulator):
    """A second run returns the same queues; a changed max receive count is applied."""
    first = aws.intake_queues_ensure()
    assert aws.intake_queues_ensure() == first
    try:
        with override_settings(INBOX_INTAKE_MAX_RECEIVES=3):
            assert aws.intake_queues_ensure() == first
        redrive = json.loads(aws.queue_attributes(url=first["queue_url"])["RedrivePolicy"])
        assert int(redrive["maxReceiveCount"]) == 3
    finally:
        aws.intake_queues_ensure()
    redrive = json.loads(aws.queue_attributes(url=first["queue_url"])["RedrivePolicy"])
    assert int(redrive["maxReceiveCount"]) == 5


@pytest.mark.emulator
def test_pass_state_machine_runs_to_succeeded(emulator):
    """A Pass state then Succeed, created through processes.aws, really runs."""
    arn = aws.state_machine_create_or_update(
        name=unique("pass"), definition=_pass_machine({"answer": 42}), role_arn=ROLE_ARN
    )
    execution_arn = aws.execution_start(
        state_machine_arn=arn, name=unique("run"), input={"question": "?"}
    )

    described = execution_wait(execution_arn=execution_arn)

    assert described["status"] == "SUCCEEDED"
    assert json.loads(described["output"]) == {"answer": 42}


@pytest.mark.emulator
def test_state_machine_create_or_update_replaces_the_definition(emulator):
    """Deploying again under the same name keeps the ARN and runs the new definition.

    moto's CreateStateMachine returns an existing machine unchanged (AWS refuses a
    different definition), so this also proves the update path is taken.
    """
    name = unique("redeploy")
    first = aws.state_machine_create_or_update(
        name=name, definition=_pass_machine({"version": 1}), role_arn=ROLE_ARN
    )
    second = aws.state_machine_create_or_update(
        name=name, definition=_pass_machine({"version": 2}), role_arn=ROLE_ARN
    )
    execution_arn = aws.execution_start(state_machine_arn=second, name=unique("run"), input={})

    described = execution_wait(execution_arn=execution_arn)

    assert second == first
    assert json.loads(described["output"]) == {"version": 2}


@pytest.mark.emulator
def test_wait_for_task_token_puts_a_message_on_the_intake_queue(emulator):
    """sqs:sendMessage.waitForTaskToken reaches the intake queue (MOTO_PORT is right).

    The intake queue is shared by the whole session, so other tests' messages are
    left alone: they come back after a one-second visibility timeout.
    """
    queue = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    marker = uuid.uuid4().hex
    definition = {
        "StartAt": "Ask",
        "States": {
            "Ask": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {
                    "QueueUrl": queue,
                    "MessageBody": {
                        "kind": "emulator-test",
                        "marker": marker,
                        "taskToken.$": "$$.Task.Token",
                        "execution.$": "$$.Execution.Id",
                    },
                },
                "TimeoutSeconds": 30,
                "End": True,
            }
        },
    }
    arn = aws.state_machine_create_or_update(
        name=unique("ask"), definition=definition, role_arn=ROLE_ARN
    )
    execution_arn = aws.execution_start(state_machine_arn=arn, name=unique("run"), input={})

    found = task_message_wait(match=lambda body: body.get("marker") == marker, timeout=20)

    assert found["execution"] == execution_arn
    # Compared by shape only: a token is never printed, not even in a failing test.
    assert isinstance(found["taskToken"], str)
    assert len(found["taskToken"]) > 0
    assert aws.execution_describe(execution_arn=execution_arn)["status"] == "RUNNING"


# The emulator command ---------------------------------------------------------------


@pytest.mark.emulator
def test_emulator_command_names_a_taken_port(emulator):
    """A second emulator on the same port fails with a CommandError naming the port."""
    port = settings.INBOX_EMULATOR_PORT

    with pytest.raises(CommandError, match=f"Port {port} .* already in use"):
        call_command("emulator")


def test_emulator_command_refuses_when_the_emulator_is_off():
    """With INBOX_EMULATOR off the deployment talks to AWS: no emulator is started."""
    with override_settings(INBOX_EMULATOR=False), pytest.raises(CommandError, match="real AWS"):
        call_command("emulator")


def test_emulator_command_without_moto_says_to_install_requirements_emulator(monkeypatch):
    """Where moto is missing (a production install), the command names the file to install.

    moto is installed here, so its absence is simulated: None in sys.modules["moto"] makes
    importing it fail, and the emulator's modules and moto's submodules are unloaded for
    the test (monkeypatch puts them back).
    """
    for name in list(sys.modules):
        if name.startswith(("moto.", "processes.emulator.")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "moto", None)

    with pytest.raises(CommandError) as caught:
        call_command("emulator")

    message = str(caught.value)
    assert "needs moto" in message
    assert "(moto is missing)" in message
    assert "pip install -r requirements-emulator.txt" in message


# Error translation --------------------------------------------------------------------
# AWS throttling and 5xx cannot be produced by the emulator on demand, so these tests
# patch the client's responses with botocore.stub.Stubber (no request leaves the process).


def _start_error(*, code: str, status: int, message: str = "") -> ExternalServiceError:
    """Return the error execution_start raises when AWS answers code/status (stubbed)."""
    with Stubber(aws.client(service="stepfunctions")) as stub:
        stub.add_client_error(
            "start_execution",
            service_error_code=code,
            service_message=message,
            http_status_code=status,
        )
        with pytest.raises(ExternalServiceError) as caught:
            aws.execution_start(
                state_machine_arn="arn:aws:states:us-east-1:123456789012:stateMachine:sm",
                name="run-with-a-secret-name",
                input={"taskToken": "SECRET-INPUT-VALUE"},
            )
        stub.assert_no_pending_responses()
    return caught.value


def test_throttling_is_retryable():
    """ThrottlingException (HTTP 400) may succeed later. Stubbed with botocore's Stubber."""
    error = _start_error(code="ThrottlingException", status=400, message="Rate exceeded")

    assert error.retryable is True
    assert error.error_code == "ThrottlingException"


def test_validation_error_is_not_retryable():
    """ValidationException will fail the same way again. Stubbed with botocore's Stubber."""
    error = _start_error(code="ValidationException", status=400, message="Bad request")

    assert error.retryable is False
    assert error.error_code == "ValidationException"


def test_server_error_is_retryable():
    """Any 5xx is retryable, whatever its code. Stubbed with botocore's Stubber."""
    error = _start_error(code="InternalFailure", status=500)

    assert error.retryable is True
    assert error.status == 502


def test_error_message_names_operation_and_code_but_no_parameters():
    """The message says what failed and why, never what was sent. Stubbed with Stubber."""
    error = _start_error(code="ValidationException", status=400, message="Bad request")

    assert "StartExecution" in error.message
    assert "ValidationException" in error.message
    assert "Bad request" in error.message
    assert "SECRET-INPUT-VALUE" not in str(error)
    assert "run-with-a-secret-name" not in str(error)
    assert "stateMachine:sm" not in str(error)
    assert error.__cause__ is None
    assert error.__suppress_context__ is True


def test_value_echoed_by_aws_is_redacted_from_the_message():
    """AWS validation messages quote the bad value; a token there is cut out. Stubbed."""
    token = "AAAAKgAAAAIAAAAAAAAAAQ" + "x" * 200
    error = _start_error(
        code="ValidationException",
        status=400,
        message=f"1 validation error detected: Value '{token}' at 'taskToken' failed to "
        "satisfy constraint: Member must have length less than or equal to 2048",
    )

    assert token not in error.message
    assert token[:24] not in error.message
    assert "taskToken" in error.message


def test_unreachable_endpoint_is_retryable():
    """A closed port gives a network error, which is retryable (no stub: a real socket)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]

    with override_settings(AWS_ENDPOINT_URL=f"http://127.0.0.1:{closed_port}"):
        with pytest.raises(ExternalServiceError) as caught:
            aws.execution_describe(
                execution_arn="arn:aws:states:us-east-1:123456789012:execution:sm:run"
            )

    assert caught.value.retryable is True
    assert caught.value.error_code == "EndpointConnectionError"
    assert "DescribeExecution" in caught.value.message


# The shared clients ---------------------------------------------------------------------


def test_threads_asking_at_once_get_one_client_built_once(monkeypatch):
    """The drain's sender threads ask for the client at once: one build, one client."""
    aws.clients_forget()
    built = []
    real = aws._client
    entered = threading.Barrier(8)

    def counted(**kwargs):
        built.append(kwargs["service"])
        return real(**kwargs)

    monkeypatch.setattr(aws, "_client", counted)

    def ask(_):
        entered.wait()
        return aws.client(service="stepfunctions")

    with ThreadPoolExecutor(8) as pool:
        clients = list(pool.map(ask, range(8)))

    assert built == ["stepfunctions"]
    assert len({id(one) for one in clients}) == 1
    assert aws.client(service="stepfunctions") is clients[0]


def test_a_client_is_built_for_each_endpoint_and_forgotten_on_demand():
    """Another endpoint setting gets its own client; clients_forget makes the next call
    build a new one (a forked process must not share its parent's sockets)."""
    first = aws.client(service="stepfunctions")
    with override_settings(AWS_ENDPOINT_URL="http://127.0.0.1:9"):
        elsewhere = aws.client(service="stepfunctions")
    assert elsewhere is not first
    assert elsewhere.meta.endpoint_url == "http://127.0.0.1:9"
    assert aws.client(service="stepfunctions") is first
    assert aws.client(service="stepfunctions", probe=True) is not first

    aws.clients_forget()

    assert aws.client(service="stepfunctions") is not first
