"""The inbox's AWS resources as one CloudFormation template, from deployed versions and settings.

``template_build`` is a pure function: the same versions and settings give the same
template, byte for byte once rendered, so a release's diff shows exactly what changes in
AWS. It holds the intake queue and its dead-letter queue, the execution-status rule with
its queue (and dead-letter queue) and queue policy, one role and log group per process,
one Standard state machine per version with its logging and its ExecutionsFailed and
ExecutionsTimedOut alarms, the dead-letter depth alarms and their SNS topic, and the
managed policies of the web, worker, clock and operator processes (processes/infra_iam.py).
State machines log at INBOX_STATES_LOG_LEVEL (ERROR) and never their execution data: a
task token is in it. manage.py infra_template writes it; docs/OPERATIONS.md deploys it.
"""

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

import yaml
from django.conf import settings

from processes import aws
from processes.infra_asl import (
    INTAKE_SENTINEL,
    MACHINE_PREFIX_SENTINEL,
    PARTITION_SENTINEL,
    SENTINELS,
    Calls,
    InfraError,
    Machine,
    machine_retargeted,
)
from processes.infra_iam import (
    ARN,
    operator_policy,
    policy_check,
    process_role,
    runtime_policies,
    sub,
    worst_case,
)
from processes.states_logging import log_group_name

__all__ = ["InfraConfig", "InfraError", "Machine", "template_build", "template_render"]

# CloudFormation's own limits: past them a deploy fails, so the template is refused first.
MAX_RESOURCES = 500
MAX_OUTPUTS = 200
# EventBridge's default quota for an event pattern, in characters.
MAX_EVENT_PATTERN = 2048
# SQS keeps an intake message 4 days (its default, said out loud).
INTAKE_RETENTION_SECONDS = 4 * 24 * 3600
ALARM_PERIOD_SECONDS = 60
DLQ_ALARM_PERIOD_SECONDS = 300


@dataclass(frozen=True)
class InfraConfig:
    """The settings the template is made from."""

    prefix: str
    intake_queue: str
    intake_dlq: str
    status_queue: str
    status_dlq: str
    status_rule: str
    max_receives: int
    log_level: str
    log_retention_days: int
    signals_bus: str

    @classmethod
    def from_settings(cls) -> "InfraConfig":
        return cls(
            prefix=settings.INBOX_INFRA_PREFIX,
            intake_queue=settings.INBOX_INTAKE_QUEUE,
            intake_dlq=settings.INBOX_INTAKE_DLQ,
            status_queue=settings.INBOX_STATUS_QUEUE,
            status_dlq=settings.INBOX_STATUS_DLQ,
            status_rule=settings.INBOX_STATUS_RULE,
            max_receives=settings.INBOX_INTAKE_MAX_RECEIVES,
            log_level=settings.INBOX_STATES_LOG_LEVEL,
            log_retention_days=settings.INBOX_STATES_LOG_RETENTION_DAYS,
            signals_bus=settings.INBOX_SIGNALS_BUS,
        )


def logical_id(name: str) -> str:
    """Return a CloudFormation logical id for a name: "invoice-approval-v1" -> InvoiceApprovalV1."""
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", name)
                   if part)


def bounded(name: str, limit: int) -> str:
    """Return name, or, when longer than limit, its start and a digest of the whole."""
    if len(name) <= limit:
        return name
    return f"{name[:limit - 9]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def template_build(*, machines: list[Machine], config: InfraConfig) -> dict[str, Any]:
    """Return the CloudFormation template (a dict) for machines and config.

    machines: the deployed versions to run, any order (the template sorts them). Raise
    InfraError when a definition calls what the template cannot grant, names collide, or
    the template would pass a CloudFormation, IAM or EventBridge limit.
    """
    machines = sorted(machines, key=lambda m: (m.process, m.version))
    known = {machine.name for machine in machines}
    if len(known) != len(machines):
        raise InfraError("Two deployed versions have the same state machine name.")
    resources: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    _queues(resources, outputs, config=config, machines=machines)
    _alarm_topic(resources, outputs, config=config)

    processes: dict[str, list[tuple[Machine, dict[str, Any], Calls]]] = {}
    for machine in machines:
        asl, calls = machine_retargeted(machine, intake_queue=config.intake_queue, known=known)
        processes.setdefault(machine.process, []).append((machine, asl, calls))
    for process, versions in processes.items():
        process_id = logical_id(process)
        role_id, group_id = f"{process_id}Role", f"{process_id}LogGroup"
        group = log_group_name(prefix=config.prefix, process=process)
        resources[group_id] = {
            "Type": "AWS::Logs::LogGroup",
            # The logs of failed executions outlive the stack, and a replaced group.
            "DeletionPolicy": "Retain",
            "UpdateReplacePolicy": "Retain",
            "Properties": {"LogGroupName": group,
                           "RetentionInDays": config.log_retention_days},
        }
        resources[role_id] = process_role(
            name=bounded(f"{config.prefix}-states-{process}", 64), process=process,
            group=group, calls=[calls for _m, _a, calls in versions],
        )
        for machine, asl, _calls in versions:
            _state_machine(resources, outputs, machine=machine, asl=asl, role_id=role_id,
                           group_id=group_id, config=config)

    for policy_id, policy in runtime_policies(config=config, machines=known).items():
        resources[policy_id] = policy
        outputs[f"{policy_id}Arn"] = _output(f"The {policy_id[:-6].lower()} processes' "
                                             "managed policy: attach it to their role.",
                                             {"Ref": policy_id}, f"{policy_id}Arn")
    resources["OperatorPolicy"] = operator_policy(config=config, machines=known)
    outputs["OperatorPolicyArn"] = _output(
        "For whoever records versions and starts or stops executions (process_deploy, "
        "process_start, the web if admins use the REST API for it).",
        {"Ref": "OperatorPolicy"}, "OperatorPolicyArn")
    for policy_id, resource in resources.items():
        policy_check(policy_id, resource)
    _ids_check(resources)
    if len(resources) > MAX_RESOURCES or len(outputs) > MAX_OUTPUTS:
        raise InfraError(
            f"The template would have {len(resources)} resources and {len(outputs)} outputs; "
            f"CloudFormation allows {MAX_RESOURCES} and {MAX_OUTPUTS} ({len(machines)} state "
            "machines: each brings 3 resources and an output)."
        )
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": _description(machines=machines),
        "Resources": resources,
        "Outputs": outputs,
    }


def _description(*, machines: list[Machine]) -> str:
    return (
        f"The human-task inbox: intake and execution-status queues, {len(machines)} state "
        "machines with their roles, log groups and alarms, and the web, worker, clock and "
        "operator policies. Made by manage.py infra_template from the deployed process "
        "versions and the settings: change those, not this. Resource * appears only where "
        "AWS offers no resource-level permission (states:ListStateMachines for the web; "
        "the CloudWatch Logs delivery actions of each state machine role); each such "
        "statement's Sid says so."
    )


def _queues(resources: dict, outputs: dict, *, config: InfraConfig,
            machines: list[Machine]) -> None:
    for queue_id, dlq_id, name, dlq, what, action in (
            ("IntakeQueue", "IntakeDeadLetterQueue", config.intake_queue, config.intake_dlq,
             "intake", "read why on /team/intake/, fix the cause and redrive"),
            ("StatusQueue", "StatusDeadLetterQueue", config.status_queue, config.status_dlq,
             "execution-status", "the clock process could not handle these status events: "
             "read its log; the DescribeExecution backstop still closes their tasks")):
        resources[dlq_id] = {"Type": "AWS::SQS::Queue", **_TRANSIENT, "Properties": {
            "QueueName": dlq,
            "MessageRetentionPeriod": aws.DLQ_RETENTION_SECONDS,
            "SqsManagedSseEnabled": True,
        }}
        resources[queue_id] = {"Type": "AWS::SQS::Queue", **_TRANSIENT, "Properties": {
            "QueueName": name,
            "VisibilityTimeout": aws.INTAKE_VISIBILITY_TIMEOUT,
            "ReceiveMessageWaitTimeSeconds": aws.INTAKE_WAIT_SECONDS,
            "MessageRetentionPeriod": INTAKE_RETENTION_SECONDS,
            "RedrivePolicy": {"deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
                              "maxReceiveCount": config.max_receives},
            "SqsManagedSseEnabled": True,
        }}
        resources[f"{dlq_id}Alarm"] = {"Type": "AWS::CloudWatch::Alarm", "Properties": {
            "AlarmName": f"{config.prefix}-{what}-dead-letters",
            "AlarmDescription": f"Messages wait in the {what} dead-letter queue {dlq}: "
                                f"{action} (docs/OPERATIONS.md).",
            "Namespace": "AWS/SQS",
            "MetricName": "ApproximateNumberOfMessagesVisible",
            "Dimensions": [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_id, "QueueName"]}}],
            **_alarm_threshold(statistic="Maximum", period=DLQ_ALARM_PERIOD_SECONDS),
        }}
        for output_id, what_url, ref in ((f"{queue_id}Url", f"The {what} queue's URL.", queue_id),
                                         (f"{dlq_id}Url", f"The {what} dead-letter queue's URL.",
                                          dlq_id)):
            outputs[output_id] = _output(what_url, {"Ref": ref}, output_id)

    pattern: dict[str, Any] = {
        "source": [aws.STATUS_CHANGE_SOURCE],
        "detail-type": [aws.STATUS_CHANGE_DETAIL_TYPE],
        "detail": {"status": list(aws.EXECUTION_ENDED)},
    }
    processes = sorted({machine.process for machine in machines})
    if processes:
        pattern["detail"]["stateMachineArn"] = [
            {"prefix": sub(ARN["machine"] + f"{process}-v")} for process in processes]
        if _worst_case_length(pattern) > MAX_EVENT_PATTERN:
            # Too many processes to list: every machine of the account, whose events the
            # clock ignores when no task of the inbox waits on them.
            pattern["detail"]["stateMachineArn"] = [{"prefix": sub(ARN["machine"])}]
    resources["StatusRule"] = {"Type": "AWS::Events::Rule", "Properties": {
        "Name": config.status_rule,
        "Description": "Ended executions of the inbox's state machines, for the inbox",
        "EventBusName": "default",
        "EventPattern": pattern,
        # Without a state machine there is nothing to hear of.
        "State": "ENABLED" if processes else "DISABLED",
        "Targets": [{"Id": "inbox-status-queue", "Arn": {"Fn::GetAtt": ["StatusQueue", "Arn"]}}],
    }}
    resources["StatusQueuePolicy"] = {"Type": "AWS::SQS::QueuePolicy", "Properties": {
        "Queues": [{"Ref": "StatusQueue"}],
        "PolicyDocument": {"Version": "2012-10-17", "Statement": [{
            "Sid": "ExecutionStatusFromTheRuleOnly",
            "Effect": "Allow",
            "Principal": {"Service": "events.amazonaws.com"},
            "Action": "sqs:SendMessage",
            "Resource": {"Fn::GetAtt": ["StatusQueue", "Arn"]},
            "Condition": {"ArnEquals": {"aws:SourceArn": {"Fn::GetAtt": ["StatusRule", "Arn"]}}},
        }]},
    }}


# A queue holds messages on their way for at most days: deleting or replacing the stack
# deletes it (said out loud, as CloudFormation advises for every stateful resource).
_TRANSIENT = {"DeletionPolicy": "Delete", "UpdateReplacePolicy": "Delete"}


def _alarm_topic(resources: dict, outputs: dict, *, config: InfraConfig) -> None:
    resources["AlarmTopic"] = {"Type": "AWS::SNS::Topic", "Properties": {
        "TopicName": f"{config.prefix}-alarms",
        "DisplayName": "Inbox alarms",
    }}
    outputs["AlarmTopicArn"] = _output(
        "Every alarm of the template notifies this topic: subscribe your on-call to it.",
        {"Ref": "AlarmTopic"}, "AlarmTopicArn")


def _alarm_threshold(*, statistic: str, period: int) -> dict[str, Any]:
    """Return an alarm's condition: above zero in one period, missing data is not a breach."""
    return {
        "Statistic": statistic,
        "Period": period,
        "EvaluationPeriods": 1,
        "Threshold": 0,
        "ComparisonOperator": "GreaterThanThreshold",
        "TreatMissingData": "notBreaching",
        "AlarmActions": [{"Ref": "AlarmTopic"}],
        "OKActions": [{"Ref": "AlarmTopic"}],
    }


def _state_machine(resources: dict, outputs: dict, *, machine: Machine, asl: dict[str, Any],
                   role_id: str, group_id: str, config: InfraConfig) -> None:
    machine_id = logical_id(machine.name)
    resources[f"{machine_id}StateMachine"] = {"Type": "AWS::StepFunctions::StateMachine",
                                              "Properties": {
        "StateMachineName": machine.name,
        "StateMachineType": "STANDARD",
        "RoleArn": {"Fn::GetAtt": [role_id, "Arn"]},
        "DefinitionString": definition_string(asl),
        "LoggingConfiguration": {
            "Level": config.log_level,
            # Execution data holds every human stage's task token (TaskScheduled parameters).
            "IncludeExecutionData": False,
            "Destinations": [{"CloudWatchLogsLogGroup": {"LogGroupArn": {
                "Fn::Sub": ARN["log_group"] + "${" + group_id + "}:*"}}}],
        },
    }}
    group = log_group_name(prefix=config.prefix, process=machine.process)
    for suffix, metric, what in (("FailedAlarm", "ExecutionsFailed", "failed"),
                                 ("TimedOutAlarm", "ExecutionsTimedOut", "timed-out")):
        resources[f"{machine_id}{suffix}"] = {"Type": "AWS::CloudWatch::Alarm", "Properties": {
            "AlarmName": f"{config.prefix}-{machine.name}-executions-{what}",
            "AlarmDescription": f"Executions of {machine.process} v{machine.version} "
                                f"{what.replace('-', ' ')}: see their history in the Step "
                                f"Functions console and the log group {group}.",
            "Namespace": "AWS/States",
            "MetricName": metric,
            "Dimensions": [{"Name": "StateMachineArn",
                            "Value": {"Ref": f"{machine_id}StateMachine"}}],
            **_alarm_threshold(statistic="Sum", period=ALARM_PERIOD_SECONDS),
        }}
    outputs[f"{machine_id}StateMachineArn"] = _output(
        f"The state machine of {machine.process} v{machine.version}.",
        {"Ref": f"{machine_id}StateMachine"}, f"{machine_id}StateMachineArn")


def definition_string(asl: dict[str, Any]) -> str | dict[str, str]:
    """Return a retargeted definition as DefinitionString: indented JSON, one key a line.

    An Fn::Sub when it names the stack's queue, partition or machines (a literal "${" is
    then written "${!"), else the plain text. Keys are sorted: PostgreSQL's jsonb does not
    keep the compiled order, and the text must be the same from any database.
    """
    text = json.dumps(asl, indent=2, sort_keys=True, ensure_ascii=False)
    if not any(sentinel in text for sentinel in SENTINELS):
        return text
    return sub(text.replace("${", "${!")
               .replace(INTAKE_SENTINEL, "${IntakeQueue}")
               .replace(MACHINE_PREFIX_SENTINEL, ARN["machine"])
               .replace(PARTITION_SENTINEL, "${AWS::Partition}"))


def _output(description: str, value: Any, export: str) -> dict[str, Any]:
    return {"Description": description, "Value": value,
            "Export": {"Name": {"Fn::Sub": "${AWS::StackName}-" + export}}}


def _ids_check(resources: dict[str, Any]) -> None:
    """Raise InfraError if two logical ids differ only in case (two names gave one id).

    Process names are at most 64 characters, so an id stays far below CloudFormation's 255.
    """
    seen: dict[str, str] = {}
    for resource_id in resources:
        other = seen.setdefault(resource_id.lower(), resource_id)
        if other != resource_id:
            raise InfraError(
                f"Two process names give the template ids {other} and {resource_id}: rename "
                "one process (names differing only by dashes before digits collide)."
            )


def _worst_case_length(value: Any) -> int:
    """Return the length of value as compact JSON, its references at their longest."""
    return len(json.dumps(worst_case(value), separators=(",", ":")))


class _Dumper(yaml.SafeDumper):
    """YAML without aliases (CloudFormation refuses them), multi-line text as blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def template_render(template: dict[str, Any], *, fmt: str) -> str:
    """Return template as CloudFormation YAML (fmt "yaml") or JSON (fmt "json") text."""
    if fmt == "json":
        return json.dumps(template, indent=2, ensure_ascii=False) + "\n"
    if fmt == "yaml":
        return yaml.dump(template, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                         width=100, default_flow_style=False)
    raise InfraError(f"Unknown template format {fmt!r}: use json or yaml.")
