"""The template deployed to the emulator's CloudFormation, and an execution run on it.

Nothing is faked: the stack is created and updated by moto's CloudFormation (with the
emulator's shim, processes/emulator/cloudformation.py, that puts its state machines where
the API runs them), an execution runs on the stack's state machine, its human stage
reaches the inbox through the stack's intake queue, a worker answers through the REST API
and the outbox, and the stack's rule routes the ended execution's status event.

What moto 5.2.5's CloudFormation cannot do, checked here so an upgrade shows: it creates
no AWS::SQS::QueuePolicy and no AWS::CloudWatch::Alarm (it skips them, and the stack still
completes), and it cannot update an AWS::IAM::ManagedPolicy or an AWS::Logs::LogGroup (a
stack update leaves the first version of a managed policy in place).
"""

import io
import json
import time
import uuid

import boto3
import pytest
import yaml
from django.conf import settings
from django.core.management import call_command
from rest_framework.test import APIClient

from inbox.models import Outbox, OutboxStatus, Task, TaskState
from inbox.services.callback import callback_send
from inbox.services.intake import intake_poll
from inbox.tokens import token_decrypt
from processes import aws
from processes.services import process_deploy, process_start
from tests.processes.lifecycle import unique_name
from tests.sfn import execution_wait, unique

pytestmark = pytest.mark.emulator
ACCOUNT = "123456789012"
NOT_IN_MOTO = {"AWS::SQS::QueuePolicy", "AWS::CloudWatch::Alarm"}


def _client(service: str):
    return boto3.client(service, endpoint_url=settings.AWS_ENDPOINT_URL,
                        region_name=settings.AWS_REGION, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def _spec(name: str) -> str:
    return f"""\
process: {name}
version: 1
description: One review, through the stack's queue.
stages:
  - id: review
    kind: human
    skill: invoice-review
    title: "Pay ${{amount}} to {{supplier}}"
    show: [amount, supplier]
    form: approve-reject
    timeouts: {{offer: 300, work: 600, overall: 3600}}
  - id: done
    kind: succeed
"""


@pytest.fixture
def stack_settings(emulator, settings) -> str:
    """Names of this test's own, and deploys that only record (the stack creates machines)."""
    prefix = f"t{uuid.uuid4().hex[:8]}"
    settings.INBOX_INFRA_PREFIX = prefix
    settings.INBOX_INTAKE_QUEUE = f"{prefix}-intake"
    settings.INBOX_INTAKE_DLQ = f"{prefix}-intake-dlq"
    settings.INBOX_STATUS_QUEUE = f"{prefix}-status"
    settings.INBOX_STATUS_DLQ = f"{prefix}-status-dlq"
    settings.INBOX_STATUS_RULE = f"{prefix}-status"
    settings.INBOX_STATE_MACHINES_FROM_TEMPLATE = True
    return prefix


def _template() -> str:
    out = io.StringIO()
    call_command("infra_template", stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _stack_deploy(cfn, *, stack: str, body: str, update: bool) -> set[str]:
    """Create or update the stack with body; return the logical ids moto holds a resource for."""
    deploy = cfn.update_stack if update else cfn.create_stack
    deploy(StackName=stack, TemplateBody=body, Capabilities=["CAPABILITY_NAMED_IAM"])
    described = cfn.describe_stacks(StackName=stack)["Stacks"][0]
    wanted = "UPDATE_COMPLETE" if update else "CREATE_COMPLETE"
    assert described["StackStatus"] == wanted, described.get("StackStatusReason")
    return {r["LogicalResourceId"] for r in
            cfn.list_stack_resources(StackName=stack)["StackResourceSummaries"]
            if r["LogicalResourceId"]}


def _intake_until_task(*, timeout: float = 20) -> Task:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        intake_poll(wait_seconds=1, budget_seconds=2)
        task = Task.objects.filter(state=TaskState.QUEUED).first()
        if task:
            return task
    raise AssertionError(f"no task reached the inbox within {timeout} s")


def _status_event(*, execution_arn: str, timeout: float = 15) -> dict:
    url = aws.queue_url(name=settings.INBOX_STATUS_QUEUE)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in aws.messages_receive(url=url, wait_seconds=1):
            body = json.loads(message["Body"])
            if body.get("detail", {}).get("executionArn") == execution_arn:
                return body
    raise AssertionError(f"no status event of {execution_arn} within {timeout} s")


@pytest.mark.django_db
def test_the_stack_runs_a_process_whose_task_reaches_the_inbox_and_whose_answer_returns(
        stack_settings, make_worker, review_skill):
    prefix = stack_settings
    cfn, sfn = _client("cloudformation"), _client("stepfunctions")
    stack = unique("inbox-stack")
    name = unique_name("infra")
    # A first install: the queues, the rule, the policies; no process yet.
    base = _template()
    created = _stack_deploy(cfn, stack=stack, body=base, update=False)
    resources = yaml.safe_load(base)["Resources"]
    assert {resources[i]["Type"] for i in set(resources) - created} == NOT_IN_MOTO
    assert aws.queue_url(name=f"{prefix}-intake").endswith(f"/{ACCOUNT}/{prefix}-intake")

    # A release: the deploy records the version, the stack creates its state machine.
    version, _ = process_deploy(text=_spec(name), source="infra test")
    machine_arn = f"arn:aws:states:{settings.AWS_REGION}:{ACCOUNT}:stateMachine:{name}-v1"
    assert version.state_machine_arn == machine_arn
    # Every page: the session's other tests make hundreds of state machines.
    listed = [m["stateMachineArn"] for page in sfn.get_paginator("list_state_machines")
              .paginate() for m in page["stateMachines"]]
    assert machine_arn not in listed, "the deploy created what the stack should"
    full = _template()
    updated = _stack_deploy(cfn, stack=stack, body=full, update=True)
    machine_id = "".join(p[:1].upper() + p[1:] for p in f"{name}-v1".split("-"))
    process_id = machine_id[:-2]
    assert {f"{machine_id}StateMachine", f"{process_id}Role",
            f"{process_id}LogGroup", "StatusRule", "IntakeQueue"} <= updated

    described = sfn.describe_state_machine(stateMachineArn=machine_arn)
    group = f"/aws/vendedlogs/states/{prefix}-{name}"
    assert described["roleArn"] == f"arn:aws:iam::{ACCOUNT}:role/{prefix}-states-{name}"
    assert described["loggingConfiguration"] == {
        "level": "ERROR", "includeExecutionData": False,
        "destinations": [{"cloudWatchLogsLogGroup": {"logGroupArn": (
            f"arn:aws:logs:{settings.AWS_REGION}:{ACCOUNT}:log-group:{group}:*")}}],
    }
    groups = _client("logs").describe_log_groups(logGroupNamePrefix=group)["logGroups"]
    assert [(g["logGroupName"], g["retentionInDays"]) for g in groups] == [(group, 90)]
    document = _client("iam").get_role_policy(RoleName=f"{prefix}-states-{name}",
                                              PolicyName="state-machine")["PolicyDocument"]
    # moto keeps a stack role's inline policy as the text of a Python dict, not JSON.
    assert "'Sid': 'IntakeQueueSend'" in str(document)

    # An execution on the stack's state machine, answered through the inbox.
    worker = make_worker({"invoice-review": 3})
    execution, _ = process_start(name=name, input={"amount": 900, "supplier": "ACME"},
                                 business_key=unique("pay"))
    task = _intake_until_task()
    assert (task.execution_arn, task.stage) == (execution.execution_arn, "review")
    # The title's "$" went through Fn::Sub as the literal it is.
    assert task.title == "Pay $900 to ACME"
    api = APIClient()
    api.force_authenticate(worker)
    assert api.post(f"/api/inbox/tasks/{task.pk}/claim/", {}, format="json").status_code == 200
    done = api.post(f"/api/inbox/tasks/{task.pk}/complete/",
                    {"answer": {"decision": "approve"}}, format="json")
    assert done.status_code == 200, done.json()
    for outbox in Outbox.objects.filter(status=OutboxStatus.PENDING):
        assert callback_send(outbox_id=outbox.pk) == "sent"
    finished = execution_wait(execution_arn=execution.execution_arn)
    assert finished["status"] == "SUCCEEDED", finished.get("error")
    assert json.loads(finished["output"])["stages"]["review"]["answer"]["decision"] == \
        "approve"
    # The stack's rule hears the inbox's state machines and routes to the stack's queue.
    event = _status_event(execution_arn=execution.execution_arn)
    assert event["detail"]["status"] == "SUCCEEDED"

    token = token_decrypt(task.token_ciphertext)
    for text in (base, full, _template()):
        assert token not in text
