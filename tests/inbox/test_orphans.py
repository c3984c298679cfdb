"""Orphaned waits: an execution whose intake message was lost is found and recovered.

Real executions on the emulator: each test deploys a process of its own name (the emulator
is shared by the session, and other tests' executions of invoice-approval still wait), and
loses an intake message by receiving and deleting it by hand before the intake sees it.
"""

import json
import logging
from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache import cache

from accounts.services import skill_ensure
from config.errors import ExternalServiceError
from inbox.metrics import _COUNTER_KEY, _counters_read, metrics_text
from inbox.models import IntakeError, Outbox, OutboxStatus, Task, TaskEvent, TaskState
from inbox.services import orphans
from inbox.services.callback import callback_send
from inbox.services.intake import Outcome, intake_messages, intake_poll
from inbox.services.worker import task_claim, task_complete
from inbox.tasks import orphans_check_task
from inbox.tokens import token_decrypt
from processes import aws
from processes.models import Process, ProcessVersion
from processes.services import process_deploy, process_start
from tests.sfn import APPROVE, SMALL_INVOICE, execution_wait, task_message_wait, unique

pytestmark = pytest.mark.emulator
SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
RECOVERED = _COUNTER_KEY.format(name="orphans_recovered", label="all")


@pytest.fixture
def orphan_settings(settings):
    """Judge every wait at once; a per-period budget no test reaches (runs pass calls=)."""
    settings.INBOX_ORPHANS_GRACE_SECONDS = 0
    settings.INBOX_ORPHANS_CHECK_CALLS = 100_000
    cache.delete_many([orphans.CURSOR_KEY, orphans.LOCK_KEY])
    yield settings
    cache.delete_many([orphans.CURSOR_KEY, orphans.LOCK_KEY])


@pytest.fixture
def process(db, private_intake, orphan_settings):
    """Deploy invoice-approval under a name of this test's own; return the process name."""
    name = unique("orphans")
    text = (SPECS / "invoice-approval.yaml").read_text().replace(
        "process: invoice-approval", f"process: {name}", 1)
    process_deploy(text=text, source="orphans")
    return name


def _lost_start(name: str) -> tuple[str, str]:
    """Start an execution and lose its intake message; return its ARN and the token."""
    execution, _ = process_start(name=name, input=SMALL_INVOICE, business_key=unique("INV"))
    body = task_message_wait(execution_arn=execution.execution_arn, stage="review")
    return execution.execution_arn, body["taskToken"]


def _logged(records: list[logging.LogRecord]) -> list[str]:
    """Return each record's message with its exception and traceback, as a handler shows it."""
    texts = []
    for record in records:
        text = record.getMessage() + (record.exc_text or "")
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        texts.append(text)
    return texts


def _check(**kwargs) -> dict[str, int]:
    return orphans.orphans_check(**kwargs)


def test_a_lost_intake_message_is_recovered_and_its_answer_ends_the_execution(
        process, worker, caplog):
    caplog.set_level(logging.DEBUG)
    before = _counters_read()[RECOVERED]
    arn, token = _lost_start(process)
    assert not Task.objects.filter(execution_arn=arn).exists()

    counts = _check()
    assert (counts["checked"], counts["recovered"], counts["stopped"]) == (1, 1, 0)
    task = Task.objects.get(execution_arn=arn)
    assert (task.stage, task.state, task.skill.slug) == ("review", TaskState.QUEUED,
                                                         "invoice-review")
    assert token_decrypt(task.token_ciphertext) == token
    assert task.title == "Review invoice INV-7 from ACME"
    assert list(TaskEvent.objects.filter(task=task).values_list("action", flat=True)) == [
        "receive"]
    assert _counters_read()[RECOVERED] == before + 1
    assert f"inbox_orphans_recovered_total {before + 1}.0" in metrics_text().decode()

    task_claim(worker=worker, task_id=task.pk)
    task_complete(worker=worker, task_id=task.pk, answer=APPROVE)
    for outbox in Outbox.objects.filter(task=task, status=OutboxStatus.PENDING):
        assert callback_send(outbox_id=outbox.pk) == "sent"
    finished = execution_wait(execution_arn=arn)
    assert finished["status"] == "SUCCEEDED"
    assert json.loads(finished["output"])["stages"]["review"]["answer"] == APPROVE

    logged = _logged(caplog.records)
    assert any("taken in from the history" in line and arn in line for line in logged)
    assert not any(token in line for line in logged), "a token reached a log record"
    assert token not in json.dumps(cache.get(orphans.CURSOR_KEY))


def test_an_execution_whose_task_exists_is_left_alone(process, review_skill):
    execution, _ = process_start(name=process, input=SMALL_INVOICE,
                                 business_key=unique("INV"))
    for _ in range(20):
        intake_poll(wait_seconds=1, budget_seconds=2)
        if Task.objects.filter(execution_arn=execution.execution_arn).exists():
            break
    task = Task.objects.get(execution_arn=execution.execution_arn)
    before = _counters_read()[RECOVERED]

    counts = _check()
    assert (counts["checked"], counts["has_task"], counts["recovered"]) == (1, 1, 0)
    assert Task.objects.filter(execution_arn=execution.execution_arn).count() == 1
    assert TaskEvent.objects.filter(task=task).count() == 1
    assert _counters_read()[RECOVERED] == before


def test_a_closed_task_of_the_token_means_no_orphan(process, worker):
    """Completed in the inbox, the answer not yet sent: the execution still waits."""
    arn, _ = _lost_start(process)
    _check()
    task = Task.objects.get(execution_arn=arn)
    task_claim(worker=worker, task_id=task.pk)
    task_complete(worker=worker, task_id=task.pk, answer=APPROVE)
    # What the callback would do once sent: the task closed, the execution still RUNNING.
    Task.objects.filter(pk=task.pk).update(state=TaskState.COMPLETED)
    cache.delete(orphans._checked_key(arn))

    counts = _check()
    assert (counts["checked"], counts["has_task"], counts["recovered"]) == (1, 1, 0)
    assert Task.objects.filter(execution_arn=arn).count() == 1


def test_a_second_run_recovers_nothing_twice(process, orphan_settings, review_skill):
    arn, _ = _lost_start(process)
    before = _counters_read()[RECOVERED]
    assert _check()["recovered"] == 1

    again = _check()
    assert (again["checked"], again["skipped"], again["recovered"]) == (0, 1, 0)

    # Once the recheck period is over, it is read again and found to have its task.
    orphan_settings.INBOX_ORPHANS_RECHECK_SECONDS = 0
    cache.delete(orphans._checked_key(arn))
    later = _check()
    assert (later["checked"], later["has_task"], later["recovered"]) == (1, 1, 0)
    assert Task.objects.filter(execution_arn=arn).count() == 1
    assert _counters_read()[RECOVERED] == before + 1


def test_the_budget_stops_a_run_and_the_next_run_resumes_at_the_cursor(process,
                                                                     review_skill):
    arns = {_lost_start(process)[0] for _ in range(3)}
    before = _counters_read()[RECOVERED]

    # Two calls a run: one ListExecutions page, one history.
    first = _check(calls=2)
    assert (first["calls"], first["checked"], first["recovered"], first["stopped"]) == (
        2, 1, 1, 1)
    assert cache.get(orphans.CURSOR_KEY)["machine"].endswith(":stateMachine:" + process
                                                             + "-v1")
    second = _check(calls=2)
    assert (second["checked"], second["skipped"], second["recovered"], second["stopped"]) == (
        1, 1, 1, 1)
    third = _check(calls=2)
    assert (third["checked"], third["skipped"], third["recovered"], third["stopped"]) == (
        1, 2, 1, 0)
    # The fleet is covered: the next run starts again from its beginning.
    assert cache.get(orphans.CURSOR_KEY) is None
    assert set(Task.objects.values_list("execution_arn", flat=True)) == arns
    assert _counters_read()[RECOVERED] == before + 3


def test_the_cursor_resumes_within_the_pages_of_a_state_machine(process, review_skill,
                                                               monkeypatch):
    """One execution a ListExecutions page, two calls a run: each run lists the page after
    the last one checked and reads its history. Without the page token kept, the second
    run would spend both calls listing the first two pages and check nothing.

    Patched: the emulator's ListExecutions ignores maxResults and nextToken (one page, all
    of them); the wrapper cuts its real answer into pages of one, with the offset as the
    token, as AWS pages it.
    """
    real = aws.executions_running_page

    def paged(*, state_machine_arn, page_token=None, page_size=1000):
        executions, token = real(state_machine_arn=state_machine_arn)
        assert token is None
        offset = int(page_token or 0)
        following = str(offset + 1) if offset + 1 < len(executions) else None
        return executions[offset:offset + 1], following

    monkeypatch.setattr(aws, "executions_running_page", paged)
    arns = {_lost_start(process)[0] for _ in range(3)}
    runs = []
    while len(runs) < 10:
        runs.append(_check(calls=2))
        if not runs[-1]["stopped"]:
            break
    assert [run["checked"] for run in runs] == [1, 1, 1]
    assert sum(run["recovered"] for run in runs) == 3
    assert set(Task.objects.values_list("execution_arn", flat=True)) == arns


def test_the_cursor_resumes_at_the_state_machine_where_a_run_stopped(process, review_skill):
    other = unique("orphans")
    process_deploy(text=(SPECS / "invoice-approval.yaml").read_text().replace(
        "process: invoice-approval", f"process: {other}", 1), source="orphans")
    first, second = _lost_start(process)[0], _lost_start(other)[0]

    # The first machine's list and history; the budget stops the run at the second's list.
    run = _check(calls=2)
    assert (run["recovered"], run["stopped"]) == (1, 1)
    assert cache.get(orphans.CURSOR_KEY) == {
        "machine": ProcessVersion.objects.get(process__name=other).state_machine_arn,
        "token": None}
    # Started at the first machine again, this run would spend its two calls on lists.
    last = _check(calls=2)
    assert (last["recovered"], last["stopped"]) == (1, 0)
    assert set(Task.objects.values_list("execution_arn", flat=True)) == {first, second}


def test_the_shared_budget_of_the_period_stops_a_run(process, orphan_settings, review_skill):
    """The per-period budget is shared through the rate limiter: spent, no call is made."""
    _lost_start(process)
    orphan_settings.INBOX_ORPHANS_CHECK_CALLS = 0
    counts = _check()
    assert (counts["calls"], counts["checked"], counts["stopped"]) == (0, 0, 1)
    assert not Task.objects.exists()


def test_a_refused_envelope_is_an_intake_error_until_it_can_be_taken_in(process,
                                                                       orphan_settings,
                                                                       caplog):
    """No skill invoice-review yet: the intake refuses the recovered envelope, as it would
    have refused the message, and records it; once the skill exists it is taken in."""
    caplog.set_level(logging.DEBUG)
    arn, token = _lost_start(process)
    orphan_settings.INBOX_ORPHANS_RECHECK_SECONDS = 0

    refused = _check()
    assert (refused["invalid"], refused["recovered"]) == (1, 0)
    error = IntakeError.objects.get(execution_arn=arn)
    assert error.message_id.startswith("orphan-") and error.stage == "review"
    assert any(problem.startswith("skill:") for problem in error.problems)
    assert token not in json.dumps(error.problems) + error.message_id
    assert not Task.objects.exists()

    skill_ensure(slug="invoice-review", name="Invoice review")
    taken = _check()
    assert taken["recovered"] == 1
    assert Task.objects.get(execution_arn=arn).stage == "review"
    assert not IntakeError.objects.filter(execution_arn=arn).exists()
    logged = _logged(caplog.records)
    assert any("intake refused the envelope" in line for line in logged)
    assert not any(token in line for line in logged), "a token reached a log record"


def test_a_state_machine_gone_upstream_is_passed_over(process, orphan_settings, caplog):

    version = ProcessVersion.objects.get(process__name=process)
    gone = unique("gone")
    ProcessVersion.objects.filter(pk=version.pk).update(
        state_machine_arn=version.state_machine_arn.rsplit(":", 1)[0] + ":" + gone)
    counts = _check()
    assert (counts["calls"], counts["checked"], counts["stopped"]) == (1, 0, 0)
    assert any("does not exist upstream" in record.getMessage() and gone in record.getMessage()
               for record in caplog.records)


def test_the_history_holds_the_envelope_with_the_token_in_taskscheduled(process):
    """What the recovery reads, as the emulator (moto 5.2.5) records it: the resolved
    Parameters as JSON text, whose MessageBody is the envelope object with its token."""
    arn, token = _lost_start(process)
    [wait] = orphans.waits_open(aws.execution_history(execution_arn=arn))
    body = json.loads(orphans.wait_body(wait))
    assert body["taskToken"] == token and body["execution"] == arn
    assert body["kind"] == "human-task/v1" and body["stage"] == "review"


def test_a_wait_within_its_grace_is_judged_on_a_later_run(process, orphan_settings,
                                                          review_skill):
    """Its message may still be on the queue: not recovered, and not marked as checked."""
    arn, _ = _lost_start(process)
    orphan_settings.INBOX_ORPHANS_GRACE_SECONDS = 600
    young = _check()
    assert (young["checked"], young["recent"], young["recovered"]) == (1, 1, 0)
    assert not Task.objects.exists()
    orphan_settings.INBOX_ORPHANS_GRACE_SECONDS = 0
    old = _check()
    assert (old["checked"], old["skipped"], old["recovered"]) == (1, 0, 1)
    assert Task.objects.get().execution_arn == arn


def test_beat_runs_the_orphan_check_through_a_thin_task(process, review_skill, settings):
    entry = settings.CELERY_BEAT_SCHEDULE["orphans-check"]
    assert entry["task"] == orphans_check_task.name
    assert entry["schedule"] == settings.INBOX_ORPHANS_CHECK_EVERY_SECONDS == 60
    arn, _ = _lost_start(process)
    assert orphans_check_task.apply().get()["recovered"] == 1
    assert Task.objects.get().execution_arn == arn
    # A run in progress elsewhere (its lock held): this one does nothing.
    cache.add(orphans.LOCK_KEY, "another run", timeout=60)
    assert orphans_check_task.apply().get() is None


def _parallel_machine(*, name: str) -> ProcessVersion:
    """A hand-written state machine that follows the envelope: two human stages at once.

    Deployed on the emulator and recorded as a process version (the check lists the
    versions' state machines); its envelopes name a process nobody deployed, whose form is
    a built-in one.
    """
    queue_url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)

    def stage(title: str) -> dict:
        return {
            "Type": "Task", "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
            "TimeoutSeconds": 3600, "End": True,
            "Parameters": {"QueueUrl": queue_url, "MessageBody": {
                "kind": "human-task/v1", "taskToken.$": "$$.Task.Token",
                "execution.$": "$$.Execution.Id", "stage.$": "$$.State.Name",
                "enteredAt.$": "$$.State.EnteredTime",
                "process": {"name": "hand-written", "version": 1},
                "skill": "invoice-review", "title": title, "form": "approve-reject",
                "input.$": "$", "priority": 50,
                "timeouts": {"offer": 300, "work": 1800, "overall": 3000},
                "onTimeout": "abort"}},
        }

    asl = {"StartAt": "both", "States": {"both": {"Type": "Parallel", "End": True, "Branches": [
        {"StartAt": "left", "States": {"left": stage("Left")}},
        {"StartAt": "right", "States": {"right": stage("Right")}},
    ]}}}
    arn = aws.state_machine_create_or_update(name=name, definition=asl,
                                             role_arn=settings.INBOX_STATES_ROLE_ARN)
    process = Process.objects.create(name=name)
    return ProcessVersion.objects.create(process=process, version=1, spec_text="",
                                         spec_sha256="", asl=asl, state_machine_name=name,
                                         state_machine_arn=arn)


def test_a_lost_branch_is_recovered_after_the_other_branch_was_answered(
        private_intake, orphan_settings, worker):
    """Parallel branches: the answered branch's TaskSucceeded comes after the lost one's
    TaskScheduled, and closes only its own wait."""
    version = _parallel_machine(name=unique("parallel"))
    arn = aws.execution_start(state_machine_arn=version.state_machine_arn,
                              name=unique("run"), input={"n": 1})
    left = task_message_wait(execution_arn=arn, stage="left")
    right = task_message_wait(execution_arn=arn, stage="right")
    # The left message reaches the intake; the right one is lost.
    assert intake_messages(messages=[{"MessageId": "left", "Body": json.dumps(left)}]) == [
        Outcome.CREATED]
    task = Task.objects.get(execution_arn=arn)
    task_claim(worker=worker, task_id=task.pk)
    task_complete(worker=worker, task_id=task.pk, answer=APPROVE)
    for outbox in Outbox.objects.filter(task=task, status=OutboxStatus.PENDING):
        assert callback_send(outbox_id=outbox.pk) == "sent"
    history = aws.execution_history(execution_arn=arn)
    succeeded = [event["id"] for event in history if event["type"] == "TaskSucceeded"]
    scheduled = [event["id"] for event in history if event["type"] == "TaskScheduled"]
    assert len(succeeded) == 1 and succeeded[0] > max(scheduled)

    counts = _check()
    assert (counts["checked"], counts["recovered"], counts["has_task"]) == (1, 1, 0)
    recovered = Task.objects.get(execution_arn=arn, stage="right")
    assert token_decrypt(recovered.token_ciphertext) == right["taskToken"]
    task_claim(worker=worker, task_id=recovered.pk)
    task_complete(worker=worker, task_id=recovered.pk, answer=APPROVE)
    for outbox in Outbox.objects.filter(task=recovered, status=OutboxStatus.PENDING):
        assert callback_send(outbox_id=outbox.pk) == "sent"
    assert execution_wait(execution_arn=arn)["status"] == "SUCCEEDED"


def test_aws_throttling_stops_the_run_and_the_next_resumes(process, review_skill,
                                                           monkeypatch):
    """Patched: the emulator never throttles, so GetExecutionHistory is made to answer
    ThrottlingException once, as AWS does when its bucket is empty."""
    arn, _ = _lost_start(process)
    real = aws.execution_history

    def throttled(**kwargs):
        raise ExternalServiceError("GetExecutionHistory: ThrottlingException: Rate exceeded",
                                   retryable=True, error_code="ThrottlingException")

    monkeypatch.setattr(aws, "execution_history", throttled)
    stopped = _check()
    assert (stopped["stopped"], stopped["checked"], stopped["recovered"]) == (1, 0, 0)
    assert cache.get(orphans.CURSOR_KEY)["machine"].endswith(f":{process}-v1")
    monkeypatch.setattr(aws, "execution_history", real)
    resumed = _check()
    assert (resumed["checked"], resumed["skipped"], resumed["recovered"]) == (1, 0, 1)
    assert Task.objects.get().execution_arn == arn
