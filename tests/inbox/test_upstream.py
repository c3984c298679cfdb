"""Executions that end upstream: their status events cancel the open tasks at once."""

import json
import uuid

import pytest
from django.conf import settings

from inbox.models import Task, TaskEvent, TaskState
from inbox.services.upstream import execution_ended, status_event_execution, status_poll
from inbox.services.worker import task_take_next
from processes import aws


def _event(execution_arn: str, status: str = "ABORTED", **overrides) -> dict:
    """A status change event as EventBridge delivers it to an SQS target (AWS's shape)."""
    body = {
        "version": "0", "id": str(uuid.uuid4()),
        "detail-type": "Step Functions Execution Status Change", "source": "aws.states",
        "account": "123456789012", "time": "2026-12-01T10:00:00Z", "region": "us-east-1",
        "resources": [execution_arn],
        "detail": {"executionArn": execution_arn, "stateMachineArn": "arn:aws:states:"
                   "us-east-1:123456789012:stateMachine:invoice-approval-v1",
                   "name": execution_arn.rsplit(":", 1)[-1], "status": status,
                   "startDate": 1764583200000, "stopDate": 1764583260000,
                   "input": "{}", "output": None, "error": None, "cause": None},
    }
    body.update(overrides)
    return body


def test_an_ended_execution_s_event_names_the_execution_and_its_status():
    arn = "arn:aws:states:us-east-1:123456789012:execution:m:e"
    assert status_event_execution(body=_event(arn)) == (arn, "ABORTED")
    assert status_event_execution(body=_event(arn, "TIMED_OUT")) == (arn, "TIMED_OUT")


@pytest.mark.parametrize("body", [
    None, [], "text",
    _event("arn:x", "RUNNING"),
    _event("arn:x", source="aws.ec2"),
    _event("arn:x", **{"detail-type": "Step Functions State Machine Change"}),
    _event("arn:x", detail="no object"),
    _event("", "FAILED"),
])
def test_anything_else_names_nothing(body):
    assert status_event_execution(body=body) is None


def test_an_ended_execution_cancels_its_open_tasks_once(make_task, worker):
    held = make_task()
    task_take_next(worker=worker)
    queued = make_task(execution=held.execution_arn, stage="second-look")
    other = make_task()

    assert execution_ended(execution_arn=held.execution_arn, status="ABORTED") == 2
    assert execution_ended(execution_arn=held.execution_arn, status="ABORTED") == 0

    for task in (held, queued):
        task.refresh_from_db()
        assert task.state == TaskState.CANCELLED
        assert task.reason == "The execution is ABORTED. Nobody may work on it."
        event = TaskEvent.objects.filter(task=task).latest("version")
        assert (event.action, event.actor_label) == ("cancel", "upstream")
    assert Task.objects.get(pk=other.pk).state == TaskState.QUEUED


@pytest.fixture
def status_queue(emulator, settings):
    """A status queue (and rule) of this test's own, empty."""
    settings.INBOX_STATUS_QUEUE = f"status-{uuid.uuid4().hex[:12]}"
    settings.INBOX_STATUS_DLQ = f"{settings.INBOX_STATUS_QUEUE}-dlq"
    settings.INBOX_STATUS_RULE = settings.INBOX_STATUS_QUEUE
    return aws.status_queue_ensure()


@pytest.mark.emulator
def test_the_status_queue_s_events_cancel_tasks_and_are_deleted(status_queue, make_task):
    task = make_task()
    url = status_queue["queue_url"]
    aws.message_send(url=url, body=json.dumps(_event(task.execution_arn, "FAILED")))
    aws.message_send(url=url, body="not json")

    counts = status_poll(wait_seconds=1, budget_seconds=3)

    assert counts == {"cancelled": 1, "no_open_task": 0, "ignored": 1, "failed": 0}
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELLED
    assert aws.messages_receive(url=url, wait_seconds=1) == []


@pytest.mark.emulator
def test_the_status_queue_is_read_with_the_receive_window(status_queue, settings, monkeypatch):
    """Ended executions' events arriving at a trickle share a receive, as the intake's do."""
    settings.INBOX_RECEIVE_WINDOW_MS = 150
    windows: list[float] = []
    real = aws.messages_receive_batches

    def receive_batches(**kwargs):
        windows.append(kwargs["window_seconds"])
        return real(**kwargs)

    monkeypatch.setattr(aws, "messages_receive_batches", receive_batches)
    aws.message_send(url=status_queue["queue_url"], body="not json")

    assert status_poll(wait_seconds=0, budget_seconds=3)["ignored"] == 1
    assert windows == [0.15]


@pytest.mark.emulator
def test_eventbridge_routes_a_status_change_to_the_status_queue(status_queue, make_task):
    """The rule status_queue_ensure makes matches AWS's event; PutEvents stands in here for
    Step Functions (the emulator's own events are covered in tests/processes)."""
    task = make_task()
    detail = _event(task.execution_arn)["detail"]
    events = aws.client(service="events")
    events.put_events(Entries=[{
        "Source": "aws.states", "DetailType": "Step Functions Execution Status Change",
        "Resources": [task.execution_arn], "Detail": json.dumps(detail)}])
    events.put_events(Entries=[{
        "Source": "aws.states", "DetailType": "Step Functions Execution Status Change",
        "Resources": [task.execution_arn], "Detail": json.dumps({**detail,
                                                                  "status": "RUNNING"})}])

    counts = status_poll(wait_seconds=2, budget_seconds=4)

    assert counts["cancelled"] == 1 and counts["ignored"] == 0  # RUNNING is not routed
    assert Task.objects.get(pk=task.pk).state == TaskState.CANCELLED
    assert settings.INBOX_STATUS_RULE == status_queue["rule_arn"].rsplit("/", 1)[-1]


@pytest.mark.emulator
def test_a_stopped_execution_s_task_is_cancelled_through_the_event_path_alone(
        private_intake, status_queue, review_skill, monkeypatch, capsys):
    """StopExecution on a real execution; only the status queue is read: the backstop
    (DescribeExecution) is never called, so the event, and nothing else, cancels the task."""
    from pathlib import Path

    from django.core.management import call_command

    from inbox.services import clock
    from inbox.services.intake import intake_poll
    from processes.services import process_deploy, process_start

    specs = Path(__file__).resolve().parents[2] / "processes" / "specs"
    process_deploy(text=(specs / "invoice-approval.yaml").read_text(), source="invoice")
    execution, _ = process_start(
        name="invoice-approval", business_key=f"INV-{uuid.uuid4().hex[:8]}",
        input={"invoice_id": "INV-93", "supplier": "Initech", "amount": 800,
               "currency": "EUR"})
    for _ in range(20):
        intake_poll(wait_seconds=1, budget_seconds=2)
        task = Task.objects.filter(execution_arn=execution.execution_arn).first()
        if task is not None:
            break
    assert task is not None and task.state == TaskState.QUEUED

    def backstop(**kwargs):
        raise AssertionError("the DescribeExecution backstop must not be needed")

    monkeypatch.setattr(clock.aws, "execution_describe", backstop)
    call_command("execution_stop", execution.execution_arn)  # what an operator runs
    assert capsys.readouterr().out == f"Stopped {execution.execution_arn}.\n"

    counts = status_poll(wait_seconds=2, budget_seconds=4)

    assert counts["cancelled"] == 1
    task.refresh_from_db()
    assert task.state == TaskState.CANCELLED
    assert task.reason == "The execution is ABORTED. Nobody may work on it."


@pytest.mark.emulator
def test_the_stop_command_stops_an_execution_and_says_so(emulator, capsys):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match=r"Not stopped: .*ExecutionDoesNotExist"):
        call_command("execution_stop",
                     "arn:aws:states:us-east-1:123456789012:execution:nothing:here")


@pytest.mark.emulator
def test_a_status_event_records_the_end_in_the_execution_s_row(status_queue, review_skill):
    """The executions list shows the end without waiting for the reconciler."""
    import datetime

    from processes.models import Execution, ExecutionStatus
    from tests.inbox.test_executions import make_execution, make_version

    execution = make_execution(make_version(), "INV-61")
    event = _event(execution.execution_arn, "FAILED")
    event["detail"].update(error="States.TaskFailed", cause="a step failed")
    aws.message_send(url=status_queue["queue_url"], body=json.dumps(event))

    counts = status_poll(wait_seconds=1, budget_seconds=3)

    assert counts["no_open_task"] == 1
    execution.refresh_from_db()
    assert (execution.status, execution.error, execution.cause) == (
        ExecutionStatus.FAILED, "States.TaskFailed", "a step failed")
    assert execution.finished_at == datetime.datetime.fromtimestamp(1764583260,
                                                                    tz=datetime.UTC)
    # A late or repeated event of another status changes nothing.
    Execution.objects.filter(pk=execution.pk).update(status=ExecutionStatus.SUCCEEDED)
    aws.message_send(url=status_queue["queue_url"], body=json.dumps(event))
    status_poll(wait_seconds=1, budget_seconds=3)
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.SUCCEEDED
