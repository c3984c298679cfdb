"""Explicit migration: an execution waiting at a human stage of v1 moves to v2 at that stage.

Real executions on the emulator. Each test deploys invoice-approval v1 and v2 under a name
of its own, starts v1, takes its envelope in through the intake, migrates, and hands the
new execution's envelope to the intake the way a poll would.
"""

import json
import logging
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from config.errors import ExternalServiceError, Forbidden, InboxError
from inbox.models import MigrationStatus, Outbox, OutboxStatus, Task, TaskEvent, TaskMigration
from inbox.services import orphans
from inbox.services.callback import callback_send
from inbox.services.intake import Outcome, intake_message, intake_messages, intake_poll
from inbox.services.migration import (
    MIGRATED_ERROR,
    SUPERSEDED_ERROR,
    migration_begin,
    migrations_finish,
    migrations_start,
)
from inbox.services.worker import task_claim, task_complete
from inbox.tokens import token_decrypt
from processes import aws
from processes.models import Execution, ProcessVersion
from processes.resume import RESUME_KEY, ROUTER_STATE
from processes.services import process_deploy, process_start
from tests.sfn import APPROVE, SMALL_INVOICE, execution_wait, task_message_wait, unique

pytestmark = pytest.mark.emulator
SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
REASON = "v2 fixes the approval threshold"


def _spec(name: str, version: int, *, rename_review: bool = False) -> str:
    text = (SPECS / "invoice-approval.yaml").read_text().replace(
        "process: invoice-approval", f"process: {name}", 1).replace(
        "version: 1", f"version: {version}", 1)
    if version > 1:
        text = text.replace("description: Review", f"description: (v{version}) Review", 1)
    if rename_review:
        text = (text.replace("- id: review", "- id: check").replace("stages.review.",
                                                                     "stages.check.")
                .replace("not_by: review", "not_by: check"))
    return text


@pytest.fixture
def versions(db, private_intake, orphan_free, review_skill):
    """Deploy v1 and v2 of invoice-approval under this test's own name; return the name."""
    name = unique("migrate")
    process_deploy(text=_spec(name, 1), source="v1")
    process_deploy(text=_spec(name, 2), source="v2")
    return name


@pytest.fixture
def orphan_free(settings):
    settings.INBOX_ORPHANS_GRACE_SECONDS = 0


def _take_in(body: dict, message_id: str = "") -> Outcome:
    [outcome] = intake_messages(messages=[{"MessageId": message_id or unique("msg"),
                                           "Body": json.dumps(body)}])
    return outcome


def _waiting_task(name: str) -> tuple[Task, dict]:
    """Start v1 and take its review envelope in; return the task and the envelope."""
    execution, _ = process_start(name=name, input=SMALL_INVOICE, business_key=unique("INV"),
                                 version=1)
    body = task_message_wait(execution_arn=execution.execution_arn, stage="review")
    assert _take_in(body) == Outcome.CREATED
    return Task.objects.get(execution_arn=execution.execution_arn), body


def _migrate(name: str, admin, **kwargs):
    """Migrate as the command does: each migration begun at once."""
    return migrations_start(actor=admin, process_name=name, from_version=1, to_version=2,
                            reason=REASON, run_now=True, **kwargs)


def _new_envelope(to_execution_arn: str) -> dict:
    """Receive the envelope the new execution's review stage sent."""
    return task_message_wait(execution_arn=to_execution_arn, stage="review")


def _send_all(task: Task) -> None:
    for outbox in Outbox.objects.filter(task=task, status=OutboxStatus.PENDING):
        assert callback_send(outbox_id=outbox.pk) == "sent"


@pytest.fixture
def stops(monkeypatch):
    """Record each StopExecution's arguments, then make the real call.

    moto 5.2.5 drops StopExecution's error and cause (its ExecutionAborted event has no
    details; AWS records both there), so the tests read what the inbox sent.
    """
    sent: dict[str, tuple[str, str]] = {}
    real = aws.execution_stop

    def recorded(*, execution_arn: str, error: str, cause: str) -> None:
        sent[execution_arn] = (error, cause)
        real(execution_arn=execution_arn, error=error, cause=cause)

    monkeypatch.setattr(aws, "execution_stop", recorded)
    return sent


def test_a_waiting_execution_moves_to_v2_is_answered_there_and_v1_ends_stopped(
        versions, admin, worker, stops, caplog):
    caplog.set_level(logging.DEBUG)
    task, old_body = _waiting_task(versions)
    old_arn = task.execution_arn
    task_claim(worker=worker, task_id=task.pk)

    [result] = _migrate(versions, admin)
    assert (result.outcome, result.task_id, result.stage) == ("started", str(task.pk), "review")
    v2 = ProcessVersion.objects.get(process__name=versions, version=2)
    assert result.to_execution_arn.startswith(
        v2.state_machine_arn.replace(":stateMachine:", ":execution:"))
    # The new execution has the old one's name, and its input says where it came from.
    assert result.to_execution_arn.rsplit(":", 1)[1] == old_arn.rsplit(":", 1)[1]
    started = json.loads(aws.execution_describe(execution_arn=result.to_execution_arn)["input"])
    assert started[RESUME_KEY]["from"] == old_arn
    assert started[RESUME_KEY]["stage"] == "review"
    assert started[RESUME_KEY]["state"]["invoice_id"] == "INV-7"

    new_body = _new_envelope(result.to_execution_arn)
    assert new_body["process"]["version"] == 2
    assert new_body["taskToken"] != old_body["taskToken"]
    assert new_body["input"] == old_body["input"]  # the same shown fields, from the carried state
    assert _take_in(new_body) == Outcome.MIGRATED

    task.refresh_from_db()
    # The same task, held by the same worker, now answering v2's execution.
    assert (task.state, task.assignee, task.process_version) == ("in_progress", worker, 2)
    assert task.execution_arn == result.to_execution_arn
    assert token_decrypt(task.token_ciphertext) == new_body["taskToken"]
    assert Task.objects.filter(execution_arn__in=[old_arn, result.to_execution_arn]).count() == 1
    event = TaskEvent.objects.get(task=task, action="migrate")
    assert (event.actor, event.reason, event.from_state, event.to_state) == (
        admin, REASON, "in_progress", "in_progress")
    assert event.data == {"from_execution": old_arn, "from_version": 1,
                          "to_execution": result.to_execution_arn, "to_version": 2,
                          "migration": TaskMigration.objects.get(task=task).pk}
    assert TaskMigration.objects.get(task=task).status == MigrationStatus.MOVED
    # The business key's record follows the execution.
    record = Execution.objects.get(execution_arn=result.to_execution_arn)
    assert record.version == v2

    assert migrations_finish(task_id=str(task.pk)) == 1
    assert execution_wait(execution_arn=old_arn)["status"] == "ABORTED"
    error, cause = stops[old_arn]
    assert error == MIGRATED_ERROR
    assert result.to_execution_arn in cause
    assert TaskMigration.objects.get(task=task).status == MigrationStatus.DONE

    task_complete(worker=worker, task_id=task.pk, answer=APPROVE)
    _send_all(task)
    finished = execution_wait(execution_arn=result.to_execution_arn)
    assert finished["status"] == "SUCCEEDED"
    output = json.loads(finished["output"])
    assert output["stages"]["review"]["answer"] == APPROVE
    assert output["invoice_id"] == "INV-7"
    assert RESUME_KEY not in output
    assert aws.execution_describe(execution_arn=old_arn)["status"] == "ABORTED"

    logged = " ".join(record.getMessage() for record in caplog.records)
    for token in (old_body["taskToken"], new_body["taskToken"]):
        assert token not in logged, "a token reached a log record"
        assert token not in json.dumps(list(TaskMigration.objects.values()), default=str)


def test_asking_again_and_a_second_delivery_change_nothing(versions, admin, worker):
    task, _ = _waiting_task(versions)
    [first] = _migrate(versions, admin)
    [again] = _migrate(versions, admin)
    assert (again.outcome, again.status) == ("already", MigrationStatus.STARTED)
    assert again.to_execution_arn == first.to_execution_arn
    new_body = _new_envelope(first.to_execution_arn)
    assert _take_in(new_body) == Outcome.MIGRATED
    assert _take_in(new_body) == Outcome.DUPLICATE
    # The one-message path of the intake knows it too.
    assert intake_message(message={"MessageId": unique("msg"),
                                   "Body": json.dumps(new_body)}) == Outcome.DUPLICATE
    # A task that moved is no longer of v1: asking again finds nothing to move.
    assert _migrate(versions, admin) == []
    assert migrations_finish(task_id=str(task.pk)) == 1
    assert migrations_finish(task_id=str(task.pk)) == 0
    assert TaskEvent.objects.filter(task=task, action="migrate").count() == 1
    assert TaskMigration.objects.filter(task=task).count() == 1


def test_a_redelivered_envelope_of_the_old_wait_makes_no_second_task(versions, admin):
    _, old_body = _waiting_task(versions)
    [result] = _migrate(versions, admin)
    assert _take_in(_new_envelope(result.to_execution_arn)) == Outcome.MIGRATED
    assert _take_in(old_body) == Outcome.DUPLICATE
    assert intake_message(message={"MessageId": unique("msg"),
                                   "Body": json.dumps(old_body)}) == Outcome.DUPLICATE
    assert Task.objects.filter(process_name=versions).count() == 1


def test_the_orphan_check_leaves_a_moved_execution_alone(versions, admin, settings):
    settings.CELERY_TASK_ALWAYS_EAGER = False
    task, _ = _waiting_task(versions)
    old_arn = task.execution_arn
    [result] = _migrate(versions, admin)
    # Through the intake's one-message path this time.
    body = _new_envelope(result.to_execution_arn)
    assert intake_message(message={"MessageId": unique("msg"),
                                   "Body": json.dumps(body)}) == Outcome.MIGRATED
    # Its stop not made yet (the broker was down, say): v1 still waits for the old token.
    counts = orphans.execution_orphans_recover(execution_arn=old_arn)
    assert (counts["migrated"], counts["recovered"]) == (1, 0)
    assert Task.objects.filter(process_name=versions).count() == 1


def test_a_task_answered_on_v1_first_supersedes_the_migration(versions, admin, worker,
                                                                stops):
    task, _ = _waiting_task(versions)
    old_arn = task.execution_arn
    [result] = _migrate(versions, admin)
    task_claim(worker=worker, task_id=task.pk)
    task_complete(worker=worker, task_id=task.pk, answer=APPROVE)
    _send_all(task)
    assert execution_wait(execution_arn=old_arn)["status"] == "SUCCEEDED"

    assert _take_in(_new_envelope(result.to_execution_arn)) == Outcome.SUPERSEDED
    migration = TaskMigration.objects.get(task=task)
    assert migration.status == MigrationStatus.SUPERSEDED
    assert migrations_finish(task_id=str(task.pk)) == 1
    assert execution_wait(execution_arn=result.to_execution_arn)["status"] == "ABORTED"
    assert stops[result.to_execution_arn][0] == SUPERSEDED_ERROR
    assert old_arn not in stops
    task.refresh_from_db()
    assert (task.execution_arn, task.process_version) == (old_arn, 1)
    assert not TaskEvent.objects.filter(task=task, action="migrate").exists()


def test_a_stage_missing_in_the_new_version_is_refused(db, private_intake, admin,
                                                       review_skill):
    name = unique("migrate")
    process_deploy(text=_spec(name, 1), source="v1")
    process_deploy(text=_spec(name, 2, rename_review=True), source="v2")
    task, _ = _waiting_task(name)
    [result] = _migrate(name, admin)
    assert result.outcome == "refused"
    assert "has no human stage 'review'" in result.detail
    assert not TaskMigration.objects.exists()
    assert aws.execution_describe(execution_arn=task.execution_arn)["status"] == "RUNNING"


def test_a_version_compiled_before_resuming_existed_is_refused(versions, admin):
    v2 = ProcessVersion.objects.get(process__name=versions, version=2)
    v2.asl = {**v2.asl, "StartAt": v2.asl["States"][ROUTER_STATE]["Default"]}
    v2.save(update_fields=["asl"])
    _waiting_task(versions)
    [result] = _migrate(versions, admin)
    assert result.outcome == "refused"
    assert "compiled before executions could resume" in result.detail


def test_only_admins_migrate_and_only_to_a_newer_version(versions, admin, worker):
    _waiting_task(versions)
    with pytest.raises(Forbidden):
        _migrate(versions, worker)
    with pytest.raises(InboxError, match="not newer"):
        migrations_start(actor=admin, process_name=versions, from_version=2, to_version=1,
                         reason=REASON)
    with pytest.raises(InboxError, match="Say why"):
        migrations_start(actor=admin, process_name=versions, from_version=1, to_version=2,
                         reason=" ")
    assert not TaskMigration.objects.exists()


def test_the_command_migrates_and_its_dry_run_changes_nothing(versions, admin):
    task, _ = _waiting_task(versions)
    out = StringIO()
    call_command("process_migrate", versions, "--from", "1", "--to", "2", "--by", admin.email,
                 "--reason", REASON, "--dry-run", stdout=out)
    assert f"planned task {task.pk} at review" in out.getvalue()
    assert not TaskMigration.objects.exists()
    out = StringIO()
    call_command("process_migrate", versions, "--from", "1", "--to", "2", "--by", admin.email,
                 "--reason", REASON, stdout=out)
    assert f"started task {task.pk} at review" in out.getvalue()
    assert "1 task(s): 1 started" in out.getvalue()
    with pytest.raises(CommandError, match="no user"):
        call_command("process_migrate", versions, "--from", "1", "--to", "2", "--by",
                     "nobody@example.com", "--reason", REASON)


def test_the_api_migrates_for_admins_and_refuses_others(versions, admin, worker, api_client,
                                                        eager_celery,
                                                        django_capture_on_commit_callbacks):
    task, _ = _waiting_task(versions)
    url = f"/api/inbox/processes/{versions}/migrations/"
    body = {"from_version": 1, "to_version": 2, "reason": REASON}
    refused = api_client(worker).post(url, body, format="json")
    assert refused.status_code == 403
    assert not TaskMigration.objects.exists()

    planned = api_client(admin).post(url, {**body, "dry_run": True}, format="json")
    assert planned.status_code == 200, planned.content
    assert [(r["task_id"], r["outcome"]) for r in planned.json()] == [(str(task.pk), "planned")]

    with django_capture_on_commit_callbacks(execute=True):
        response = api_client(admin).post(url, body, format="json")
    assert response.status_code == 200, response.content
    [result] = response.json()
    assert (result["outcome"], result["stage"], result["status"]) == (
        "requested", "review", "starting")
    # The worker began it after commit (the web reads no history).
    migration = TaskMigration.objects.get(task=task)
    assert migration.status == MigrationStatus.STARTED
    assert result["to_execution_arn"] == migration.to_execution_arn
    assert _take_in(_new_envelope(migration.to_execution_arn)) == Outcome.MIGRATED
    assert "taskToken" not in response.content.decode()

    missing = api_client(admin).post(url, {"from_version": 1, "to_version": 2}, format="json")
    assert missing.status_code == 400
    assert "reason" in missing.content.decode()
    unknown = api_client(admin).post(url, {**body, "to_version": 9}, format="json")
    assert unknown.status_code == 404


def test_a_wait_answered_before_the_worker_begins_makes_the_migration_refused(
        versions, admin, worker, django_capture_on_commit_callbacks):
    task, _ = _waiting_task(versions)
    with django_capture_on_commit_callbacks(execute=False):
        [asked] = migrations_start(actor=admin, process_name=versions, from_version=1,
                                   to_version=2, reason=REASON)
    assert asked.outcome == "requested"
    task_claim(worker=worker, task_id=task.pk)
    task_complete(worker=worker, task_id=task.pk, answer=APPROVE)
    _send_all(task)
    assert execution_wait(execution_arn=task.execution_arn)["status"] == "SUCCEEDED"

    migration = TaskMigration.objects.get(task=task)
    assert migration_begin(migration_id=migration.pk) == MigrationStatus.REFUSED
    migration.refresh_from_db()
    assert "does not wait for this task's answer" in migration.last_error
    # Nothing was started on v2.
    with pytest.raises(ExternalServiceError):
        aws.execution_describe(execution_arn=migration.to_execution_arn)
    assert migration_begin(migration_id=migration.pk) == MigrationStatus.REFUSED


def test_the_intake_poll_moves_the_task_and_deletes_the_new_envelope(versions, admin):
    task, _ = _waiting_task(versions)
    [result] = _migrate(versions, admin)
    counts: dict[str, int] = {}
    for _ in range(20):  # The new execution's envelope comes within a few receives.
        for outcome, count in intake_poll(wait_seconds=1, budget_seconds=2).items():
            counts[outcome] = counts.get(outcome, 0) + count
        if counts.get("migrated"):
            break
    assert counts.get("migrated") == 1
    assert not counts.get("created")
    task.refresh_from_db()
    assert task.execution_arn == result.to_execution_arn
    # Deleted once taken: nothing of it is left on the queue.
    assert intake_poll(wait_seconds=1, budget_seconds=1).get("migrated", 0) == 0
    assert aws.queue_depth(name=settings.INBOX_INTAKE_QUEUE) == 0
