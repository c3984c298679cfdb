"""Nested executions (states:startExecution.sync:2) in the local emulator, and its shim.

moto 5.2.5 runs them only with the nested-execution shim of processes/emulator/shims.py;
these tests fail without it (States.Runtime, cause 'StateMachineArn').
"""

import datetime
import importlib
import json
import socket

import pytest
from django.conf import settings
from moto.moto_api._internal.models import MotoAPIBackend

from processes import aws
from processes.emulator import EmulatorError
from processes.emulator.server import serve
from processes.emulator.shims import nested_execution_shim
from tests.sfn import execution_wait, task_message_wait, unique

ROLE_ARN = "arn:aws:iam::123456789012:role/inbox-states"
SYNC2 = "arn:aws:states:::states:startExecution.sync:2"
SYNC = "arn:aws:states:::states:startExecution.sync"
SFN_TASK_MODULE = (
    "moto.stepfunctions.parser.asl.component.state.exec.state_task.service."
    "state_task_service_sfn"
)


def _deploy(prefix: str, definition: dict) -> str:
    return aws.state_machine_create_or_update(
        name=unique(prefix), definition=definition, role_arn=ROLE_ARN
    )


def _execution_arn(*, state_machine_arn: str, name: str) -> str:
    """Return the ARN of the execution called name of the state machine (AWS's format)."""
    return state_machine_arn.replace(":stateMachine:", ":execution:", 1) + f":{name}"


def _parent(*, child_arn: str, resource: str = SYNC2, named: bool = False,
            catch: bool = False) -> dict:
    """Return a parent whose one Task runs the child and puts its result at $.child.

    named: the child's execution name comes from the parent's $.child_name.
    catch: States.TaskFailed is caught into $.failure and the parent ends in Succeed.
    """
    parameters: dict = {
        "StateMachineArn": child_arn,
        "Input": {
            "x.$": "$.x",
            "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID.$": "$$.Execution.Id",
        },
    }
    if named:
        parameters["Name.$"] = "$.child_name"
    task: dict = {
        "Type": "Task",
        "Resource": resource,
        "Parameters": parameters,
        "ResultPath": "$.child",
        "End": True,
    }
    states: dict = {"RunChild": task}
    if catch:
        task["Catch"] = [
            {"ErrorEquals": ["States.TaskFailed"], "ResultPath": "$.failure", "Next": "Caught"}
        ]
        states["Caught"] = {"Type": "Succeed"}
    return {"StartAt": "RunChild", "States": states}


def _pass_child() -> dict:
    return {
        "StartAt": "Enrich",
        "States": {
            "Enrich": {
                "Type": "Pass",
                "Result": "by the child",
                "ResultPath": "$.added",
                "Next": "Done",
            },
            "Done": {"Type": "Succeed"},
        },
    }


def _human_child() -> dict:
    """Return a child with one human stage: a message on the intake queue, then a wait."""
    return {
        "StartAt": "Review",
        "States": {
            "Review": {
                "Type": "Task",
                "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                "Parameters": {
                    "QueueUrl": aws.queue_url(name=settings.INBOX_INTAKE_QUEUE),
                    "MessageBody": {
                        "kind": "nested-emulator-test",
                        "taskToken.$": "$$.Task.Token",
                        "execution.$": "$$.Execution.Id",
                    },
                },
                "ResultPath": "$.answer",
                "TimeoutSeconds": 60,
                "End": True,
            }
        },
    }


def _is_iso_datetime(value: object) -> bool:
    if not isinstance(value, str):
        return False
    datetime.datetime.fromisoformat(value)
    return True


# Through the running emulator -------------------------------------------------------


@pytest.mark.emulator
def test_parent_gets_the_child_output_as_json_with_sync2(emulator):
    """.sync:2 waits for the child and returns DescribeExecution with parsed Output, as AWS."""
    child = _deploy("child", _pass_child())
    parent = _deploy("parent", _parent(child_arn=child))
    parent_execution = aws.execution_start(
        state_machine_arn=parent, name=unique("run"), input={"x": 7}
    )

    described = execution_wait(execution_arn=parent_execution)

    assert described["status"] == "SUCCEEDED", described.get("error")
    output = json.loads(described["output"])
    assert output["x"] == 7
    result = output["child"]
    assert result["Status"] == "SUCCEEDED"
    assert result["StateMachineArn"] == child
    assert result["ExecutionArn"].startswith(
        _execution_arn(state_machine_arn=child, name="")
    )
    assert result["Output"] == {
        "x": 7,
        "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID": parent_execution,
        "added": "by the child",
    }
    assert result["Input"] == {
        "x": 7,
        "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID": parent_execution,
    }
    assert _is_iso_datetime(result["StartDate"])
    assert _is_iso_datetime(result["StopDate"])


@pytest.mark.emulator
def test_sync_returns_the_child_output_as_a_json_string(emulator):
    """.sync (version 1) gives Input and Output as JSON strings, as AWS does."""
    child = _deploy("child", _pass_child())
    parent = _deploy("parent", _parent(child_arn=child, resource=SYNC))
    parent_execution = aws.execution_start(
        state_machine_arn=parent, name=unique("run"), input={"x": 1}
    )

    described = execution_wait(execution_arn=parent_execution)

    assert described["status"] == "SUCCEEDED", described.get("error")
    result = json.loads(described["output"])["child"]
    assert isinstance(result["Output"], str)
    assert json.loads(result["Output"])["added"] == "by the child"
    assert isinstance(result["Input"], str)


@pytest.mark.emulator
def test_unnamed_children_of_two_parent_runs_get_distinct_executions(emulator):
    """Without Name, each child gets a fresh name (moto alone would reuse "None" and clash)."""
    child = _deploy("child", _pass_child())
    parent = _deploy("parent", _parent(child_arn=child))
    runs = [
        aws.execution_start(state_machine_arn=parent, name=unique("run"), input={"x": 1})
        for _ in range(2)
    ]

    described = [execution_wait(execution_arn=run) for run in runs]

    assert [d["status"] for d in described] == ["SUCCEEDED", "SUCCEEDED"], [
        d.get("error") for d in described
    ]
    children = {json.loads(d["output"])["child"]["ExecutionArn"] for d in described}
    assert len(children) == 2
    assert not any(arn.endswith(":None") for arn in children)


@pytest.mark.emulator
def test_parent_waits_for_a_child_human_stage_and_gets_the_answer(emulator):
    """The parent stays RUNNING until a worker answers the child's task, then SUCCEEDS."""
    child = _deploy("child", _human_child())
    parent = _deploy("parent", _parent(child_arn=child, named=True))
    child_name = unique("child-run")
    child_execution = _execution_arn(state_machine_arn=child, name=child_name)
    parent_execution = aws.execution_start(
        state_machine_arn=parent, name=unique("run"), input={"x": 3, "child_name": child_name}
    )

    body = task_message_wait(execution_arn=child_execution, parent_arn=parent_execution)
    assert aws.execution_describe(execution_arn=parent_execution)["status"] == "RUNNING"
    assert aws.execution_describe(execution_arn=child_execution)["status"] == "RUNNING"
    aws.task_success(token=body["taskToken"], output={"decision": "approve"})
    described = execution_wait(execution_arn=parent_execution)

    assert described["status"] == "SUCCEEDED", described.get("error")
    result = json.loads(described["output"])["child"]
    assert result["ExecutionArn"] == child_execution
    assert result["Name"] == child_name
    assert result["Output"]["answer"] == {"decision": "approve"}
    assert result["Output"]["x"] == 3


@pytest.mark.emulator
def test_failed_child_fails_the_parent(emulator):
    """A child ending in Fail makes the parent's Task fail with States.TaskFailed."""
    child = _deploy(
        "child",
        {
            "StartAt": "Broken",
            "States": {"Broken": {"Type": "Fail", "Error": "Child.Broken", "Cause": "on purpose"}},
        },
    )
    parent = _deploy("parent", _parent(child_arn=child))
    parent_execution = aws.execution_start(
        state_machine_arn=parent, name=unique("run"), input={"x": 1}
    )

    described = execution_wait(execution_arn=parent_execution)

    assert described["status"] == "FAILED"
    assert described["error"] == "States.TaskFailed"
    # As on AWS, the cause is the child's DescribeExecution, as JSON.
    cause = json.loads(described["cause"])
    assert cause["Status"] == "FAILED"
    assert cause["Error"] == "Child.Broken"
    assert cause["Cause"] == "on purpose"


@pytest.mark.emulator
def test_parent_catches_a_child_whose_task_a_worker_rejected(emulator):
    """SendTaskFailure fails the child; the parent's Catch on States.TaskFailed takes over."""
    child = _deploy("child", _human_child())
    parent = _deploy("parent", _parent(child_arn=child, named=True, catch=True))
    child_name = unique("child-run")
    child_execution = _execution_arn(state_machine_arn=child, name=child_name)
    parent_execution = aws.execution_start(
        state_machine_arn=parent, name=unique("run"), input={"x": 5, "child_name": child_name}
    )

    body = task_message_wait(execution_arn=child_execution, parent_arn=parent_execution)
    aws.task_failure(
        token=body["taskToken"], error="HumanTask.Rejected", cause="the invoice is a duplicate"
    )
    described = execution_wait(execution_arn=parent_execution)

    assert described["status"] == "SUCCEEDED", described.get("error")
    assert aws.execution_describe(execution_arn=child_execution)["status"] == "FAILED"
    output = json.loads(described["output"])
    assert "child" not in output
    assert output["failure"]["Error"] == "States.TaskFailed"
    # moto drops SendTaskFailure's cause (a known difference), so only the error is checked.
    assert json.loads(output["failure"]["Cause"])["Error"] == "HumanTask.Rejected"


# The shim itself, in this process (it patches moto's classes; monkeypatch undoes it) ----


@pytest.fixture
def sfn_task(monkeypatch):
    """Return moto's StateTaskServiceSfn, its hooks restored after the test."""
    task_class = importlib.import_module(SFN_TASK_MODULE).StateTaskServiceSfn
    for name in ("_normalise_parameters", "_normalise_response"):
        monkeypatch.setattr(task_class, name, getattr(task_class, name))
    return task_class


def test_nested_execution_shim_is_idempotent(sfn_task):
    """A second application leaves the hooks as the first one made them."""
    nested_execution_shim()
    patched = (sfn_task._normalise_parameters, sfn_task._normalise_response)
    nested_execution_shim()

    assert (sfn_task._normalise_parameters, sfn_task._normalise_response) == patched
    response = {
        "executionArn": "arn:aws:states:us-east-1:123456789012:execution:sm:run",
        "startDate": datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC),
        "output": {"keepMe": {"lower": 1}},
        "outputDetails": {"included": True},
    }
    sfn_task._normalise_response(object.__new__(sfn_task), response)
    assert response == {
        "ExecutionArn": "arn:aws:states:us-east-1:123456789012:execution:sm:run",
        "StartDate": "2026-01-02T03:04:05+00:00",
        "Output": {"keepMe": {"lower": 1}},
        "OutputDetails": {"Included": True},
    }


def test_emulator_refuses_to_start_when_moto_internals_moved(sfn_task, monkeypatch):
    """serve raises EmulatorError before binding its port, rather than running unpatched."""
    # serve applies its other shim first; restore that one too.
    monkeypatch.setattr(MotoAPIBackend, "get_config", MotoAPIBackend.get_config)
    monkeypatch.delattr(importlib.import_module(SFN_TASK_MODULE), "StateTaskServiceSfn")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    def started_unpatched() -> None:
        # Ends serve at once instead of leaving it serving until the test times out.
        raise AssertionError("the emulator started without its nested-execution shim")

    with pytest.raises(EmulatorError, match="StateTaskServiceSfn"):
        serve(host="127.0.0.1", port=port, on_ready=started_unpatched)

    with socket.socket() as again:
        again.bind(("127.0.0.1", port))  # Still free: nothing was left listening.


def test_nested_execution_shim_names_a_missing_hook(monkeypatch):
    """A StateTaskServiceSfn without the hooks the shim wraps is an EmulatorError."""
    module = importlib.import_module(SFN_TASK_MODULE)
    monkeypatch.setattr(module, "StateTaskServiceSfn", type("StateTaskServiceSfn", (), {}))

    with pytest.raises(EmulatorError, match="_normalise_parameters"):
        nested_execution_shim()
