"""The execution timeline on the supervisor's task page, read from the emulator's history.

Executions run for real on the emulator: a compiled invoice process waits at its review
stage, the intake takes the envelope in, a worker answers through the services and the
outbox sends the answer. The Celery task runs eagerly where a test needs its result; where
a test shows that the web request never reads the history, Celery is not eager and the
history and describe calls are patched to fail the test if anything calls them.
"""

import datetime
import json
import time
from pathlib import Path

import pytest

from accounts.roles import Role
from inbox import timeline
from inbox.models import ExecutionTimeline, Outbox, OutboxStatus, Task, TaskState
from inbox.services.callback import callback_send
from inbox.services.intake import intake_poll
from inbox.services.worker import task_complete, task_reject, task_take_next
from inbox.tasks import execution_timeline_task
from inbox.tokens import token_decrypt
from processes import aws
from processes.services import process_deploy, process_start
from tests.sfn import execution_wait, unique

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
SMALL_INVOICE = {"invoice_id": "INV-5", "supplier": "Initech", "amount": 900, "currency": "EUR"}
FETCHING = "Fetching the execution's timeline…"


@pytest.fixture
def enqueued(monkeypatch) -> list[str]:
    """Record each refresh enqueued (the real delay still runs: eager, or to the broker)."""
    calls: list[str] = []
    real = execution_timeline_task.delay

    def delay(execution_arn: str):
        calls.append(execution_arn)
        return real(execution_arn)

    monkeypatch.setattr(execution_timeline_task, "delay", delay)
    return calls


def _review_of_real_execution() -> Task:
    """Start the invoice process and take its review stage in through the intake."""
    process_deploy(text=(SPECS / "invoice-approval.yaml").read_text(), source="invoice")
    execution, _ = process_start(name="invoice-approval", input=SMALL_INVOICE,
                                 business_key=unique("INV-5"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        intake_poll(wait_seconds=1, budget_seconds=2)
        task = Task.objects.filter(execution_arn=execution.execution_arn, stage="review").first()
        if task:
            return task
    raise AssertionError("no review task arrived within 20 s")


def _send_callbacks() -> None:
    for outbox in Outbox.objects.filter(status=OutboxStatus.PENDING):
        assert callback_send(outbox_id=outbox.pk) == "sent"


def _stored_text(row: ExecutionTimeline) -> str:
    return json.dumps({"stages": row.stages, "status": row.status, "error": row.error,
                       "error_code": row.error_code, "arn": row.execution_arn})


# The timeline of real executions --------------------------------------------------------------


@pytest.mark.emulator
def test_timeline_lists_the_stages_passed_with_times_and_holds_no_token(
    private_intake, supervisor, worker, browser_for, eager_celery, enqueued
):
    review = _review_of_real_execution()
    token = token_decrypt(review.token_ciphertext)
    task_take_next(worker=worker)
    task_complete(worker=worker, task_id=review.pk,
                           answer={"decision": "approve", "comment": "fine"})
    _send_callbacks()
    assert execution_wait(execution_arn=review.execution_arn)["status"] == "SUCCEEDED"
    review.refresh_from_db()
    assert review.state == TaskState.COMPLETED

    client = browser_for(supervisor)
    page = client.get(f"/tasks/{review.pk}/")
    assert page.status_code == 200
    # A closed task: no supervisor actions, but the timeline, asked for on the first view.
    assert page.context["supervise"] is None
    html = page.content.decode()
    assert FETCHING in html and "data-timeline-pending" in html
    assert f'data-timeline-url="/tasks/{review.pk}/timeline/"' in html
    assert enqueued == [review.execution_arn]

    fragment = client.get(f"/tasks/{review.pk}/timeline/")
    assert fragment.status_code == 200
    assert fragment["Cache-Control"].startswith("max-age=0")
    part = fragment.content.decode()
    assert FETCHING not in part and "data-timeline-pending" not in part
    assert part.lstrip().startswith('<section class="card timeline"')  # the partial alone
    row = ExecutionTimeline.objects.get(execution_arn=review.execution_arn)
    assert row.status == "SUCCEEDED" and not row.error_code and not row.truncated
    assert [(s["name"], s["type"], s["outcome"]) for s in row.stages] == [
        ("review", "Task", "succeeded"),
        ("route", "Choice", "succeeded"),
        ("approved", "Succeed", "succeeded"),
    ]
    times = []
    for stage in row.stages:
        assert set(stage) == {"name", "type", "entered_at", "exited_at", "outcome"}
        times += [datetime.datetime.fromisoformat(stage["entered_at"]),
                  datetime.datetime.fromisoformat(stage["exited_at"])]
    assert times == sorted(times) and times[0] >= review.created_at - datetime.timedelta(
        minutes=1)
    assert row.fetched_at is not None and row.checked_at == row.fetched_at
    shown = fragment.context["timeline"]["stages"]
    assert [stage["outcome_label"] for stage in shown] == ["succeeded"] * 3
    assert "review <span class=\"muted\">(this task)</span>" in part
    assert "Execution <span class=\"exec-status exec-succeeded\">Succeeded</span>" in part

    # Fresh: the next view shows it at once and asks for nothing.
    again = client.get(f"/tasks/{review.pk}/").content.decode()
    assert "data-timeline-pending" not in again and "approved" in again
    assert enqueued == [review.execution_arn]

    for text in (html, part, again, _stored_text(row)):
        assert token not in text
    # What the worker read did carry it (TaskScheduled parameters), so the above can fail.
    history = aws.execution_history(execution_arn=review.execution_arn)
    assert token in json.dumps(history, default=str)


@pytest.mark.emulator
def test_a_rejected_stage_and_the_fail_state_show_as_failed(
    private_intake, supervisor, worker, browser_for, eager_celery
):
    review = _review_of_real_execution()
    token = token_decrypt(review.token_ciphertext)
    task_take_next(worker=worker)
    task_reject(worker=worker, task_id=review.pk, reason="not our supplier")
    _send_callbacks()
    assert execution_wait(execution_arn=review.execution_arn)["status"] == "FAILED"

    client = browser_for(supervisor)
    client.get(f"/tasks/{review.pk}/")
    part = client.get(f"/tasks/{review.pk}/timeline/").content.decode()
    row = ExecutionTimeline.objects.get(execution_arn=review.execution_arn)
    assert row.status == "FAILED"
    assert [(s["name"], s["type"], s["outcome"]) for s in row.stages] == [
        ("review", "Task", "failed"),
        ("rejected", "Fail", "failed"),
    ]
    # The failure's error and cause stay in Step Functions: only names, times, outcomes.
    assert "HumanTask" not in _stored_text(row) and "not our supplier" not in _stored_text(row)
    assert token not in part and token not in _stored_text(row)
    assert '<span class="outcome outcome-failed">failed</span>' in part


@pytest.mark.emulator
def test_a_running_execution_shows_its_waiting_stage_as_running(
    private_intake, supervisor, browser_for, eager_celery
):
    review = _review_of_real_execution()
    client = browser_for(supervisor)
    page = client.get(f"/tasks/{review.pk}/")
    assert page.context["supervise"] is not None  # an open task: actions and timeline
    part = client.get(f"/tasks/{review.pk}/timeline/").content.decode()
    row = ExecutionTimeline.objects.get(execution_arn=review.execution_arn)
    assert row.status == "RUNNING"
    assert [(s["name"], s["outcome"], s["exited_at"]) for s in row.stages] == [
        ("review", "running", None)]
    assert "so far" in part
    assert token_decrypt(review.token_ciphertext) not in part + _stored_text(row)


# Who sees it, and who reads Step Functions ------------------------------------------------------


def test_a_worker_gets_no_timeline_and_404_on_its_url(make_task, worker, make_worker,
                                                     approval_skill, browser_for, enqueued):
    task = make_task()
    client = browser_for(worker)
    page = client.get(f"/tasks/{task.pk}/")
    assert page.status_code == 200
    assert page.context["timeline"] is None
    assert "Execution timeline" not in page.content.decode()
    assert client.get(f"/tasks/{task.pk}/timeline/").status_code == 404
    # A supervisor of another skill does not see the task at all.
    other = make_worker({"finance-approval": 5}, roles=(Role.SUPERVISOR,))
    assert browser_for(other).get(f"/tasks/{task.pk}/timeline/").status_code == 404
    assert enqueued == []
    assert not ExecutionTimeline.objects.filter(execution_arn=task.execution_arn).exists()


def test_signed_out_the_timeline_url_asks_to_sign_in(make_task, client):
    task = make_task()
    response = client.get(f"/tasks/{task.pk}/timeline/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_the_web_request_never_reads_the_history(make_task, supervisor, browser_for,
                                                 enqueued, monkeypatch):
    """Celery is not eager: the refresh goes to the broker. Step Functions' history and
    describe calls are patched to fail the test if the request makes them."""
    def forbidden(**kwargs):
        raise AssertionError("the web process called Step Functions")

    monkeypatch.setattr(aws, "execution_history", forbidden)
    monkeypatch.setattr(aws, "execution_describe", forbidden)
    task = make_task()
    client = browser_for(supervisor)
    page = client.get(f"/tasks/{task.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert FETCHING in html and "Reload the page in a few seconds" in html
    assert enqueued == [task.execution_arn]
    # Asked again while the first refresh waits for a worker: not enqueued twice.
    fragment = client.get(f"/tasks/{task.pk}/timeline/")
    assert FETCHING in fragment.content.decode()
    assert enqueued == [task.execution_arn]
    assert not ExecutionTimeline.objects.filter(execution_arn=task.execution_arn).exists()


@pytest.mark.emulator
def test_a_failed_read_is_stored_and_shown(make_task, supervisor, browser_for, emulator,
                                           eager_celery):
    """The envelope's execution does not exist on the emulator: its history cannot be read."""
    task = make_task()
    client = browser_for(supervisor)
    client.get(f"/tasks/{task.pk}/")
    row = ExecutionTimeline.objects.get(execution_arn=task.execution_arn)
    assert row.error_code == "ExecutionDoesNotExist"
    assert row.stages == [] and row.fetched_at is None and not row.status
    part = client.get(f"/tasks/{task.pk}/timeline/").content.decode()
    assert 'role="alert"' in part
    assert "Could not read the execution's history (ExecutionDoesNotExist)" in part
    assert FETCHING not in part


@pytest.mark.emulator
def test_a_stale_timeline_is_shown_while_it_is_read_again(
    private_intake, supervisor, browser_for, enqueued, monkeypatch
):
    review = _review_of_real_execution()
    execution_timeline_task(review.execution_arn)  # as the worker would
    row = ExecutionTimeline.objects.get(execution_arn=review.execution_arn)
    old = row.checked_at - datetime.timedelta(seconds=timeline.FRESH_SECONDS + 1)
    ExecutionTimeline.objects.filter(pk=row.pk).update(checked_at=old)
    monkeypatch.setattr(aws, "execution_history", None)  # the page must not call it
    part = browser_for(supervisor).get(f"/tasks/{review.pk}/timeline/").content.decode()
    # The stages read before stay, under a quiet note (a followed execution's every round).
    assert "Reading the latest history…" in part and FETCHING not in part
    assert "review" in part and "running" in part
    assert enqueued == [review.execution_arn]
    # A slower read that started before the stored one never replaces it.
    monkeypatch.undo()
    row.refresh_from_db()
    later = row.checked_at.replace(year=row.checked_at.year + 2)
    ExecutionTimeline.objects.filter(pk=row.pk).update(checked_at=later, stages=[])
    timeline.timeline_refresh(execution_arn=review.execution_arn)
    assert ExecutionTimeline.objects.get(pk=row.pk).stages == []
