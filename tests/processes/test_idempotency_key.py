"""Automation stages get an idempotency key: the execution and the stage, the same in
every retried attempt, another in another execution (and on each visit of a loop)."""

import json
import textwrap

import boto3
import pytest
from django.conf import settings

from processes import aws
from processes.compiler import Target, compile_spec
from processes.spec import SpecError, spec_parse
from tests.sfn import execution_wait, task_message_wait, unique

TARGET = Target(
    intake_queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/inbox-intake",
    state_machine_arn_prefix="arn:aws:states:eu-west-1:123456789012:stateMachine:",
)
KEY = "States.Format('{}:{}', $$.Execution.Id, '{stage}')"
LOOP_KEY = "States.Format('{}:{}:{}', $$.Execution.Id, '{stage}', $$.State.EnteredTime)"


def _spec(stages: str, *, top: str = "") -> str:
    return (f"process: keyed\nversion: 1\n{top}stages:\n"
            + textwrap.indent(textwrap.dedent(stages).strip("\n"), "  ") + "\n")


TWO_STEPS = _spec("""
    - id: enrich
      kind: automation
      function: {function}
      payload: {{invoice: $.invoice_id}}
    - id: notify-supplier
      kind: automation
      function: {function}
      retry: {{attempts: 2, interval: 1}}
    - id: done
      kind: succeed
""")

# A rework loop: the review may send the invoice back through fix, which runs again.
REWORK = _spec("""
    - id: review
      kind: human
      skill: invoice-review
      title: Review {{invoice_id}}
      form: rework
      timeouts: {{offer: 60, work: 600, overall: 3600}}
      show: [invoice_id]
    - id: route
      kind: choice
      rules:
        - if: {{var: stages.review.answer.decision, equals: again}}
          next: fix
      default: done
    - id: fix
      kind: automation
      function: {function}
      next: review
    - id: done
      kind: succeed
""", top="""timeout: 86400
forms:
  rework:
    title: Rework
    fields:
      - {{name: decision, type: choice, required: true, choices: [again, done]}}
""")


def _payloads(asl: dict) -> dict[str, dict]:
    return {name: state["Parameters"]["Payload"] for name, state in asl["States"].items()
            if state.get("Resource") == "arn:aws:states:::lambda:invoke"}


def test_each_automation_stage_gets_a_key_of_the_execution_and_its_stage():
    asl = compile_spec(spec_parse(TWO_STEPS.format(function="f"), source="k.yaml"),
                       target=TARGET)
    assert _payloads(asl) == {
        "enrich": {"invoice.$": "$.invoice_id",
                   "idempotencyKey.$": KEY.replace("{stage}", "enrich")},
        "notify-supplier": {"idempotencyKey.$": KEY.replace("{stage}", "notify-supplier")},
    }


def test_a_stage_an_execution_may_enter_again_gets_the_entry_time_in_its_key():
    asl = compile_spec(spec_parse(REWORK.format(function="f"), source="k.yaml"), target=TARGET)
    assert _payloads(asl) == {"fix": {"idempotencyKey.$": LOOP_KEY.replace("{stage}", "fix")}}


def test_a_payload_cannot_set_the_key_itself():
    text = TWO_STEPS.format(function="f").replace(
        "payload: {invoice: $.invoice_id}", "payload: {idempotencyKey: mine}")
    with pytest.raises(SpecError) as caught:
        spec_parse(text, source="k.yaml")
    assert caught.value.problems == [
        "k.yaml: stages[0] (enrich).payload.idempotencyKey: reserved: the compiled state sets "
        "it to the stage's idempotency key (docs/PROCESSES.md)"]


# On the emulator ----------------------------------------------------------------------------


def _client(service: str):
    return boto3.client(service, endpoint_url=settings.AWS_ENDPOINT_URL,
                        region_name=settings.AWS_REGION, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


@pytest.fixture(scope="module")
def function(emulator) -> str:
    """Create a Lambda function in the emulator, which answers each invoke with its payload
    (moto's Lambda without Docker; processes/emulator/server.py)."""
    role = _client("iam").create_role(
        RoleName=unique("keyed-fn"),
        AssumeRolePolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"},
            "Action": "sts:AssumeRole"}]}),
    )["Role"]["Arn"]
    name = unique("keyed")
    _client("lambda").create_function(FunctionName=name, Runtime="python3.12", Role=role,
                                      Handler="index.handler", Code={"ZipFile": b"unused"})
    return name


def _target() -> Target:
    queue_url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    _arn, partition, _sqs, region, account, _name = aws.queue_attributes(
        url=queue_url)["QueueArn"].split(":")
    return Target(queue_url, f"arn:{partition}:states:{region}:{account}:stateMachine:")


def _machine(text: str) -> str:
    asl = compile_spec(spec_parse(text, source="k.yaml"), target=_target())
    return aws.state_machine_create_or_update(name=unique("keyed"), definition=asl,
                                              role_arn=settings.INBOX_STATES_ROLE_ARN)


def _parameters(event: dict) -> dict:
    """Return a TaskScheduled event's parameters as sent (the emulator may keep a message
    body as JSON text)."""
    parameters = json.loads(event["taskScheduledEventDetails"]["parameters"])
    for name in ("Payload", "MessageBody"):
        if isinstance(parameters.get(name), str):
            parameters[name] = json.loads(parameters[name])
    return parameters


def _lambda_keys(execution_arn: str) -> list[tuple[str, str]]:
    """Return (function, idempotency key) of each Lambda call in the execution's history."""
    return [(parameters["FunctionName"], parameters["Payload"]["idempotencyKey"])
            for event in aws.execution_history(execution_arn=execution_arn)
            if event["type"] == "TaskScheduled"
            and event["taskScheduledEventDetails"]["resourceType"] == "lambda"
            for parameters in [_parameters(event)]]


@pytest.mark.emulator
def test_the_lambda_receives_the_key_and_another_execution_gets_another(function):
    machine = _machine(TWO_STEPS.format(function=function))
    outputs = []
    for _ in range(2):
        execution = aws.execution_start(state_machine_arn=machine, name=unique("k"),
                                        input={"invoice_id": "INV-1"})
        done = execution_wait(execution_arn=execution)
        assert done["status"] == "SUCCEEDED", done.get("error")
        # The function answers with its payload: what it received is in the output.
        stages = json.loads(done["output"])["stages"]
        outputs.append((execution, stages))
        assert stages["enrich"]["Payload"] == {"invoice": "INV-1",
                                               "idempotencyKey": f"{execution}:enrich"}
        assert stages["notify_supplier"]["Payload"] == {
            "idempotencyKey": f"{execution}:notify-supplier"}
    (first, one), (second, two) = outputs
    assert first != second
    assert one["enrich"]["Payload"]["idempotencyKey"] != two["enrich"]["Payload"][
        "idempotencyKey"]


@pytest.mark.emulator
def test_each_visit_of_a_loop_has_its_own_key(function):
    machine = _machine(REWORK.format(function=function))
    execution = aws.execution_start(state_machine_arn=machine, name=unique("k"),
                                    input={"invoice_id": "INV-2"})
    for decision in ("again", "again", "done"):
        review = task_message_wait(execution_arn=execution, stage="review")
        aws.task_success(token=review["taskToken"], output={"answer": {"decision": decision}})
    assert execution_wait(execution_arn=execution)["status"] == "SUCCEEDED"
    keys = [key for _function, key in _lambda_keys(execution)]
    assert len(keys) == 2 and keys[0] != keys[1]
    assert all(key.startswith(f"{execution}:fix:") for key in keys)


@pytest.mark.emulator
def test_every_attempt_of_a_state_evaluates_the_key_alike(emulator):
    """Retried attempts send the same key.

    The emulator's Lambda (without Docker) never fails, so no Lambda attempt is retried
    there; the compiled key expression (the loop form, with the entry time, the one that
    could change) is sent instead by an SQS Task to a queue that does not exist, retried
    twice: the history holds each attempt's evaluated parameters.
    """
    asl = compile_spec(spec_parse(REWORK.format(function="f"), source="k.yaml"), target=TARGET)
    expression = asl["States"]["fix"]["Parameters"]["Payload"]["idempotencyKey.$"]
    missing = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE).rsplit("/", 1)[0] + "/" + \
        unique("absent")
    machine = aws.state_machine_create_or_update(name=unique("keyed-retry"), definition={
        "StartAt": "fix",
        "States": {
            "fix": {
                "Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage",
                "Parameters": {"QueueUrl": missing,
                               "MessageBody": {"idempotencyKey.$": expression}},
                "Retry": [{"ErrorEquals": ["States.ALL"], "MaxAttempts": 2,
                           "IntervalSeconds": 1, "BackoffRate": 1}],
                "Catch": [{"ErrorEquals": ["States.ALL"], "Next": "gave-up"}],
                "End": True,
            },
            "gave-up": {"Type": "Succeed"},
        },
    }, role_arn=settings.INBOX_STATES_ROLE_ARN)
    execution = aws.execution_start(state_machine_arn=machine, name=unique("k"), input={})
    assert execution_wait(execution_arn=execution)["status"] == "SUCCEEDED"
    sent = [_parameters(event)["MessageBody"]["idempotencyKey"]
            for event in aws.execution_history(execution_arn=execution)
            if event["type"] == "TaskScheduled"]
    assert len(sent) == 3
    assert len(set(sent)) == 1 and sent[0].startswith(f"{execution}:fix:")
