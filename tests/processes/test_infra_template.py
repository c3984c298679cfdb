"""The CloudFormation template: clean under cfn-lint, least privilege, no token, deterministic.

Most tests build the template from specs compiled for a fixed target (the compiler is a
pure function), so they need neither the emulator nor a database; the command and the
choice of versions go through the real deploy service. tests/processes/test_infra_stack.py
deploys the template to the emulator's CloudFormation and runs an execution on it.
"""

import datetime
import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cfnlint.api import ManualArgs, lint
from django.core.management import CommandError, call_command
from django.utils import timezone

from config.errors import ExternalServiceError
from inbox.tokens import token_decrypt
from processes.compiler import Target, compile_spec, state_machine_name
from processes.infra import InfraConfig, InfraError, Machine, template_build, template_render
from processes.infra_iam import LOGS_DELIVERY
from processes.models import Execution, ExecutionStatus
from processes.selectors import process_versions_live
from processes.services import process_deploy, process_start
from processes.spec import spec_parse
from tests.processes.lifecycle import parent_spec, succeed_spec, unique_name

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
TARGET = Target(
    intake_queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/inbox-intake",
    state_machine_arn_prefix="arn:aws:states:eu-west-1:123456789012:stateMachine:",
)
SCORING = """
process: scoring
version: 2
description: A human review, then a Lambda scores it; the title has a literal ${ in it.
stages:
  - id: review
    kind: human
    skill: invoice-review
    title: "Pay ${amount} to {supplier}"
    show: [amount, supplier]
    form: approve-reject
    timeouts: {offer: 60, work: 120, overall: 600}
  - id: score
    kind: automation
    function: score-invoice
    payload: {amount: $.amount}
  - id: done
    kind: succeed
"""
# Actions AWS gives no resource-level permission: the only ones allowed on "*".
WILDCARD_ACTIONS = {"states:ListStateMachines", *LOGS_DELIVERY}


# The ceiling (TimeoutSeconds) of each child compiled so far, by (name, version): a parent
# is compiled with its children's, as process_deploy compiles it with the deployed ones'.
CHILD_CEILINGS: dict[tuple[str, int], int] = {
    ("child", 1): compile_spec(spec_parse(succeed_spec(name="child"), source="test"),
                               target=TARGET)["TimeoutSeconds"]}


def _machine(text: str) -> Machine:
    spec = spec_parse(text, source="test")
    name = state_machine_name(spec.name, spec.version)
    return Machine(process=spec.name, version=spec.version, name=name,
                   arn=TARGET.state_machine_arn_prefix + name,
                   asl=compile_spec(spec, target=TARGET, children=CHILD_CEILINGS))


def _machines() -> list[Machine]:
    texts = [(SPECS / "invoice-approval.yaml").read_text(),
             (SPECS / "document-check.yaml").read_text(), SCORING,
             succeed_spec(name="child"), parent_spec(name="parent", child="child")]
    return [_machine(text) for text in texts]


def _config(**changes: Any) -> InfraConfig:
    return InfraConfig(**{**InfraConfig.from_settings().__dict__, "intake_queue": "inbox-intake",
                          **changes})


def _lint(text: str) -> list[str]:
    """Return cfn-lint's findings on text, informational checks included."""
    matches = lint(text, config=ManualArgs(include_checks=["I"], regions=["eu-west-1"]))
    return [f"{m.rule.id} {m.message} (line {m.linenumber})" for m in matches]


def _policies(template: dict) -> dict[str, dict]:
    """Return every IAM policy document of the template by where it is."""
    found = {}
    for resource_id, resource in template["Resources"].items():
        properties = resource["Properties"]
        if resource["Type"] == "AWS::IAM::ManagedPolicy":
            found[resource_id] = properties["PolicyDocument"]
        elif resource["Type"] == "AWS::IAM::Role":
            for policy in properties["Policies"]:
                found[f"{resource_id}.{policy['PolicyName']}"] = policy["PolicyDocument"]
    return found


def _listed(value: Any) -> list:
    return value if isinstance(value, list) else [value]


def test_the_template_is_clean_under_cfn_lint():
    template = template_build(machines=_machines(), config=_config(signals_bus="inbox-signals"))
    for fmt in ("yaml", "json"):
        findings = _lint(template_render(template, fmt=fmt))
        assert findings == [], f"cfn-lint on the {fmt} template:\n" + "\n".join(findings)


def test_cfn_lint_reports_a_broken_template():
    """The lint is no formality: a period CloudWatch refuses and a misspelt type are caught."""
    template = template_build(machines=_machines(), config=_config())
    template["Resources"]["InvoiceApprovalV1FailedAlarm"]["Properties"]["Period"] = 7
    template["Resources"]["IntakeQueue"]["Type"] = "AWS::SQS::Queeu"
    findings = _lint(template_render(template, fmt="yaml"))
    assert any(f.startswith("E3615") for f in findings), findings
    assert any("AWS::SQS::Queeu" in f for f in findings), findings


def test_state_machines_log_errors_without_execution_data_by_default():
    template = template_build(machines=_machines(), config=_config())
    machines = [r for r in template["Resources"].values()
                if r["Type"] == "AWS::StepFunctions::StateMachine"]
    assert len(machines) == 5
    for machine in machines:
        logging = machine["Properties"]["LoggingConfiguration"]
        assert logging["Level"] == "ERROR"
        assert logging["IncludeExecutionData"] is False
        assert machine["Properties"]["StateMachineType"] == "STANDARD"
    groups = [r["Properties"] for r in template["Resources"].values()
              if r["Type"] == "AWS::Logs::LogGroup"]
    assert {g["LogGroupName"] for g in groups} == {
        f"/aws/vendedlogs/states/inbox-{p}"
        for p in ("invoice-approval", "document-check", "scoring", "child", "parent")}
    assert {g["RetentionInDays"] for g in groups} == {90}


def test_a_setting_raises_the_log_level_but_never_includes_execution_data():
    template = template_build(machines=_machines(), config=_config(log_level="ALL",
                                                                   log_retention_days=14))
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::StepFunctions::StateMachine":
            logging = resource["Properties"]["LoggingConfiguration"]
            assert (logging["Level"], logging["IncludeExecutionData"]) == ("ALL", False)
        if resource["Type"] == "AWS::Logs::LogGroup":
            assert resource["Properties"]["RetentionInDays"] == 14


def test_no_statement_allows_every_resource_but_where_aws_requires_it():
    template = template_build(machines=_machines(), config=_config(signals_bus="inbox-signals"))
    policies = _policies(template)
    assert {"WebPolicy", "WorkerPolicy", "ClockPolicy", "OperatorPolicy",
            "InvoiceApprovalRole.state-machine"} <= set(policies)
    for where, document in policies.items():
        for statement in document["Statement"]:
            actions = set(_listed(statement["Action"]))
            assert not any(action.endswith("*") for action in actions), (where, statement)
            for resource in _listed(statement["Resource"]):
                if resource == "*":
                    assert actions <= WILDCARD_ACTIONS, (where, statement)
                    assert statement["Sid"].endswith("HasNoResourceLevelPermissions")
                elif isinstance(resource, dict) and "Fn::Sub" in resource:
                    arn = resource["Fn::Sub"]
                    # Only an execution's or a log stream's own name is left open.
                    assert "*" not in arn or arn.endswith(":*"), (where, arn)
                    assert ":execution:" in arn or ":log-group:" in arn or "*" not in arn


def test_the_web_never_reads_execution_histories():
    """Histories hold task tokens: only the worker may read them."""
    template = template_build(machines=_machines(), config=_config())
    policies = _policies(template)
    readers = {where for where, document in policies.items()
               for statement in document["Statement"]
               if "states:GetExecutionHistory" in _listed(statement["Action"])}
    assert readers == {"WorkerPolicy"}


def test_each_process_role_allows_what_its_definitions_call_and_nothing_more():
    template = template_build(machines=_machines(), config=_config())
    policies = _policies(template)

    def actions(where: str) -> dict[str, list]:
        return {s["Sid"]: _listed(s["Resource"]) for s in policies[where]["Statement"]}

    scoring = actions("ScoringRole.state-machine")
    assert scoring["LambdaInvoke"] == [{"Fn::Sub": "arn:${AWS::Partition}:lambda:${AWS::Region}"
                                                   ":${AWS::AccountId}:function:score-invoice"}]
    assert "ChildProcessesStart" not in scoring
    parent = actions("ParentRole.state-machine")
    assert parent["ChildProcessesStart"] == [{"Fn::Sub": "arn:${AWS::Partition}:states:"
                                                         "${AWS::Region}:${AWS::AccountId}:"
                                                         "stateMachine:child-v1"}]
    assert "ChildProcessesFollow" in parent and "ChildProcessesSyncRule" in parent
    assert "LambdaInvoke" not in parent
    child = actions("ChildRole.state-machine")
    # A process that succeeds at once sends nothing and starts nothing.
    assert set(child) == {"LogsWriteOwnGroup", "LogsDeliveryHasNoResourceLevelPermissions"}
    trust = template["Resources"]["ScoringRole"]["Properties"]["AssumeRolePolicyDocument"]
    assert trust["Statement"][0]["Principal"] == {"Service": "states.amazonaws.com"}
    assert trust["Statement"][0]["Condition"]["ArnLike"]["aws:SourceArn"]["Fn::Sub"].endswith(
        ":stateMachine:scoring-v*")


def test_definitions_name_the_stacks_queue_and_partition_and_keep_a_literal_dollar_brace():
    template = template_build(machines=_machines(), config=_config())
    resources = template["Resources"]
    text = resources["ScoringV2StateMachine"]["Properties"]["DefinitionString"]["Fn::Sub"]
    assert '"QueueUrl": "${IntakeQueue}"' in text
    assert "123456789012" not in text and "eu-west-1" not in text
    assert '"Resource": "arn:${AWS::Partition}:states:::lambda:invoke"' in text
    # Fn::Sub reads "${!" as a literal "${".
    assert "States.Format('Pay ${!}" in text
    parent = resources["ParentV1StateMachine"]["Properties"]["DefinitionString"]["Fn::Sub"]
    assert ('"StateMachineArn": "arn:${AWS::Partition}:states:${AWS::Region}:'
            '${AWS::AccountId}:stateMachine:child-v1"') in parent
    # What the stack would run is the deployed definition, only retargeted.
    for resource_id, machine in (("ScoringV2StateMachine", _machine(SCORING)),):
        resolved = (resources[resource_id]["Properties"]["DefinitionString"]["Fn::Sub"]
                    .replace("${IntakeQueue}", TARGET.intake_queue_url)
                    .replace("${AWS::Partition}", "aws").replace("${AWS::Region}", "eu-west-1")
                    .replace("${AWS::AccountId}", "123456789012").replace("${!", "${"))
        assert json.loads(resolved) == machine.asl


def test_the_status_rule_hears_only_the_inboxs_state_machines():
    template = template_build(machines=_machines(), config=_config())
    rule = template["Resources"]["StatusRule"]["Properties"]
    assert rule["State"] == "ENABLED" and rule["EventBusName"] == "default"
    pattern = rule["EventPattern"]
    assert pattern["detail-type"] == ["Step Functions Execution Status Change"]
    assert pattern["detail"]["status"] == ["SUCCEEDED", "FAILED", "TIMED_OUT", "ABORTED"]
    prefixes = [p["prefix"]["Fn::Sub"].rsplit(":", 1)[1]
                for p in pattern["detail"]["stateMachineArn"]]
    assert prefixes == ["child-v", "document-check-v", "invoice-approval-v", "parent-v",
                        "scoring-v"]
    statement = template["Resources"]["StatusQueuePolicy"]["Properties"]["PolicyDocument"][
        "Statement"][0]
    assert statement["Principal"] == {"Service": "events.amazonaws.com"}
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": {
        "Fn::GetAtt": ["StatusRule", "Arn"]}}}


def test_queues_redrive_after_the_configured_receives_and_dead_letters_alarm():
    template = template_build(machines=_machines(), config=_config(max_receives=3))
    resources = template["Resources"]
    intake = resources["IntakeQueue"]["Properties"]
    assert intake["QueueName"] == "inbox-intake"
    assert intake["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": ["IntakeDeadLetterQueue", "Arn"]},
        "maxReceiveCount": 3}
    alarm = resources["IntakeDeadLetterQueueAlarm"]["Properties"]
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Threshold"],
            alarm["ComparisonOperator"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible", 0,
                                             "GreaterThanThreshold")
    for metric, suffix in (("ExecutionsFailed", "FailedAlarm"),
                           ("ExecutionsTimedOut", "TimedOutAlarm")):
        alarm = resources[f"InvoiceApprovalV1{suffix}"]["Properties"]
        assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/States", metric)
        assert alarm["Dimensions"] == [{"Name": "StateMachineArn",
                                        "Value": {"Ref": "InvoiceApprovalV1StateMachine"}}]
        assert alarm["AlarmActions"] == [{"Ref": "AlarmTopic"}]
    outputs = template["Outputs"]
    assert {"IntakeQueueUrl", "StatusQueueUrl", "InvoiceApprovalV1StateMachineArn"} <= set(outputs)


def test_the_same_versions_and_settings_give_the_same_text_in_any_order():
    machines = _machines()
    first = template_render(template_build(machines=machines, config=_config()), fmt="yaml")
    second = template_render(template_build(machines=machines[::-1], config=_config()),
                             fmt="yaml")
    assert first == second
    as_json = template_render(template_build(machines=machines, config=_config()), fmt="json")
    assert yaml.safe_load(first) == json.loads(as_json)
    # The definitions read one key a line, so a change shows as a small diff.
    assert "\n      DefinitionString:\n        Fn::Sub: |-\n          {\n" in first


def test_a_definition_calling_what_the_template_cannot_grant_is_refused():
    machine = _machine(succeed_spec(name="odd"))
    machine.asl["States"]["put"] = {"Type": "Task", "Resource": "arn:aws:states:::dynamodb:putItem",
                                    "End": True}
    with pytest.raises(InfraError, match=r"odd-v1: States.put: its Resource .*dynamodb:putItem"):
        template_build(machines=[machine], config=_config())


def test_a_definition_sending_to_another_queue_is_refused():
    with pytest.raises(InfraError, match="not to the intake queue 'elsewhere'"):
        template_build(machines=_machines(), config=_config(intake_queue="elsewhere"))


def test_a_child_left_out_of_the_template_is_refused():
    with pytest.raises(InfraError, match="starts child-v1, which is not in the template"):
        template_build(machines=[_machine(parent_spec(name="parent", child="child"))],
                       config=_config())


def test_without_versions_the_template_has_the_queues_and_a_disabled_rule():
    template = template_build(machines=[], config=_config())
    assert template["Resources"]["StatusRule"]["Properties"]["State"] == "DISABLED"
    assert not [r for r in template["Resources"].values()
                if r["Type"] == "AWS::StepFunctions::StateMachine"]
    assert _lint(template_render(template, fmt="yaml")) == []


# The command and the versions it takes (the deploy service, on the emulator) -------------


@pytest.fixture
def recorded(private_intake, settings):
    """Deploys only record versions: the stack would create their state machines."""
    settings.INBOX_STATE_MACHINES_FROM_TEMPLATE = True


@pytest.mark.emulator
@pytest.mark.django_db
def test_versions_that_can_still_run_are_in_the_template(recorded):
    name = unique_name("live")
    old, _ = process_deploy(text=succeed_spec(name=name, version=1), source="v1")
    process_deploy(text=succeed_spec(name=name, version=2), source="v2")
    child, _ = process_deploy(text=succeed_spec(name=f"{name}-child"), source="child")
    process_deploy(text=parent_spec(name=f"{name}-parent", child=f"{name}-child"),
                   source="parent")
    now = timezone.now()

    def live() -> list[str]:
        return [v.state_machine_name for v in process_versions_live(now=now)]

    # v1 was superseded and never ran; the child runs under its parent.
    assert live() == [f"{name}-v2", f"{name}-child-v1", f"{name}-parent-v1"]
    execution = Execution.objects.create(
        process=old.process, version=old, business_key="k", name="k",
        execution_arn=old.state_machine_arn.replace(":stateMachine:", ":execution:") + ":k",
        started_at=now - datetime.timedelta(days=300), status=ExecutionStatus.SUCCEEDED)
    assert f"{name}-v1" in live(), "an execution started 300 days ago may still run"
    Execution.objects.filter(pk=execution.pk).update(started_at=now - datetime.timedelta(days=400))
    assert f"{name}-v1" not in live(), "no execution runs longer than a year"
    Execution.objects.filter(pk=execution.pk).update(status=ExecutionStatus.RUNNING)
    assert f"{name}-v1" in live(), "its record says it still runs"
    assert child.state_machine_arn.endswith(f":stateMachine:{name}-child-v1")


@pytest.mark.emulator
@pytest.mark.django_db
def test_a_recorded_version_cannot_start_before_the_stack_creates_its_machine(recorded):
    """A deploy in template mode creates nothing; starting then says what to deploy."""
    name = unique_name("early")
    version, created = process_deploy(text=succeed_spec(name=name), source="spec")
    assert created and version.state_machine_arn.endswith(f":stateMachine:{name}-v1")
    assert process_deploy(text=succeed_spec(name=name), source="spec") == (version, False)
    with pytest.raises(ExternalServiceError, match=r"manage\.py infra_template"):
        process_start(name=name, input={}, business_key="k-1")


@pytest.mark.emulator
@pytest.mark.django_db
def test_the_command_writes_the_template_and_says_what_is_in_it(recorded, tmp_path):
    name = unique_name("cmd")
    process_deploy(text=succeed_spec(name=name), source="spec")
    out, err = io.StringIO(), io.StringIO()
    call_command("infra_template", stdout=out, stderr=err)
    template = yaml.safe_load(out.getvalue())
    assert template["Resources"][f"{_id(name)}V1StateMachine"]["Properties"][
        "StateMachineName"] == f"{name}-v1"
    assert f"1 state machines ({name}-v1)" in err.getvalue()
    assert "INBOX_STATE_MACHINES_FROM_TEMPLATE" not in err.getvalue()
    target = tmp_path / "inbox.json"
    call_command("infra_template", "--output", str(target), stdout=out, stderr=err)
    assert json.loads(target.read_text()) == template


@pytest.mark.emulator
@pytest.mark.django_db
def test_the_command_refuses_with_the_reason_and_writes_nothing(recorded, settings, tmp_path):
    """A version deployed with other queue settings cannot be retargeted: nothing is written."""
    process_deploy(text=SCORING.replace("process: scoring", f"process: {unique_name('cmd')}"),
                   source="spec")
    settings.INBOX_INTAKE_QUEUE = "another-queue"
    target = tmp_path / "inbox.yaml"
    with pytest.raises(CommandError, match=r"No template written: .*not to the intake queue "
                                           r"'another-queue'"):
        call_command("infra_template", "--output", str(target), stderr=io.StringIO())
    assert not target.exists()


@pytest.mark.emulator
@pytest.mark.django_db
def test_the_template_holds_no_task_token_and_no_secret(recorded, settings, make_task):
    """Tokens in the inbox and every secret of the settings stay out of the template."""
    process_deploy(text=SCORING.replace("process: scoring", f"process: {unique_name('tok')}"),
                   source="spec")
    task = make_task()
    settings.INBOX_METRICS_TOKEN = "m" * 40
    out = io.StringIO()
    call_command("infra_template", "--format", "json", stdout=out, stderr=io.StringIO())
    text = out.getvalue()
    secrets = [token_decrypt(task.token_ciphertext), settings.SECRET_KEY,
               settings.INBOX_TOKEN_DIGEST_KEY, settings.INBOX_METRICS_TOKEN,
               *settings.INBOX_TOKEN_KEYS]
    password = settings.DATABASES["default"].get("PASSWORD")
    secrets += [password] if password else []
    assert all(secret and secret not in text for secret in secrets)
    # The definitions hold the path of the token Step Functions puts in, never a value.
    assert text.count('\\"taskToken.$\\": \\"$$.Task.Token\\"') == 1
    for resource in json.loads(text)["Resources"].values():
        if resource["Type"] == "AWS::StepFunctions::StateMachine":
            assert resource["Properties"]["LoggingConfiguration"]["IncludeExecutionData"] is False


def _id(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("-"))
