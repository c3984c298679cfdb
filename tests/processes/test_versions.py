"""Deploying process versions: immutable, only going up, children first; the deploy command."""

import hashlib
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from config.errors import Conflict
from processes import aws
from processes.compiler import state_machine_name
from processes.models import Execution, ExecutionStatus, Process, ProcessVersion
from processes.services import (
    execution_refresh,
    process_deploy,
    process_start,
    target_current,
)
from processes.spec import SpecError
from tests.concurrency import race
from tests.processes.lifecycle import (
    parent_spec,
    status_of,
    succeed_spec,
    unique_name,
    wait_for,
    wait_spec,
)

pytestmark = pytest.mark.django_db


def _state_machine_runs(arn: str) -> bool:
    """Start an execution on arn and return whether it succeeds (the machine exists)."""
    execution_arn = aws.execution_start(
        state_machine_arn=arn, name=unique_name("probe"), input={"probe": True}
    )
    wait_for(
        lambda: aws.execution_describe(execution_arn=execution_arn)["status"] != "RUNNING",
        what="the probe execution finishing",
    )
    return aws.execution_describe(execution_arn=execution_arn)["status"] == "SUCCEEDED"


# target_current ------------------------------------------------------------------------


@pytest.mark.emulator
def test_target_is_derived_from_the_intake_queue(emulator):
    """The queue URL and the state machine ARN prefix come from the intake queue."""
    target = target_current()

    assert target.intake_queue_url.endswith("/inbox-intake")
    assert target.state_machine_arn_prefix == (
        "arn:aws:states:us-east-1:123456789012:stateMachine:"
    )


# process_deploy ------------------------------------------------------------------------


@pytest.mark.emulator
def test_deploy_creates_a_version_and_a_state_machine(emulator, make_user):
    """The row holds spec, hash, ASL and ARN; the state machine runs in Step Functions."""
    admin = make_user()
    name = unique_name()
    text = succeed_spec(name=name, description="A tiny process.")

    version, created = process_deploy(text=text, source="tiny.yaml", user=admin)

    assert created is True
    assert version.process.name == name
    assert version.version == 1
    assert version.description == "A tiny process."
    assert version.spec_text == text
    assert version.spec_sha256 == hashlib.sha256(text.encode()).hexdigest()
    assert version.asl["StartAt"] == "done"
    assert version.state_machine_name == state_machine_name(name, 1) == f"{name}-v1"
    assert version.state_machine_arn == (
        f"arn:aws:states:us-east-1:123456789012:stateMachine:{name}-v1"
    )
    assert version.deployed_by == admin
    assert _state_machine_runs(version.state_machine_arn)


@pytest.mark.emulator
def test_redeploying_the_same_text_is_a_no_op(emulator):
    """The second deploy returns the same row, unchanged, and creates nothing."""
    text = succeed_spec(name=unique_name())
    first, _ = process_deploy(text=text, source="a.yaml")

    again, created = process_deploy(text=text, source="elsewhere/a.yaml")

    assert created is False
    assert again.pk == first.pk
    assert again.deployed_at == first.deployed_at
    assert again.asl == first.asl
    assert ProcessVersion.objects.filter(process__name=first.process.name).count() == 1


@pytest.mark.emulator
def test_redeploy_recreates_a_state_machine_the_emulator_lost(emulator):
    """After a restart the emulator has no state machines; an unchanged redeploy restores it.

    The restart is imitated by deleting the state machine through the project's client.
    """
    text = succeed_spec(name=unique_name())
    version, _ = process_deploy(text=text, source="a.yaml")
    aws.client(service="stepfunctions").delete_state_machine(
        stateMachineArn=version.state_machine_arn
    )

    again, created = process_deploy(text=text, source="a.yaml")

    assert created is False
    assert again.state_machine_arn == version.state_machine_arn
    assert _state_machine_runs(version.state_machine_arn)


@pytest.mark.emulator
def test_same_version_with_other_text_is_a_conflict(emulator):
    """A deployed version never changes: other text under it asks for a higher version."""
    name = unique_name()
    process_deploy(text=succeed_spec(name=name, description="First."), source="a.yaml")

    with pytest.raises(Conflict, match=rf"{name} v1 is already deployed .* raise the version"):
        process_deploy(text=succeed_spec(name=name, description="Second."), source="a.yaml")

    assert Conflict.status == 409
    assert ProcessVersion.objects.get(process__name=name).description == "First."


@pytest.mark.emulator
def test_lower_version_than_the_latest_is_a_conflict(emulator):
    """Versions only go up: v1 cannot follow v2."""
    name = unique_name()
    process_deploy(text=succeed_spec(name=name, version=2), source="a.yaml")

    with pytest.raises(Conflict, match="versions only go up; latest is 2"):
        process_deploy(text=succeed_spec(name=name, version=1), source="a.yaml")


@pytest.mark.emulator
def test_versions_may_skip_numbers_and_each_gets_its_own_state_machine(emulator):
    """v1 then v3: both rows stay, each with its own state machine."""
    name = unique_name()
    v1, _ = process_deploy(text=succeed_spec(name=name, version=1), source="a.yaml")
    v3, created = process_deploy(text=succeed_spec(name=name, version=3), source="a.yaml")

    assert created is True
    assert v3.state_machine_arn.endswith(f"{name}-v3")
    assert v1.state_machine_arn != v3.state_machine_arn
    assert list(
        ProcessVersion.objects.filter(process__name=name).values_list("version", flat=True)
    ) == [3, 1]


def test_undeployed_child_is_a_conflict(db):
    """A parent can only be deployed once the child version it starts is deployed."""
    child = unique_name("child")

    with pytest.raises(Conflict, match=rf"starts child process {child} v1, not deployed"):
        process_deploy(text=parent_spec(name=unique_name(), child=child), source="p.yaml")

    assert not Process.objects.exists()


@pytest.mark.emulator
def test_parent_deploys_once_its_child_is_deployed(emulator):
    """With the child deployed, the parent's ASL starts the child's state machine."""
    child = unique_name("child")
    child_version, _ = process_deploy(text=succeed_spec(name=child), source="c.yaml")

    parent, created = process_deploy(text=parent_spec(name=unique_name(), child=child),
                                     source="p.yaml")

    assert created is True
    assert child_version.state_machine_arn in str(parent.asl)


def test_invalid_spec_raises_spec_error_naming_source_and_path(db):
    """Every problem is listed as source: path: message, with a 400 status."""
    with pytest.raises(SpecError) as caught:
        process_deploy(text="process: Bad Name\nversion: 0\nstages: []\n", source="bad.yaml")

    assert caught.value.status == 400
    assert "bad.yaml: process:" in caught.value.message
    assert "bad.yaml: version:" in caught.value.message
    assert not Process.objects.exists()


@pytest.mark.emulator
def test_v1_execution_keeps_running_on_v1_after_v2_is_deployed(emulator):
    """Executions stay on the version they started on; new starts take the latest."""
    name = unique_name()
    v1, _ = process_deploy(text=wait_spec(name=name, version=1, seconds=2), source="a.yaml")
    old, _ = process_start(name=name, input={"n": 1}, business_key="old")

    v2, _ = process_deploy(text=succeed_spec(name=name, version=2), source="a.yaml")
    new, _ = process_start(name=name, input={"n": 2}, business_key="new")

    described = aws.execution_describe(execution_arn=old.execution_arn)
    assert described["stateMachineArn"] == v1.state_machine_arn
    assert described["status"] == "RUNNING"
    assert old.version == v1
    assert new.version == v2
    assert aws.execution_describe(execution_arn=new.execution_arn)["stateMachineArn"] == (
        v2.state_machine_arn
    )
    wait_for(
        lambda: execution_refresh(execution=old).status != ExecutionStatus.RUNNING,
        what="the v1 execution finishing",
    )
    assert status_of(old) == ExecutionStatus.SUCCEEDED
    assert Execution.objects.get(pk=old.pk).version == v1


@pytest.mark.postgres
@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_racing_deploys_of_the_same_version_create_one_row(emulator):
    """Four threads deploy the same new spec at once: one creates it, the others see it."""
    text = succeed_spec(name=unique_name())

    def deploy(_: int) -> bool:
        return process_deploy(text=text, source="race.yaml")[1]

    results, errors = race(deploy, range(4))

    assert errors == []
    assert sorted(results) == [False, False, False, True]
    assert ProcessVersion.objects.count() == 1


# The process_deploy command ---------------------------------------------------------------


def _write(tmp_path: Path, filename: str, text: str) -> Path:
    path = tmp_path / filename
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.emulator
def test_deploy_command_prints_created_then_unchanged_with_the_arn(emulator, tmp_path):
    """Per file: created or unchanged, name, version and state machine ARN."""
    name = unique_name()
    path = _write(tmp_path, "one.yaml", succeed_spec(name=name))
    first, second = StringIO(), StringIO()

    call_command("process_deploy", str(path), stdout=first)
    call_command("process_deploy", str(path), stdout=second)

    arn = ProcessVersion.objects.get(process__name=name).state_machine_arn
    assert first.getvalue() == f"created {name} v1: {arn} ({path})\n"
    assert second.getvalue() == f"unchanged {name} v1: {arn} ({path})\n"


def test_deploy_command_validates_every_file_before_deploying_any(db, tmp_path):
    """One bad file: the error names it and its path, and the good file is not deployed."""
    good = _write(tmp_path, "good.yaml", succeed_spec(name=unique_name()))
    bad = _write(tmp_path, "bad.yaml", "process: ok-name\nversion: 1\nstages:\n  - id: x\n")

    with pytest.raises(CommandError) as caught:
        call_command("process_deploy", str(good), str(bad), stdout=StringIO())

    assert f"{bad}: stages[0] (x).kind: unknown stage kind" in str(caught.value)
    assert str(caught.value).startswith("Nothing deployed")
    assert not ProcessVersion.objects.exists()


@pytest.mark.emulator
def test_deploy_command_deploys_children_before_parents(emulator, tmp_path):
    """The parent is named first, the child second: the child is deployed first anyway."""
    child = unique_name("child")
    parent = unique_name("parent")
    parent_path = _write(tmp_path, "parent.yaml", parent_spec(name=parent, child=child))
    child_path = _write(tmp_path, "child.yaml", succeed_spec(name=child))
    out = StringIO()

    call_command("process_deploy", str(parent_path), str(child_path), stdout=out)

    lines = out.getvalue().splitlines()
    assert lines[0].startswith(f"created {child} v1: ")
    assert lines[1].startswith(f"created {parent} v1: ")


@pytest.mark.emulator
def test_deploy_command_turns_a_conflict_into_a_command_error(emulator, tmp_path):
    """A changed spec under a deployed version fails the command with the reason."""
    name = unique_name()
    path = _write(tmp_path, "one.yaml", succeed_spec(name=name, description="First."))
    call_command("process_deploy", str(path), stdout=StringIO())
    path.write_text(succeed_spec(name=name, description="Changed."), encoding="utf-8")

    with pytest.raises(CommandError, match=rf"{path}: not deployed: {name} v1 is already"):
        call_command("process_deploy", str(path), stdout=StringIO())


def test_deploy_command_names_a_missing_file(db, tmp_path):
    """A path that does not exist is reported, and nothing is deployed."""
    missing = tmp_path / "nope.yaml"

    with pytest.raises(CommandError, match=rf"{missing}: cannot read"):
        call_command("process_deploy", str(missing), stdout=StringIO())


def test_deploy_command_exits_non_zero_on_an_invalid_spec(tmp_path):
    """Run as a program, an invalid spec prints the problem and exits with status 1."""
    bad = _write(tmp_path, "bad.yaml", "process: ok-name\nversion: 1\n")

    done = subprocess.run(
        [sys.executable, "manage.py", "process_deploy", str(bad)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )

    assert done.returncode == 1
    assert f"{bad}: stages: required" in done.stderr
