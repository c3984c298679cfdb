"""The emulator's CloudFormation makes state machines that run (emulator/cloudformation.py).

moto 5.2.5 alone puts a stack's state machine where the API (with ASL execution on) never
looks: the first test fails without the shim. It uses boto3 clients of its own, as a
program deploying a stack would.
"""

import json

import boto3
import pytest
from django.conf import settings

from processes.emulator import EmulatorError
from tests.sfn import execution_wait, unique

ROLE_ARN = "arn:aws:iam::123456789012:role/inbox-states"
_HOOKS = ("create_from_cloudformation_json", "update_from_cloudformation_json",
          "delete_from_cloudformation_json")


def _client(service: str):
    return boto3.client(service, endpoint_url=settings.AWS_ENDPOINT_URL,
                        region_name=settings.AWS_REGION, aws_access_key_id="testing",
                        aws_secret_access_key="testing")


def _template(*, name: str, result: str) -> str:
    definition = {"StartAt": "Say", "States": {"Say": {"Type": "Pass", "Result": {"said": result},
                                                       "End": True}}}
    return json.dumps({"AWSTemplateFormatVersion": "2010-09-09", "Resources": {"Machine": {
        "Type": "AWS::StepFunctions::StateMachine",
        "Properties": {
            "StateMachineName": name, "StateMachineType": "STANDARD", "RoleArn": ROLE_ARN,
            "DefinitionString": json.dumps(definition),
            "LoggingConfiguration": {"Level": "ERROR", "IncludeExecutionData": False,
                                     "Destinations": [{"CloudWatchLogsLogGroup": {
                                         "LogGroupArn": "arn:aws:logs:us-east-1:123456789012:"
                                                        "log-group:/x:*"}}]},
        },
    }}})


def _machines(sfn) -> list[dict]:
    """Every state machine, all pages: the session's other tests make hundreds."""
    return [machine for page in sfn.get_paginator("list_state_machines").paginate()
            for machine in page["stateMachines"]]


def _run(sfn, arn: str) -> dict:
    execution = sfn.start_execution(stateMachineArn=arn, name=unique("run"), input="{}")
    return json.loads(execution_wait(execution_arn=execution["executionArn"])["output"])


@pytest.mark.emulator
def test_a_stack_made_state_machine_runs_is_updated_and_deleted(emulator):
    cfn, sfn = _client("cloudformation"), _client("stepfunctions")
    stack, name = unique("shim-stack"), unique("shim-machine")
    cfn.create_stack(StackName=stack, TemplateBody=_template(name=name, result="first"))
    assert cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"] == "CREATE_COMPLETE"
    arn = next(m["stateMachineArn"] for m in _machines(sfn) if m["name"] == name)
    described = sfn.describe_state_machine(stateMachineArn=arn)
    assert described["loggingConfiguration"] == {
        "level": "ERROR", "includeExecutionData": False,
        "destinations": [{"cloudWatchLogsLogGroup": {
            "logGroupArn": "arn:aws:logs:us-east-1:123456789012:log-group:/x:*"}}]}
    assert _run(sfn, arn) == {"said": "first"}

    cfn.update_stack(StackName=stack, TemplateBody=_template(name=name, result="second"))
    assert _run(sfn, arn) == {"said": "second"}

    cfn.delete_stack(StackName=stack)
    assert name not in [m["name"] for m in _machines(sfn)]


@pytest.fixture
def state_machine_class(monkeypatch):
    """moto's StateMachine, its CloudFormation hooks put back as they were after the test."""
    from moto.stepfunctions.models import StateMachine

    for hook in _HOOKS:
        monkeypatch.setattr(StateMachine, hook, StateMachine.__dict__[hook])
    return StateMachine


def test_the_cloudformation_shim_is_idempotent(state_machine_class):
    from processes.emulator.cloudformation import cloudformation_state_machine_shim

    cloudformation_state_machine_shim()
    first = {hook: state_machine_class.__dict__[hook] for hook in _HOOKS}
    assert first["create_from_cloudformation_json"].__func__.__name__ == "create"
    cloudformation_state_machine_shim()
    assert {hook: state_machine_class.__dict__[hook] for hook in _HOOKS} == first


def test_the_cloudformation_shim_names_what_moved_in_moto(state_machine_class, monkeypatch):
    from processes.emulator.cloudformation import cloudformation_state_machine_shim

    monkeypatch.setattr("moto.stepfunctions.responses.get_backend", lambda arn: None)
    with pytest.raises(EmulatorError, match=r"get_backend\(account, region\) has changed"):
        cloudformation_state_machine_shim()
