"""Starting executions: the business key makes the name, so starting twice starts once."""

import re
import threading
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from config.errors import Conflict, ExternalServiceError, InboxError, NotFound
from processes import aws
from processes.models import Execution, ExecutionStatus
from processes.services import execution_name_for, process_deploy, process_start
from tests.concurrency import race
from tests.processes.lifecycle import succeed_spec, unique_name, wait_for, wait_spec

pytestmark = pytest.mark.django_db


def _aws_executions(state_machine_arn: str) -> list[dict]:
    """Return every execution Step Functions holds for the state machine."""
    page = aws.client(service="stepfunctions").list_executions(stateMachineArn=state_machine_arn)
    return page["executions"]


# Execution names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["INV-42", "invoice 42 / ACME", "ünïcödé", "x" * 200, "-", "a" * 63 + "!"],
)
def test_execution_name_is_a_valid_aws_name_and_stable(key):
    """1-80 characters of letters, digits, dash and underscore; the same key, the same name."""
    name = execution_name_for(business_key=key)

    assert re.fullmatch(r"[A-Za-z0-9_-]{1,80}", name)
    assert execution_name_for(business_key=key) == name


def test_execution_name_keeps_the_readable_part_of_the_key():
    """A key of safe characters is recognisable in the name."""
    assert execution_name_for(business_key="INV-42").startswith("INV-42-")


@pytest.mark.parametrize(
    ("first", "second"),
    [("a/b", "a b"), ("a/b", "a-b"), ("x" * 100 + "1", "x" * 100 + "2"), ("é", "è")],
)
def test_different_keys_never_share_a_name(first, second):
    """Keys that sanitise or truncate to the same text still get different names."""
    assert execution_name_for(business_key=first) != execution_name_for(business_key=second)


# Arguments ------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["", "   ", "k" * 201])
def test_business_key_must_have_1_to_200_characters(db, key):
    """An empty, blank or over-long key is refused before anything else happens."""
    with pytest.raises(InboxError, match="business key"):
        process_start(name="anything", input={}, business_key=key)


@pytest.mark.parametrize("value", [[1, 2], "text", 3, None])
def test_input_must_be_a_json_object(db, value):
    """A list, string, number or null is refused."""
    with pytest.raises(InboxError, match="must be a JSON object"):
        process_start(name="anything", input=value, business_key="k")


def test_unknown_process_is_not_found(db):
    with pytest.raises(NotFound, match="no process called 'nope'"):
        process_start(name="nope", input={}, business_key="k")


@pytest.mark.emulator
def test_unknown_version_is_not_found(emulator):
    name = unique_name()
    process_deploy(text=succeed_spec(name=name), source="a.yaml")

    with pytest.raises(NotFound, match=f"{name!r} has no version 7"):
        process_start(name=name, input={}, business_key="k", version=7)


# Starting -------------------------------------------------------------------------------


@pytest.mark.emulator
def test_start_records_a_running_execution(emulator, make_user):
    """The row names the process, latest version, key, execution and who started it."""
    user = make_user()
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")

    execution, created = process_start(
        name=name, input={"amount": 12}, business_key="INV-1", user=user
    )

    assert created is True
    assert execution.process == version.process
    assert execution.version == version
    assert execution.business_key == "INV-1"
    assert execution.name == execution_name_for(business_key="INV-1")
    assert execution.execution_arn == (
        f"arn:aws:states:us-east-1:123456789012:execution:{name}-v1:{execution.name}"
    )
    assert execution.status == ExecutionStatus.RUNNING
    assert execution.input == {"amount": 12}
    assert execution.started_by == user
    assert aws.execution_describe(execution_arn=execution.execution_arn)["status"] == "RUNNING"


@pytest.mark.emulator
def test_starting_twice_with_the_same_key_gives_one_execution(emulator):
    """The second start returns the first execution: one row, one AWS execution."""
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")

    first, first_created = process_start(name=name, input={"a": 1}, business_key="K-1")
    second, second_created = process_start(name=name, input={"a": 1}, business_key="K-1")

    assert (first_created, second_created) == (True, False)
    assert second.pk == first.pk
    assert Execution.objects.filter(process__name=name).count() == 1
    assert len(_aws_executions(version.state_machine_arn)) == 1


@pytest.mark.emulator
def test_same_key_with_other_input_is_a_conflict(emulator):
    """A key starts one execution; reusing it with other input is refused, not ignored."""
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml")
    process_start(name=name, input={"a": 1}, business_key="K-1")

    with pytest.raises(Conflict, match=r"'K-1' was already used .* with other input"):
        process_start(name=name, input={"a": 2}, business_key="K-1")


@pytest.mark.emulator
def test_same_key_on_another_version_is_a_conflict(emulator):
    """A key that started v1 cannot be started again on v2."""
    name = unique_name()
    process_deploy(text=wait_spec(name=name, version=1), source="a.yaml")
    process_start(name=name, input={}, business_key="K-1")
    process_deploy(text=wait_spec(name=name, version=2), source="a.yaml")

    with pytest.raises(Conflict, match=r"already started .* v1, not v2"):
        process_start(name=name, input={}, business_key="K-1", version=2)
    again, created = process_start(name=name, input={}, business_key="K-1")
    assert created is False
    assert again.version.version == 1


@pytest.mark.emulator
def test_input_key_order_does_not_matter(emulator):
    """The same data in another key order is the same input."""
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml")
    first, _ = process_start(name=name, input={"a": 1, "b": {"y": 2, "x": 1}}, business_key="K")

    second, created = process_start(
        name=name, input={"b": {"x": 1, "y": 2}, "a": 1}, business_key="K"
    )

    assert created is False
    assert second.pk == first.pk


@pytest.mark.emulator
def test_start_lost_after_the_aws_call_is_recorded_by_the_retry(emulator):
    """A crash between StartExecution and the insert: the retry records the same execution.

    The crash is imitated by starting the execution in Step Functions directly.
    """
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")
    arn = aws.execution_start(
        state_machine_arn=version.state_machine_arn,
        name=execution_name_for(business_key="K-9"),
        input={"a": 1},
    )

    execution, created = process_start(name=name, input={"a": 1}, business_key="K-9")

    assert created is True
    assert execution.execution_arn == arn
    assert len(_aws_executions(version.state_machine_arn)) == 1


@pytest.mark.emulator
def test_start_lost_after_the_execution_finished_is_recorded_by_the_retry(emulator):
    """AWS answers ExecutionAlreadyExists once the execution ended; same input: it is ours."""
    name = unique_name()
    version, _ = process_deploy(text=succeed_spec(name=name), source="a.yaml")
    arn = aws.execution_start(
        state_machine_arn=version.state_machine_arn,
        name=execution_name_for(business_key="K-9"),
        input={"a": 1},
    )
    wait_for(
        lambda: aws.execution_describe(execution_arn=arn)["status"] == "SUCCEEDED",
        what="the execution finishing",
    )

    execution, created = process_start(name=name, input={"a": 1}, business_key="K-9")

    assert created is True
    assert execution.execution_arn == arn


@pytest.mark.emulator
def test_key_used_in_aws_with_other_input_is_a_conflict(emulator):
    """ExecutionAlreadyExists with other input: the key was used; nothing is recorded."""
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")
    aws.execution_start(
        state_machine_arn=version.state_machine_arn,
        name=execution_name_for(business_key="K-9"),
        input={"a": "other"},
    )

    with pytest.raises(Conflict, match=r"already used .* with other input"):
        process_start(name=name, input={"a": 1}, business_key="K-9")

    assert not Execution.objects.exists()


@pytest.mark.emulator
def test_start_without_its_state_machine_says_to_deploy_again(emulator):
    """After an emulator restart (imitated by deleting the machine) the error says what to do."""
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")
    aws.client(service="stepfunctions").delete_state_machine(
        stateMachineArn=version.state_machine_arn
    )

    with pytest.raises(ExternalServiceError, match="deploy the spec again") as caught:
        process_start(name=name, input={}, business_key="K")

    assert caught.value.retryable is False
    assert not Execution.objects.exists()


@pytest.mark.postgres
@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_racing_starts_with_the_same_key_start_once(emulator):
    """Five threads start the same key at once: one row, one AWS execution, one creator."""
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")

    def start(_: int) -> tuple[int, bool]:
        execution, created = process_start(name=name, input={"a": 1}, business_key="RACE")
        return execution.pk, created

    results, errors = race(start, range(5))

    assert errors == []
    assert len({pk for pk, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, False, True]
    assert Execution.objects.count() == 1
    assert len(_aws_executions(version.state_machine_arn)) == 1


@pytest.fixture
def held_start(monkeypatch):
    """Hold the first StartExecution until released; count every call that reaches AWS."""
    entered, release = threading.Event(), threading.Event()
    calls: list[str] = []
    real = aws.execution_start

    def execution_start(**kwargs):
        calls.append(kwargs["state_machine_arn"])
        if len(calls) == 1:
            entered.set()
            assert release.wait(30), "the held start was never released"
        return real(**kwargs)

    monkeypatch.setattr(aws, "execution_start", execution_start)
    return entered, release, calls


def _start_while_held(held_start, first, second):
    """Run first() until its AWS call is held, then second() beside it; release; return both."""
    entered, release, _ = held_start
    outcomes: dict[str, object] = {}

    def run(label, action):
        try:
            outcomes[label] = action()
        except Exception as exc:  # asserted on by the caller
            outcomes[label] = exc
        finally:
            connection.close()

    holder = threading.Thread(target=run, args=("first", first))
    holder.start()
    assert entered.wait(30), "the first start never reached Step Functions"
    other = threading.Thread(target=run, args=("second", second))
    other.start()
    other.join(0.5)  # gives the second start time to reach the reservation and wait there
    release.set()
    holder.join()
    other.join()
    return outcomes["first"], outcomes["second"]


@pytest.mark.postgres
@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_start_of_a_key_being_started_waits_and_calls_aws_no_more(emulator, held_start):
    """While one start of a key is in StartExecution, a second waits for it, then returns it."""
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")

    def start():
        return process_start(name=name, input={"a": 1}, business_key="HELD")

    first, second = _start_while_held(held_start, start, start)

    assert first[1] is True
    assert second == (first[0], False)
    assert held_start[2] == [version.state_machine_arn]
    assert len(_aws_executions(version.state_machine_arn)) == 1


@pytest.mark.postgres
@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_racing_start_on_another_version_is_a_conflict_and_starts_nothing(
    emulator, held_start
):
    """The key is reserved by v1's start, so v2's start is refused before reaching AWS."""
    name = unique_name()
    one, _ = process_deploy(text=wait_spec(name=name, version=1), source="a.yaml")
    two, _ = process_deploy(text=wait_spec(name=name, version=2), source="a.yaml")

    first, second = _start_while_held(
        held_start,
        lambda: process_start(name=name, input={}, business_key="K", version=1),
        lambda: process_start(name=name, input={}, business_key="K", version=2),
    )

    assert first[0].version == one
    assert isinstance(second, Conflict)
    assert held_start[2] == [one.state_machine_arn]
    assert _aws_executions(two.state_machine_arn) == []


@pytest.mark.emulator
def test_a_failed_start_leaves_the_key_free(emulator, monkeypatch):
    """StartExecution fails: no row keeps the key, and the next start of it starts."""
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")
    real = aws.execution_start

    def refused(**kwargs):
        raise ExternalServiceError("Step Functions is down", retryable=True)

    monkeypatch.setattr(aws, "execution_start", refused)
    with pytest.raises(ExternalServiceError, match="Step Functions is down"):
        process_start(name=name, input={}, business_key="K")
    assert not Execution.objects.exists()

    monkeypatch.setattr(aws, "execution_start", real)
    _, created = process_start(name=name, input={}, business_key="K")
    assert created is True
    assert len(_aws_executions(version.state_machine_arn)) == 1


# The process_start command -----------------------------------------------------------------


@pytest.mark.emulator
def test_start_command_prints_the_arn_and_whether_it_was_new(emulator):
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml")
    first, second = StringIO(), StringIO()

    call_command("process_start", name, "--input", '{"a": 1}', "--key", "K-1", stdout=first)
    call_command("process_start", name, "--input", '{"a": 1}', "--key", "K-1", stdout=second)

    arn = Execution.objects.get(process__name=name).execution_arn
    assert first.getvalue() == f"started: {name} v1 key 'K-1'\n{arn}\n"
    assert second.getvalue().startswith("already started")
    assert second.getvalue().endswith(f"\n{arn}\n")


@pytest.mark.emulator
def test_start_command_takes_a_version(emulator):
    name = unique_name()
    process_deploy(text=wait_spec(name=name, version=1), source="a.yaml")
    process_deploy(text=wait_spec(name=name, version=2), source="a.yaml")

    call_command("process_start", name, "--key", "K", "--version", "1", stdout=StringIO())

    assert Execution.objects.get(process__name=name).version.version == 1


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("{not json", "--input is not valid JSON: Expecting property name"),
        ("[1, 2]", r"--input must be a JSON object \(\{...\}\), not a list"),
    ],
)
def test_start_command_names_bad_input(db, given, message):
    with pytest.raises(CommandError, match=message):
        call_command("process_start", "anything", "--input", given, "--key", "K")


def test_start_command_turns_service_errors_into_command_errors(db):
    with pytest.raises(CommandError, match="no process called 'nope'"):
        call_command("process_start", "nope", "--key", "K")
