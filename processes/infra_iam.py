"""Least-privilege IAM for the CloudFormation template (processes/infra.py).

Each process gets one role for its state machines: sqs:SendMessage on the intake queue,
lambda:InvokeFunction on the functions its versions name, states:StartExecution on the
children they start (with what ``.sync`` needs), and CloudWatch Logs delivery. The web,
worker and clock processes, and whoever records versions and starts executions (the
operator), each get a managed policy with exactly the calls processes/aws.py makes for
them (docs/OPERATIONS.md, "IAM permissions per process"). Resources are named wherever
AWS allows it; the two exceptions (states:ListStateMachines and the logs delivery
actions, which have no resource-level permissions) say so in their Sid.
"""

import json
import re
from typing import Any

from processes.infra_asl import Calls, InfraError

_SCOPE = "${AWS::Partition}:{service}:${AWS::Region}:${AWS::AccountId}:"
ARN = {
    "machine": "arn:" + _SCOPE.replace("{service}", "states") + "stateMachine:",
    "execution": "arn:" + _SCOPE.replace("{service}", "states") + "execution:",
    "log_group": "arn:" + _SCOPE.replace("{service}", "logs") + "log-group:",
    "function": "arn:" + _SCOPE.replace("{service}", "lambda") + "function:",
    "rule": "arn:" + _SCOPE.replace("{service}", "events") + "rule/",
    "bus": "arn:" + _SCOPE.replace("{service}", "events") + "event-bus/",
}
# Step Functions manages this rule itself to follow a .sync child execution.
SYNC_RULE = "StepFunctionsGetEventsForStepFunctionsExecutionRule"
LOGS_DELIVERY = ["logs:CreateLogDelivery", "logs:GetLogDelivery", "logs:UpdateLogDelivery",
                 "logs:DeleteLogDelivery", "logs:ListLogDeliveries", "logs:PutResourcePolicy",
                 "logs:DescribeResourcePolicies", "logs:DescribeLogGroups"]
# IAM's limits, in characters without whitespace.
MANAGED_POLICY_MAX = 6144
ROLE_INLINE_MAX = 10240
TRUST_POLICY_MAX = 2048
_PARTIAL_FUNCTION_ARN = re.compile(r"^\d{12}:function:")


def sub(text: str) -> dict[str, str]:
    """Return an Fn::Sub of text (names put in it never hold "${")."""
    return {"Fn::Sub": text}


def _arn(queue_id: str) -> dict[str, list[str]]:
    return {"Fn::GetAtt": [queue_id, "Arn"]}


def _statement(sid: str, actions: list[str], resources: Any) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources}


def _document(statements: list[dict[str, Any]]) -> dict[str, Any]:
    # A statement over no resource at all (no state machine yet) is left out.
    return {"Version": "2012-10-17",
            "Statement": [s for s in statements if s["Resource"] != []]}


def function_arn(function: str) -> Any:
    """Return the ARN a lambda:invoke FunctionName (a name, name:alias, partial or full ARN) is."""
    if function.startswith("arn:"):
        return function
    if _PARTIAL_FUNCTION_ARN.match(function):
        return sub("arn:${AWS::Partition}:lambda:${AWS::Region}:" + function)
    return sub(ARN["function"] + function)


def process_role(*, name: str, process: str, group: str, calls: list[Calls]) -> dict[str, Any]:
    """Return the IAM role of a process's state machines, allowing what calls need."""
    functions = sorted({f for c in calls for f in c.functions})
    children = sorted({child for c in calls for child in c.children})
    statements = []
    if any(c.intake for c in calls):
        statements.append(_statement("IntakeQueueSend", ["sqs:SendMessage"],
                                     _arn("IntakeQueue")))
    statements.append(_statement("LambdaInvoke", ["lambda:InvokeFunction"],
                                 [function_arn(f) for f in functions]))
    statements.append(_statement("ChildProcessesStart", ["states:StartExecution"],
                                 [sub(ARN["machine"] + child) for child in children]))
    if any(c.children_sync for c in calls):
        statements.append(_statement(
            "ChildProcessesFollow", ["states:DescribeExecution", "states:StopExecution"],
            [sub(ARN["execution"] + child + ":*") for child in children]))
        statements.append(_statement(
            "ChildProcessesSyncRule", ["events:PutTargets", "events:PutRule",
                                       "events:DescribeRule"], sub(ARN["rule"] + SYNC_RULE)))
    statements.append(_statement("LogsWriteOwnGroup", ["logs:CreateLogStream",
                                                       "logs:PutLogEvents"],
                                 sub(ARN["log_group"] + group + ":*")))
    statements.append(_statement("LogsDeliveryHasNoResourceLevelPermissions", LOGS_DELIVERY,
                                 "*"))
    return {"Type": "AWS::IAM::Role", "Properties": {
        "RoleName": name,
        "Description": f"Runs the state machines of process {process} (made by the inbox's "
                       "infra_template).",
        "AssumeRolePolicyDocument": {"Version": "2012-10-17", "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": "states.amazonaws.com"},
            "Action": "sts:AssumeRole",
            # Only this account's Step Functions, for this process's machines.
            "Condition": {
                "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
                "ArnLike": {"aws:SourceArn": sub(ARN["machine"] + f"{process}-v*")},
            },
        }]},
        "Policies": [{"PolicyName": "state-machine", "PolicyDocument": _document(statements)}],
    }}


def runtime_policies(*, config: Any, machines: set[str]) -> dict[str, dict[str, Any]]:
    """Return the managed policies of the web, worker and clock processes, by logical id."""
    names = sorted(machines)
    machine_arns = [sub(ARN["machine"] + name) for name in names]
    execution_arns = [sub(ARN["execution"] + name + ":*") for name in names]
    web = [
        _statement("ListStateMachinesHasNoResourceLevelPermissions",
                   ["states:ListStateMachines"], "*"),
        _statement("IntakeQueuesRead", ["sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
                   [_arn("IntakeQueue"), _arn("IntakeDeadLetterQueue")]),
        _statement("DeadLettersRedriveReceive", ["sqs:ReceiveMessage", "sqs:DeleteMessage"],
                   _arn("IntakeDeadLetterQueue")),
        _statement("DeadLettersRedriveSend", ["sqs:SendMessage"], _arn("IntakeQueue")),
    ]
    worker = [
        _statement("IntakeReceive", ["sqs:GetQueueUrl", "sqs:ReceiveMessage",
                                     "sqs:DeleteMessage"], _arn("IntakeQueue")),
        _statement("TaskCallbacks", ["states:SendTaskSuccess", "states:SendTaskFailure",
                                     "states:SendTaskHeartbeat"], machine_arns),
        # The history holds task tokens: the worker reads it (reconciliation, timelines),
        # the web never does.
        _statement("ExecutionsRead", ["states:DescribeExecution",
                                      "states:GetExecutionHistory"], execution_arns),
        _statement("ExecutionsListForOrphanCheck", ["states:ListExecutions"], machine_arns),
        # Migration (inbox.services.migration): start the newer version at the stage, stop
        # the execution left behind.
        _statement("ExecutionsStartForMigration", ["states:StartExecution"], machine_arns),
        _statement("ExecutionsStopForMigration", ["states:StopExecution"], execution_arns),
    ]
    if config.signals_bus:
        bus = config.signals_bus
        worker.append(_statement("ChangeSignalsPut", ["events:PutEvents"],
                                 bus if bus.startswith("arn:") else sub(ARN["bus"] + bus)))
    clock = [
        _statement("Heartbeats", ["states:SendTaskHeartbeat"], machine_arns),
        _statement("ExecutionsBackstop", ["states:DescribeExecution"], execution_arns),
        _statement("StatusReceive", ["sqs:GetQueueUrl", "sqs:ReceiveMessage",
                                     "sqs:DeleteMessage"], _arn("StatusQueue")),
    ]
    return {
        f"{role.capitalize()}Policy": {"Type": "AWS::IAM::ManagedPolicy", "Properties": {
            "ManagedPolicyName": f"{config.prefix}-{role}",
            "Description": f"The inbox's {role} processes (infra_template).",
            "PolicyDocument": _document(statements),
        }}
        for role, statements in (("web", web), ("worker", worker), ("clock", clock))
    }


def operator_policy(*, config: Any, machines: set[str]) -> dict[str, Any]:
    """Return the managed policy of whoever records versions and starts or stops executions."""
    names = sorted(machines)
    statements = [
        _statement("IntakeQueueRead", ["sqs:GetQueueUrl", "sqs:GetQueueAttributes"],
                   _arn("IntakeQueue")),
        _statement("ExecutionsStart", ["states:StartExecution"],
                   [sub(ARN["machine"] + name) for name in names]),
        _statement("ExecutionsDescribeAndStop", ["states:DescribeExecution",
                                                 "states:StopExecution"],
                   [sub(ARN["execution"] + name + ":*") for name in names]),
    ]
    return {"Type": "AWS::IAM::ManagedPolicy", "Properties": {
        "ManagedPolicyName": f"{config.prefix}-operator",
        "Description": "Records process versions, starts and stops their executions "
                       "(infra_template).",
        "PolicyDocument": _document(statements),
    }}


def policy_check(resource_id: str, resource: dict[str, Any]) -> None:
    """Raise InfraError if a role's or managed policy's documents pass IAM's size limits."""
    kind, properties = resource.get("Type"), resource.get("Properties", {})
    if kind == "AWS::IAM::ManagedPolicy":
        sizes = [("policy", properties["PolicyDocument"], MANAGED_POLICY_MAX)]
    elif kind == "AWS::IAM::Role":
        inline = [p["PolicyDocument"] for p in properties.get("Policies", [])]
        sizes = [("trust policy", properties["AssumeRolePolicyDocument"], TRUST_POLICY_MAX),
                 ("inline policies", inline, ROLE_INLINE_MAX)]
    else:
        return
    for what, document, limit in sizes:
        size = len(json.dumps(worst_case(document), separators=(",", ":")))
        if size > limit:
            raise InfraError(
                f"{resource_id}: its {what} may reach {size} characters once deployed, more "
                f"than IAM's {limit}: too many state machines or functions for one policy."
            )


# Upper bounds of what a pseudo parameter or reference becomes, to check limits at build.
_WORST = {"AWS::Partition": "aws-iso-b-xx", "AWS::Region": "xx-xxxxxxxxx-99",
          "AWS::AccountId": "123456789012", "AWS::StackName": "x" * 128}


def worst_case(value: Any) -> Any:
    """Return value with Fn::Sub, Ref and Fn::GetAtt replaced by their longest plausible text."""
    if isinstance(value, list):
        return [worst_case(item) for item in value]
    if not isinstance(value, dict):
        return value
    if "Fn::Sub" in value:
        return re.sub(r"\$\{([^}]*)\}", lambda m: _WORST.get(m[1], "x" * 80), value["Fn::Sub"])
    if "Ref" in value:
        return _WORST.get(value["Ref"], "x" * 128)
    if "Fn::GetAtt" in value:
        return "arn:aws-iso-b-xx:sqs:xx-xxxxxxxxx-99:123456789012:" + "x" * 80
    return {key: worst_case(item) for key, item in value.items()}
