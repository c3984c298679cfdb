"""Undo: a worker's complete or reject waits out INBOX_UNDO_SECONDS before it is sent, and
until then its worker may take it back; nothing reaches Step Functions.

Against real executions on the emulator, made as test_callbacks makes them (an execution
waits at its review stage, its envelope goes through the intake). The only patch is the
spy on the boto3 client's SendTask* methods, which counts calls (and, in one test, undoes
the decision while a call is in flight).
"""

import datetime
import time

import pytest
from django.urls import reverse

from accounts.roles import Role
from config.errors import Conflict, NotFound
from inbox import effects
from inbox.history import events_verify
from inbox.lifecycle import TooLateToUndo
from inbox.models import Outbox, OutboxStatus, Task, TaskState
from inbox.selectors import decision_undoable
from inbox.services import worker
from inbox.services.callback import SendResult, callback_send, outbox_drain, outbox_relay
from processes import aws
from tests.concurrency import race
from tests.inbox.test_callbacks import SendTaskSpy, _review, _task_outcomes
from tests.sfn import APPROVE, execution_wait, invoice_machine_deploy

pytestmark = pytest.mark.emulator

WINDOW = 5


@pytest.fixture(scope="module")
def invoice_machine(emulator) -> str:
    return invoice_machine_deploy()


@pytest.fixture
def spy(monkeypatch) -> SendTaskSpy:
    return SendTaskSpy(monkeypatch)


@pytest.fixture
def undo_window(settings) -> int:
    settings.INBOX_UNDO_SECONDS = WINDOW
    return WINDOW


def _held(machine: str, reviewer) -> Task:
    """A review task of a real execution, taken by the reviewer through the service."""
    review = _review(machine)
    worker.task_claim(worker=reviewer, task_id=review.task.pk)
    return Task.objects.get(pk=review.task.pk)


def _not_sent(task: Task, spy: SendTaskSpy) -> None:
    assert spy.calls == []
    assert _task_outcomes(task.execution_arn) == []
    assert aws.execution_describe(execution_arn=task.execution_arn)["status"] == "RUNNING"


# Within the window -------------------------------------------------------------------------


def test_a_complete_undone_within_the_window_is_never_sent(
    invoice_machine, reviewer, spy, undo_window, clock
):
    task = _held(invoice_machine, reviewer)
    clock.advance(seconds=60)  # a minute of work: 29 min of the 30 min work clock left
    work_left = task.work_deadline - clock.now
    decided = worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    outbox = Outbox.objects.get(task=task)
    assert (decided.state, outbox.status) == (TaskState.COMPLETING, OutboxStatus.PENDING)
    assert outbox.next_attempt_at == clock.now + datetime.timedelta(seconds=WINDOW)
    # The on-commit sender (enqueued for the end of the window) finds it not yet due.
    assert callback_send(outbox_id=outbox.pk) == SendResult.SKIPPED

    clock.advance(seconds=3)
    undone = worker.task_undo(worker=reviewer, task_id=task.pk)

    assert (undone.state, undone.assignee, undone.answer) == (TaskState.IN_PROGRESS, reviewer,
                                                              None)
    # The work clock runs on from where the decision stopped it.
    assert undone.work_deadline == clock.now + work_left
    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.WITHDRAWN, 0)
    events = list(undone.events.order_by("version"))
    assert [e.action for e in events][-2:] == ["complete", "undo"]
    assert (events[-1].from_state, events[-1].to_state) == ("completing", "in_progress")
    assert events_verify(task=undone) is None
    # Long after the window: neither the sender nor the drain sends a withdrawn row.
    clock.advance(seconds=600)
    assert callback_send(outbox_id=outbox.pk) == SendResult.SKIPPED
    assert outbox_drain() == 0
    _not_sent(undone, spy)


def test_a_reject_undone_is_never_sent_and_the_task_can_be_decided_again(
    invoice_machine, reviewer, spy, undo_window, clock
):
    task = _held(invoice_machine, reviewer)
    worker.task_reject(worker=reviewer, task_id=task.pk, reason="wrong supplier")

    undone = worker.task_undo(worker=reviewer, task_id=task.pk)

    assert (undone.state, undone.reason) == (TaskState.IN_PROGRESS, "")
    assert [e.action for e in undone.events.order_by("version")][-2:] == ["reject", "undo"]
    _not_sent(undone, spy)
    # Decided again: a callback of its own, sent once its window closed.
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    second = Outbox.objects.get(task=task, status=OutboxStatus.PENDING)
    clock.advance(seconds=WINDOW)
    assert callback_send(outbox_id=second.pk) == SendResult.SENT
    assert spy.calls == ["send_task_success"]
    assert execution_wait(execution_arn=task.execution_arn)["status"] == "SUCCEEDED"
    assert [row.status for row in Outbox.objects.filter(task=task).order_by("pk")] == [
        OutboxStatus.WITHDRAWN, OutboxStatus.SENT]


def test_the_decision_is_offered_for_undo_until_its_window_closes(
    invoice_machine, reviewer, undo_window, clock
):
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)

    offered = decision_undoable(user=reviewer)
    assert (offered.task.pk, offered.until) == (task.pk,
                                                clock.now + datetime.timedelta(seconds=WINDOW))
    clock.advance(seconds=WINDOW)
    assert decision_undoable(user=reviewer) is None


# After the window --------------------------------------------------------------------------


def test_after_the_window_the_decision_is_sent_once_and_undo_is_refused(
    invoice_machine, reviewer, spy, undo_window, clock
):
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    outbox = Outbox.objects.get(task=task)

    clock.advance(seconds=WINDOW)
    # Due, not yet sent (the sender is late): too late all the same.
    with pytest.raises(TooLateToUndo, match="Too late to undo"):
        worker.task_undo(worker=reviewer, task_id=task.pk)
    assert callback_send(outbox_id=outbox.pk) == SendResult.SENT
    with pytest.raises(TooLateToUndo, match="Step Functions already has the decision"):
        worker.task_undo(worker=reviewer, task_id=task.pk)

    assert spy.calls == ["send_task_success"]
    assert execution_wait(execution_arn=task.execution_arn)["status"] == "SUCCEEDED"
    fresh = Task.objects.get(pk=task.pk)
    assert fresh.state == TaskState.COMPLETED
    assert "undo" not in [e.action for e in fresh.events.all()]


def test_an_undo_while_the_send_is_in_flight_is_refused(
    invoice_machine, reviewer, spy, undo_window, clock
):
    """The spy undoes the decision during the SendTaskSuccess call, then makes the call."""
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    outbox = Outbox.objects.get(task=task)
    refusals: list[Exception] = []

    def undo_then_send(real, params):
        try:
            worker.task_undo(worker=reviewer, task_id=task.pk)
        except Conflict as exc:
            refusals.append(exc)
        return real(**params)

    spy.plan = [undo_then_send]
    clock.advance(seconds=WINDOW)
    assert callback_send(outbox_id=outbox.pk) == SendResult.SENT

    # Claimed (its lease pushed its next attempt into the future): no longer withdrawable.
    assert [type(exc) for exc in refusals] == [TooLateToUndo]
    assert Task.objects.get(pk=task.pk).state == TaskState.COMPLETED
    assert execution_wait(execution_arn=task.execution_arn)["status"] == "SUCCEEDED"


def test_the_drain_leaves_a_decision_alone_until_its_window_and_grace_are_over(
    invoice_machine, reviewer, spy, undo_window, clock, settings
):
    """Beat's drain, the backstop while no sender runs: it sends the row, but never inside
    its window, and a fresh row only after its grace."""
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 10
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)

    clock.advance(seconds=WINDOW + 9)
    assert outbox_drain() == 0
    clock.advance(seconds=1)
    assert outbox_drain() == 1
    assert spy.calls == ["send_task_success"]
    assert Task.objects.get(pk=task.pk).state == TaskState.COMPLETED


def test_a_decision_enqueues_nothing_its_row_falls_due_at_the_end_of_the_window(
    make_task, make_worker, undo_window, clock, monkeypatch, django_capture_on_commit_callbacks
):
    """inbox.effects' enqueue is patched to record what would be enqueued: nothing, the
    callbacks' sender reads the row itself."""
    enqueued: list[tuple] = []
    monkeypatch.setattr(effects, "enqueue", lambda name, *arguments: enqueued.append(name))
    ana = make_worker({"invoice-review": 3})
    task = make_task()
    worker.task_claim(worker=ana, task_id=task.pk)

    with django_capture_on_commit_callbacks(execute=True) as hooks:
        worker.task_complete(worker=ana, task_id=task.pk, answer=APPROVE)

    assert enqueued == []
    assert hooks == []
    outbox = Outbox.objects.get(task=task)
    assert (outbox.status, outbox.next_attempt_at) == (
        OutboxStatus.PENDING, clock.now + datetime.timedelta(seconds=WINDOW))


def test_the_sender_sleeps_out_the_window_then_sends_the_decision_at_once(
    invoice_machine, reviewer, spy, undo_window, clock, settings
):
    """outbox_relay, the sender's one step: no call inside the window, a sleep that ends
    as it closes (or sooner, at most most), then the send, without beat's drain grace."""
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 10
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)

    assert outbox_relay(most=60) == WINDOW
    assert outbox_relay(most=0.25) == 0.25  # a row due sooner, written elsewhere, is seen
    clock.advance(seconds=WINDOW - 1)
    assert outbox_relay(most=60) == 1.0
    assert spy.calls == []
    clock.advance(seconds=1)
    assert outbox_relay(most=60) == 0.0  # sent: more may be due, look again at once
    assert spy.calls == ["send_task_success"]
    assert outbox_relay(most=60) == 60  # nothing pending
    assert spy.calls == ["send_task_success"]
    assert Task.objects.get(pk=task.pk).state == TaskState.COMPLETED
    assert execution_wait(execution_arn=task.execution_arn)["status"] == "SUCCEEDED"


# Refusals ----------------------------------------------------------------------------------


def test_a_second_undo_is_refused(invoice_machine, reviewer, undo_window, clock):
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    worker.task_undo(worker=reviewer, task_id=task.pk)

    with pytest.raises(Conflict, match="Cannot undo a task that is in progress"):
        worker.task_undo(worker=reviewer, task_id=task.pk)
    assert [e.action for e in Task.objects.get(pk=task.pk).events.all()].count("undo") == 1


def test_only_the_worker_who_decided_may_undo(
    invoice_machine, reviewer, make_worker, undo_window, clock
):
    peer = make_worker({"invoice-review": 3})
    boss = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)

    with pytest.raises(NotFound):  # a decided task of another is not the peer's to see
        worker.task_undo(worker=peer, task_id=task.pk)
    with pytest.raises(Conflict, match="You do not hold this task"):
        worker.task_undo(worker=boss, task_id=task.pk)
    assert Task.objects.get(pk=task.pk).state == TaskState.COMPLETING
    assert Outbox.objects.get(task=task).status == OutboxStatus.PENDING


def test_without_a_window_the_decision_is_due_at_once_and_undo_is_off(
    invoice_machine, reviewer, spy, settings, clock
):
    settings.INBOX_UNDO_SECONDS = 0
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    outbox = Outbox.objects.get(task=task)
    assert outbox.next_attempt_at == clock.now

    with pytest.raises(TooLateToUndo, match="Undo is off here"):
        worker.task_undo(worker=reviewer, task_id=task.pk)
    assert decision_undoable(user=reviewer) is None
    assert callback_send(outbox_id=outbox.pk) == SendResult.SENT
    assert spy.calls == ["send_task_success"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_undo_racing_the_sender_at_the_end_of_the_window_wins_or_loses_whole(
    invoice_machine, reviewer, spy, settings
):
    """Real time and real threads: the undo and the sender race as the window closes.

    Either the decision is withdrawn and never sent, or it is sent once and the undo is
    refused; never both, never neither. No sender process runs: the racing thread is the
    only sender.
    """
    settings.INBOX_UNDO_SECONDS = 1
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    outbox = Outbox.objects.get(task=task)
    due = outbox.next_attempt_at.timestamp()

    def sender() -> str:
        while True:
            result = callback_send(outbox_id=outbox.pk)
            if result != SendResult.SKIPPED or not Outbox.objects.filter(
                    pk=outbox.pk, status=OutboxStatus.PENDING).exists():
                return result
            time.sleep(0.001)

    def undoer() -> str:
        time.sleep(max(0.0, due - time.time() - 0.002))
        worker.task_undo(worker=reviewer, task_id=task.pk)
        return "undone"

    results, errors = race(lambda run: run(), [sender, undoer])

    outbox.refresh_from_db()
    fresh = Task.objects.get(pk=task.pk)
    if outbox.status == OutboxStatus.WITHDRAWN:
        assert sorted(results) == sorted(["undone", SendResult.SKIPPED]) and errors == []
        assert (fresh.state, spy.calls) == (TaskState.IN_PROGRESS, [])
    else:
        assert results == [SendResult.SENT]
        assert [type(exc) for exc in errors] == [TooLateToUndo]
        assert (fresh.state, spy.calls) == (TaskState.COMPLETED, ["send_task_success"])


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_undo_racing_the_drain_at_the_end_of_the_window_wins_or_loses_whole(
    invoice_machine, reviewer, spy, settings
):
    """As the race above, with the outbox drain's batch claim as the sender.

    The drain's grace is 0, so the drain takes the row as soon as its window closes, as
    the callbacks' sender does (outbox_relay).
    """
    settings.INBOX_UNDO_SECONDS = 1
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    task = _held(invoice_machine, reviewer)
    worker.task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    outbox = Outbox.objects.get(task=task)
    due = outbox.next_attempt_at.timestamp()

    def drainer() -> int:
        while True:
            handled = outbox_drain()
            if handled or not Outbox.objects.filter(
                    pk=outbox.pk, status=OutboxStatus.PENDING).exists():
                return handled
            time.sleep(0.001)

    def undoer() -> str:
        time.sleep(max(0.0, due - time.time() - 0.002))
        worker.task_undo(worker=reviewer, task_id=task.pk)
        return "undone"

    results, errors = race(lambda run: run(), [drainer, undoer])

    outbox.refresh_from_db()
    fresh = Task.objects.get(pk=task.pk)
    if outbox.status == OutboxStatus.WITHDRAWN:
        assert sorted(results, key=str) == sorted([0, "undone"], key=str) and errors == []
        assert (fresh.state, spy.calls) == (TaskState.IN_PROGRESS, [])
    else:
        assert results == [1]
        assert [type(exc) for exc in errors] == [TooLateToUndo]
        assert (outbox.status, outbox.attempts) == (OutboxStatus.SENT, 1)
        assert (fresh.state, spy.calls) == (TaskState.COMPLETED, ["send_task_success"])


# The page and the API ----------------------------------------------------------------------


def test_the_next_page_offers_undo_and_the_undo_gives_the_answer_back(
    invoice_machine, reviewer, browser_for, undo_window, clock
):
    task = _held(invoice_machine, reviewer)
    client = browser_for(reviewer)
    answer = {"decision": "reject", "comment": "Duplicate of INV-0."}

    response = client.post(reverse("inbox:task-complete", args=[task.pk]),
                           {"version": task.version, **answer}, follow=True)

    page = response.content.decode()
    assert response.redirect_chain[-1][0] == reverse("inbox:home")
    assert f'action="{reverse("inbox:task-undo", args=[task.pk])}"' in page
    assert "5 s left" in page and 'data-shortcut="z"' in page

    clock.advance(seconds=2)
    decided = Task.objects.get(pk=task.pk)
    response = client.post(reverse("inbox:task-undo", args=[task.pk]),
                           {"version": decided.version}, follow=True)

    page = response.content.decode()
    assert response.redirect_chain[-1][0] == reverse("inbox:task", args=[task.pk])
    assert "nothing was sent to Step Functions" in page
    assert Task.objects.get(pk=task.pk).state == TaskState.IN_PROGRESS
    assert "Duplicate of INV-0." in page  # the answer taken back, in its field again
    assert f'action="{reverse("inbox:task-undo", args=[task.pk])}"' not in page


def test_a_late_undo_on_the_page_says_why(invoice_machine, reviewer, browser_for, undo_window,
                                          clock):
    task = _held(invoice_machine, reviewer)
    client = browser_for(reviewer)
    client.post(reverse("inbox:task-complete", args=[task.pk]),
                {"version": task.version, "decision": "approve"})
    clock.advance(seconds=WINDOW)

    response = client.post(reverse("inbox:task-undo", args=[task.pk]), follow=True)

    assert "Too late to undo" in response.content.decode()
    assert Task.objects.get(pk=task.pk).state == TaskState.COMPLETING


def test_the_api_undoes_within_the_window_and_refuses_after_it(
    invoice_machine, reviewer, api_client, undo_window, clock
):
    task = _held(invoice_machine, reviewer)
    client = api_client(reviewer)
    url = f"/api/inbox/tasks/{task.pk}/"
    assert client.post(url + "complete/", {"answer": APPROVE}, format="json").status_code == 200

    response = client.post(url + "undo/", {}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["state"], response.json()["answer"]) == ("in_progress", None)
    again = client.post(url + "undo/", {}, format="json")
    assert (again.status_code, again.json()["code"]) == (409, "illegal_transition")

    assert client.post(url + "complete/", {"answer": APPROVE}, format="json").status_code == 200
    clock.advance(seconds=WINDOW)
    late = client.post(url + "undo/", {}, format="json")
    assert (late.status_code, late.json()["code"]) == (409, "too_late_to_undo")
    assert "Too late to undo" in late.json()["detail"]


def test_the_undo_endpoint_is_in_the_openapi_schema(browser_for, reviewer):
    schema = browser_for(reviewer).get("/api/schema/", HTTP_ACCEPT="application/json")
    schema = schema.content.decode()
    assert "/api/inbox/tasks/{task_id}/undo/" in schema
