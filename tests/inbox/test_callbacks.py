"""The callback outbox against real executions on the emulator.

Tasks are made the way production makes them: an execution of the invoice process waits
at its review stage, its envelope goes through ``intake_message``, a reviewer takes the
task and completes or rejects it through the lifecycle. The only patches are on the
boto3 client's SendTask* methods, to count calls and to inject what the emulator cannot
do on demand (throttling, 5xx, a lost response, AWS's TaskTimedOut); each test says so.
"""

import datetime
import json
import logging
import math
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from botocore.exceptions import ClientError, ReadTimeoutError
from django.conf import settings
from django.core.cache.backends.redis import RedisCache
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import User
from accounts.services import skill_ensure
from inbox import effects, ratelimit
from inbox.callback_history import history_task_outcome
from inbox.lifecycle import transition
from inbox.models import Outbox, OutboxKind, OutboxStatus, Task, TaskState
from inbox.ratelimit import counter_increment, rate_take
from inbox.services import callback as callbacks
from inbox.services.admin import outbox_requeue
from inbox.services.callback import (
    OUTPUT_MAX_BYTES,
    SendResult,
    backoff_seconds,
    callback_problem,
    callback_send,
    outbox_drain,
    outbox_relay,
)
from inbox.services.intake import intake_message
from processes import aws
from tests.concurrency import race
from tests.sfn import (
    APPROVE,
    SMALL_INVOICE,
    execution_wait,
    invoice_machine_deploy,
    task_message_wait,
    unique,
)

# Real executions and tasks ----------------------------------------------------------------


@pytest.fixture(scope="module")
def invoice_machine(emulator) -> str:
    return invoice_machine_deploy()


@dataclass
class Review:
    """A review task of a real execution, and the plaintext token its envelope carried."""

    task: Task
    token: str
    execution: str


def _review(machine: str, invoice: dict | None = None) -> Review:
    """Start an execution and take its review envelope in through the intake."""
    skill_ensure(slug="invoice-review", name="Invoice review")
    execution = aws.execution_start(
        state_machine_arn=machine, name=unique("cb"), input=invoice or SMALL_INVOICE
    )
    envelope = task_message_wait(execution_arn=execution, stage="review")
    outcome = intake_message(message={
        "MessageId": str(uuid.uuid4()), "Body": json.dumps(envelope),
        "Attributes": {"ApproximateReceiveCount": "1"},
    })
    assert outcome == "created"
    task = Task.objects.get(execution_arn=execution, stage="review")
    return Review(task=task, token=envelope["taskToken"], execution=execution)


def _taken(review: Review, worker: User) -> Task:
    return transition(task_id=review.task.pk, action="claim", actor=worker)


def _complete(review: Review, worker: User, answer: dict | None = None) -> Outbox:
    task = _taken(review, worker)
    transition(task_id=task.pk, action="complete", actor=worker, answer=answer or APPROVE)
    return Outbox.objects.get(task=review.task)


def _reject(review: Review, worker: User, reason: str = "wrong supplier") -> Outbox:
    task = _taken(review, worker)
    transition(task_id=task.pk, action="reject", actor=worker, reason=reason)
    return Outbox.objects.get(task=review.task)


def _task_outcomes(execution: str) -> list[dict]:
    return [e for e in aws.execution_history(execution_arn=execution)
            if e["type"] in {"TaskSucceeded", "TaskFailed", "TaskTimedOut"}]


# Injection at the boto3 client ---------------------------------------------------------------


def _client_error(code: str, status: int, message: str = "injected") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": message},
         "ResponseMetadata": {"HTTPStatusCode": status}},
        "SendTaskSuccess",
    )


Step = Callable[[Callable[..., Any], dict], Any]


def fail_with(code: str, status: int, message: str = "injected") -> Step:
    def step(real: Callable[..., Any], params: dict) -> Any:
        raise _client_error(code, status, message)

    return step


def lose_response(real: Callable[..., Any], params: dict) -> Any:
    """Make the call for real, then lose its response (a read timeout)."""
    real(**params)
    raise ReadTimeoutError(endpoint_url=settings.AWS_ENDPOINT_URL)


def crash(real: Callable[..., Any], params: dict) -> Any:
    raise RuntimeError("the worker died mid-call")


class SendTaskSpy:
    """Wrap the shared boto3 client's SendTask* methods: count calls, play injected steps.

    plan: steps for the next calls in order; by_token: a step for the next call with that
    token (for a drain's concurrent sends, whose order is not known); before_call: run
    (under the spy's lock) as each call begins.
    """

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        self.tokens: list[str] = []
        self.plan: list[Step] = []
        self.by_token: dict[str, Step] = {}
        self.before_call: Callable[[], None] | None = None
        self._lock = threading.Lock()
        client = aws.client(service="stepfunctions")
        for name in ("send_task_success", "send_task_failure"):
            monkeypatch.setattr(client, name, self._wrap(name, getattr(client, name)))

    def _wrap(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(**params: Any) -> Any:
            with self._lock:
                self.calls.append(name)
                self.tokens.append(params["taskToken"])
                if self.before_call is not None:
                    self.before_call()
                step = self.by_token.pop(params["taskToken"], None) or (
                    self.plan.pop(0) if self.plan else None)
            return step(real, params) if step else real(**params)

        return call


@pytest.fixture
def spy(monkeypatch) -> SendTaskSpy:
    return SendTaskSpy(monkeypatch)


@pytest.fixture
def fast_retries(settings) -> None:
    """Retries are due at once (zero backoff), so a test need not wait for them."""
    settings.INBOX_CALLBACK_BACKOFF_BASE_SECONDS = 0


class RawRecords(logging.Handler):
    """Capture records before any handler's filter (the redactor) rewrites them."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.texts: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        self.texts.append(text)


@pytest.fixture
def raw_logs(caplog) -> Iterator[RawRecords]:
    caplog.set_level(logging.DEBUG)
    handler = RawRecords()
    root = logging.getLogger()
    root.handlers.insert(0, handler)
    try:
        yield handler
    finally:
        root.removeHandler(handler)


# Delivery --------------------------------------------------------------------------------


@pytest.mark.emulator
def test_completed_task_lands_once_and_the_execution_moves_on(invoice_machine, reviewer, spy):
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)
    assert (outbox.kind, outbox.status, outbox.attempts) == (OutboxKind.SUCCESS, "pending", 0)

    assert callback_send(outbox_id=outbox.pk) == SendResult.SENT

    done = execution_wait(execution_arn=review.execution)
    assert done["status"] == "SUCCEEDED"
    assert json.loads(done["output"])["stages"]["review"]["answer"] == APPROVE
    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts, outbox.last_error) == (OutboxStatus.SENT, 1, "")
    assert outbox.sent_at is not None
    task = Task.objects.get(pk=review.task.pk)
    assert task.state == TaskState.COMPLETED and task.closed_at is not None
    assert [e.action for e in task.events.order_by("version")][-2:] == ["complete", "delivered"]
    assert spy.calls == ["send_task_success"]
    assert [e["type"] for e in _task_outcomes(review.execution)] == ["TaskSucceeded"]


@pytest.mark.emulator
def test_rejected_task_sends_human_task_rejected_and_follows_the_rejection_path(
    invoice_machine, reviewer
):
    review = _review(invoice_machine)
    outbox = _reject(review, reviewer, reason="duplicate invoice")
    assert (outbox.kind, outbox.error) == (OutboxKind.FAILURE, "HumanTask.Rejected")

    assert callback_send(outbox_id=outbox.pk) == SendResult.SENT

    done = execution_wait(execution_arn=review.execution)
    assert (done["status"], done.get("error")) == ("FAILED", "Invoice.Rejected")
    [failed] = _task_outcomes(review.execution)
    assert failed["taskFailedEventDetails"]["error"] == "HumanTask.Rejected"
    task = Task.objects.get(pk=review.task.pk)
    assert (task.state, task.reason) == (TaskState.REJECTED, "duplicate invoice")


@pytest.mark.emulator
def test_sending_the_same_row_twice_calls_step_functions_once(invoice_machine, reviewer, spy):
    """The spy only counts calls to the boto3 client; every call reaches the emulator."""
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)

    results = [callback_send(outbox_id=outbox.pk) for _ in range(2)]

    assert results == [SendResult.SENT, SendResult.SKIPPED]
    assert spy.calls == ["send_task_success"]
    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.SENT, 1)


@pytest.mark.emulator
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_of_eight_racing_senders_exactly_one_calls_step_functions(
    invoice_machine, reviewer, spy
):
    """Eight threads send one row at once; the spy counts calls to the boto3 client.

    No sender process runs: the threads are the only senders.
    """
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)

    results, errors = race(lambda _: callback_send(outbox_id=outbox.pk), range(8))

    assert errors == []
    assert Counter(results) == {SendResult.SENT: 1, SendResult.SKIPPED: 7}
    assert spy.calls == ["send_task_success"]
    assert execution_wait(execution_arn=review.execution)["status"] == "SUCCEEDED"
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETED


def test_the_sender_builds_its_step_functions_client_before_its_first_round(db, monkeypatch):
    """Building a client costs tens of milliseconds of CPU: the process pays it as it
    starts, not the first answer it sends."""
    from inbox.management.commands import callbacks_run

    built: list[str] = []
    seen: list[list[str]] = []
    monkeypatch.setattr(aws, "client", lambda *, service, probe=False: built.append(service))

    def relay(*, most: float) -> float:
        seen.append(list(built))
        return most

    monkeypatch.setattr(callbacks_run, "outbox_relay", relay)
    call_command("callbacks_run", "--once")
    assert seen == [["stepfunctions"]]


@pytest.mark.emulator
def test_a_completion_is_sent_by_one_round_of_the_sender_command(
    invoice_machine, reviewer, spy, eager_celery, django_capture_on_commit_callbacks, capsys
):
    """Celery runs eagerly here: had the commit enqueued a send, it would have run at once.
    It enqueues none; one round of manage.py callbacks_run sends the row."""
    review = _review(invoice_machine)

    with django_capture_on_commit_callbacks(execute=True):
        outbox = _complete(review, reviewer)
    assert spy.calls == []
    outbox.refresh_from_db()
    assert outbox.status == OutboxStatus.PENDING

    call_command("callbacks_run", "--once")

    assert capsys.readouterr().out == "callbacks: one round done, next in 0.000 s\n"
    assert spy.calls == ["send_task_success"]
    assert execution_wait(execution_arn=review.execution)["status"] == "SUCCEEDED"
    outbox.refresh_from_db()
    assert outbox.status == OutboxStatus.SENT
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETED


@pytest.fixture
def held_call(spy):
    """Hold the next SendTask call of a token until released (at the latest after 5 s, so
    a sender that waits for it fails the test instead of hanging it)."""
    began, release = threading.Event(), threading.Event()

    def hold(token: str) -> None:
        def hang(real: Callable[..., Any], params: dict[str, Any]) -> Any:
            began.set()
            release.wait(5)
            return real(**params)

        spy.by_token[token] = hang

    timer = threading.Timer(5, release.set)
    timer.start()
    yield hold, began, release
    release.set()
    timer.cancel()


@pytest.mark.emulator
def test_a_slow_call_of_the_sender_holds_back_only_itself(invoice_machine, reviewer, spy,
                                                          held_call, monkeypatch):
    """A round of the sender waits for its calls at most CALL_WAIT_SECONDS: while one
    answer's call hangs, an answer that falls due after it is claimed, sent and recorded
    by the next round; the first is recorded by the round after its call returned. (A
    round that waited for every call would return only once the hold ran out, the first
    already recorded and nothing left late.)"""
    monkeypatch.setattr(callbacks, "CALL_WAIT_SECONDS", 0.05)
    hold, began, release = held_call
    first, second = _review(invoice_machine), _review(invoice_machine)
    hold(first.token)
    sender = callbacks.Sender()
    try:
        held = _complete(first, reviewer)
        # Claimed and sent; its call hangs, so the round goes on without it and looks
        # again at once.
        assert sender.round(most=60) == 0.0
        assert began.is_set() and not release.is_set() and len(sender.late) == 1
        assert sender.round(most=60) == callbacks.LATE_LOOK_SECONDS  # nothing else due
        answered = _complete(second, reviewer)
        assert sender.round(most=60) == 0.0
        assert not release.is_set()
        answered.refresh_from_db()
        held.refresh_from_db()
        assert (answered.status, held.status) == (OutboxStatus.SENT, OutboxStatus.PENDING)
        assert held.attempts == 1  # claimed, its call out: its lease keeps it from others
        assert callbacks.outbox_drain(grace_seconds=0) == 0
        assert Task.objects.get(pk=second.task.pk).state == TaskState.COMPLETED
        assert Task.objects.get(pk=first.task.pk).state == TaskState.COMPLETING
        release.set()
        deadline = time.monotonic() + 30
        while sender.late and time.monotonic() < deadline:
            sender.round(most=60)  # records the first once its call has returned
            time.sleep(0.01)
        assert sender.late == []
    finally:
        sender.close()
    held.refresh_from_db()
    assert held.status == OutboxStatus.SENT
    assert Task.objects.get(pk=first.task.pk).state == TaskState.COMPLETED
    assert spy.calls == ["send_task_success", "send_task_success"]


@pytest.mark.emulator
def test_the_sender_leaves_at_most_a_batch_of_calls_out(invoice_machine, reviewer, spy,
                                                        held_call, monkeypatch):
    """Calls left out take room from the next claims: no more than a batch's worth of
    claimed rows wait for a thread, so none waits past its lease before its call starts."""
    monkeypatch.setattr(callbacks, "CALL_WAIT_SECONDS", 0.05)
    monkeypatch.setattr(callbacks, "RELAY_BATCH", 1)
    hold, began, release = held_call
    first, second = _review(invoice_machine), _review(invoice_machine)
    hold(first.token)
    sender = callbacks.Sender()
    try:
        _complete(first, reviewer)
        assert sender.round(most=60) == 0.0
        assert began.is_set() and sender.out() == 1
        waiting = _complete(second, reviewer)
        assert sender.round(most=60) == callbacks.LATE_LOOK_SECONDS
        waiting.refresh_from_db()
        assert (waiting.status, waiting.attempts) == (OutboxStatus.PENDING, 0)  # unclaimed
        release.set()
        deadline = time.monotonic() + 30
        while (Outbox.objects.filter(status=OutboxStatus.PENDING).exists()
               and time.monotonic() < deadline):
            sender.round(most=60)
            time.sleep(0.01)
    finally:
        sender.close()
    assert set(Outbox.objects.values_list("status", flat=True)) == {OutboxStatus.SENT}
    assert spy.calls == ["send_task_success", "send_task_success"]


@pytest.mark.emulator
def test_stopping_the_sender_records_the_calls_still_out(invoice_machine, reviewer, spy,
                                                         held_call, monkeypatch):
    """close(), as the process stops, waits for the calls left on their way and records
    them: none is left for the lease to bring back."""
    monkeypatch.setattr(callbacks, "CALL_WAIT_SECONDS", 0.05)
    hold, began, release = held_call
    review = _review(invoice_machine)
    hold(review.token)
    sender = callbacks.Sender()
    held = _complete(review, reviewer)
    assert sender.round(most=60) == 0.0
    assert began.is_set() and len(sender.late) == 1
    threading.Timer(0.2, release.set).start()
    sender.close()
    held.refresh_from_db()
    assert held.status == OutboxStatus.SENT and sender.late == []
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETED


# Retries ---------------------------------------------------------------------------------


@pytest.mark.emulator
@pytest.mark.parametrize(("code", "status"), [("ThrottlingException", 400),
                                              ("ServiceUnavailable", 503)])
def test_throttled_or_failing_send_is_retried_and_lands_once(
    invoice_machine, reviewer, spy, fast_retries, code, status
):
    """The first SendTaskSuccess is refused by a patched boto3 client method; the rest are real."""
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)
    spy.plan = [fail_with(code, status)]

    assert callback_send(outbox_id=outbox.pk) == SendResult.RETRY
    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.PENDING, 1)
    assert code in outbox.last_error
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETING

    assert outbox_drain() == 1

    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.SENT, 2)
    assert spy.calls == ["send_task_success", "send_task_success"]
    assert [e["type"] for e in _task_outcomes(review.execution)] == ["TaskSucceeded"]
    assert execution_wait(execution_arn=review.execution)["status"] == "SUCCEEDED"
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETED


@pytest.mark.emulator
def test_retries_are_bounded_then_the_row_is_dead_and_can_be_requeued(
    invoice_machine, reviewer, spy, fast_retries, settings
):
    """A patched boto3 client method throttles the first three calls; the fourth is real."""
    settings.INBOX_CALLBACK_MAX_ATTEMPTS = 3
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)
    spy.plan = [fail_with("ThrottlingException", 400)] * 3

    results = [callback_send(outbox_id=outbox.pk) for _ in range(4)]

    assert results == [SendResult.RETRY, SendResult.RETRY, SendResult.DEAD, SendResult.SKIPPED]
    outbox.refresh_from_db()
    assert outbox.status == OutboxStatus.DEAD
    assert outbox.last_error.startswith("Gave up after 3 attempts: ")
    assert "ThrottlingException" in outbox.last_error
    # Not dropped: the task still waits for its callback, visible to the admins.
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETING

    assert outbox_requeue(outbox_id=outbox.pk) is True
    assert outbox_requeue(outbox_id=outbox.pk) is False
    # Due at once: the sender's next round sends it (no message, no drain grace).
    assert outbox_relay(most=60) == 0.0
    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.SENT, 1)
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETED


@pytest.mark.emulator
def test_a_client_error_is_dead_at_once(invoice_machine, reviewer, spy):
    """A patched boto3 client method answers AccessDeniedException (HTTP 400)."""
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)
    spy.plan = [fail_with("AccessDeniedException", 400, "not authorized")]

    assert callback_send(outbox_id=outbox.pk) == SendResult.DEAD

    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.DEAD, 1)
    assert "AccessDeniedException" in outbox.last_error
    assert aws.execution_describe(execution_arn=review.execution)["status"] == "RUNNING"
    # The task's history says why it stays completing.
    last = outbox.task.events.order_by("-version").first()
    assert (last.action, last.to_state) == ("callback_failed", "completing")
    assert "AccessDeniedException" in last.reason


@pytest.mark.emulator
def test_output_over_256_kib_is_dead_without_a_call(invoice_machine, reviewer, spy):
    """The emulator would accept it and fail the execution later; AWS refuses it."""
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer, answer={"decision": "approve", "comment": "x" * 270_000})

    assert callback_send(outbox_id=outbox.pk) == SendResult.DEAD

    outbox.refresh_from_db()
    assert outbox.status == OutboxStatus.DEAD
    assert "256 KiB" in outbox.last_error and "not sent" in outbox.last_error
    assert spy.calls == []
    assert aws.execution_describe(execution_arn=review.execution)["status"] == "RUNNING"


def test_callback_problem_names_what_step_functions_would_refuse():
    assert callback_problem(kind=OutboxKind.SUCCESS, output={"a": [1, "ü"]}, error="",
                            cause="") is None
    assert "not valid JSON" in callback_problem(kind=OutboxKind.SUCCESS,
                                                output={"score": math.nan}, error="", cause="")
    assert "not valid JSON" in callback_problem(kind=OutboxKind.SUCCESS,
                                                output={"at": datetime.date(2025, 1, 1)},
                                                error="", cause="")
    # Measured as sent: non-ASCII characters travel as \\u escapes (6 bytes each).
    assert "256 KiB" in callback_problem(kind=OutboxKind.SUCCESS,
                                         output={"c": "é" * (OUTPUT_MAX_BYTES // 6)},
                                         error="", cause="")
    assert callback_problem(kind=OutboxKind.FAILURE, output=None, error="HumanTask.Rejected",
                            cause="x" * 32_768) is None
    assert "cause" in callback_problem(kind=OutboxKind.FAILURE, output=None, error="E",
                                       cause="x" * 32_769)
    assert "error name" in callback_problem(kind=OutboxKind.FAILURE, output=None,
                                            error="E" * 257, cause="")
    assert "error name" in callback_problem(kind=OutboxKind.FAILURE, output=None, error="",
                                            cause="")


def test_backoff_is_exponential_capped_and_jittered(settings):
    settings.INBOX_CALLBACK_BACKOFF_BASE_SECONDS = 2
    settings.INBOX_CALLBACK_BACKOFF_MAX_SECONDS = 300
    for attempt, ceiling in [(1, 2), (2, 4), (5, 32), (9, 300), (30, 300)]:
        delays = [backoff_seconds(attempt=attempt) for _ in range(200)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > ceiling / 2  # full jitter spreads over the whole range


# Reconciliation --------------------------------------------------------------------------


@pytest.mark.emulator
def test_a_lost_response_is_reconciled_from_the_history(
    invoice_machine, reviewer, spy, fast_retries
):
    """The first call lands but its response is lost (a patched boto3 client method calls
    the emulator, then raises a read timeout); the retry reuses the token, which the
    emulator refuses with InvalidToken (AWS: TaskTimedOut)."""
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)
    spy.plan = [lose_response]

    assert callback_send(outbox_id=outbox.pk) == SendResult.RETRY
    assert callback_send(outbox_id=outbox.pk) == SendResult.RECONCILED

    outbox.refresh_from_db()
    assert outbox.status == OutboxStatus.RECONCILED
    assert outbox.sent_at is not None and "already accepted" in outbox.last_error
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETED
    assert [e["type"] for e in _task_outcomes(review.execution)] == ["TaskSucceeded"]
    assert execution_wait(execution_arn=review.execution)["status"] == "SUCCEEDED"


@pytest.mark.emulator
def test_the_history_shows_a_task_by_its_token_or_else_by_its_entry_time(invoice_machine, db):
    review = _review(invoice_machine, {**SMALL_INVOICE, "amount": 20_000})
    aws.task_success(token=review.token, output={"answer": APPROVE})
    approval = task_message_wait(execution_arn=review.execution, stage="approval")
    history = aws.execution_history(execution_arn=review.execution)

    outcome = history_task_outcome(history=history, token=review.token, stage="review",
                                   entered_at=review.task.entered_at)
    assert outcome is not None and outcome["type"] == "TaskSucceeded"
    assert json.loads(outcome["taskSucceededEventDetails"]["output"]) == {"answer": APPROVE}
    approval_entered = datetime.datetime.fromisoformat(approval["enteredAt"])
    assert history_task_outcome(history=history, token=approval["taskToken"],
                                stage="approval", entered_at=approval_entered) is None

    # Read without execution data, TaskScheduled carries no parameters (and no token).
    bare = [
        {**e, "taskScheduledEventDetails": {**e["taskScheduledEventDetails"], "parameters": ""}}
        if e["type"] == "TaskScheduled" else e
        for e in history
    ]
    assert history_task_outcome(history=bare, token=review.token, stage="review",
                                entered_at=review.task.entered_at) == outcome
    later = review.task.entered_at + datetime.timedelta(minutes=5)
    assert history_task_outcome(history=bare, token=review.token, stage="review",
                                entered_at=later) is None


@pytest.mark.emulator
def test_a_token_answered_elsewhere_expires_the_task_with_why(invoice_machine, reviewer):
    """Someone else answered the stage first; the emulator refuses the reused token."""
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)
    aws.task_success(token=review.token, output={"answer": {"decision": "reject"}})

    assert callback_send(outbox_id=outbox.pk) == SendResult.EXPIRED

    outbox.refresh_from_db()
    assert (outbox.status, outbox.sent_at) == (OutboxStatus.RECONCILED, None)
    assert outbox.last_error.startswith("Not delivered: Step Functions received another answer")
    task = Task.objects.get(pk=review.task.pk)
    assert task.state == TaskState.EXPIRED
    assert task.reason.startswith("Step Functions received another answer for this stage")


@pytest.mark.emulator
@pytest.mark.parametrize("refusal", ["emulator", "aws"])
def test_a_stage_that_timed_out_expires_the_task_with_why(emulator, reviewer, spy, refusal):
    """The review stage times out after 1 s and the execution takes its timeout path.

    "emulator": the emulator's own answer to the late token (InvalidToken). "aws": a
    patched boto3 client method answers TaskTimedOut, as AWS does.
    """
    machine = invoice_machine_deploy(stage_timeout=1)
    review = _review(machine)
    done = execution_wait(execution_arn=review.execution, timeout=15)
    assert (done["status"], done.get("error")) == ("FAILED", "Invoice.TimedOut")
    outbox = _complete(review, reviewer)
    if refusal == "aws":
        spy.plan = [fail_with("TaskTimedOut", 400, "Task Timed Out")]

    assert callback_send(outbox_id=outbox.pk) == SendResult.EXPIRED

    task = Task.objects.get(pk=review.task.pk)
    assert task.state == TaskState.EXPIRED
    assert task.reason.startswith("The stage timed out in Step Functions (States.Timeout)")
    outbox.refresh_from_db()
    assert outbox.status == OutboxStatus.RECONCILED and outbox.sent_at is None


@pytest.mark.emulator
def test_an_execution_that_timed_out_expires_the_task_with_why(emulator, reviewer):
    machine = invoice_machine_deploy(execution_timeout=1)
    review = _review(machine)
    assert execution_wait(execution_arn=review.execution, timeout=15)["status"] == "TIMED_OUT"
    # A success: the emulator accepts a late SendTaskFailure for an ended execution.
    outbox = _complete(review, reviewer)

    assert callback_send(outbox_id=outbox.pk) == SendResult.EXPIRED

    task = Task.objects.get(pk=review.task.pk)
    assert (task.state, task.reason) == (
        TaskState.EXPIRED, "Step Functions no longer waits: execution TIMED_OUT."
    )


# The outbox drain ------------------------------------------------------------------------


@pytest.mark.emulator
def test_a_crash_between_commit_and_send_is_recovered_by_the_drain(
    invoice_machine, reviewer, settings
):
    """The test's transaction never commits, so the on-commit enqueue never runs: the
    row is pending and nothing was sent, as after a crash right after the commit."""
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)

    # A fresh row belongs to its on-commit task for a grace period.
    assert outbox_drain() == 0
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    assert outbox_drain() == 1

    outbox.refresh_from_db()
    assert outbox.status == OutboxStatus.SENT
    assert execution_wait(execution_arn=review.execution)["status"] == "SUCCEEDED"
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETED
    assert outbox_drain() == 0


@pytest.mark.emulator
def test_a_sender_that_dies_mid_call_is_replaced_when_its_lease_runs_out(
    invoice_machine, reviewer, spy, settings
):
    """A patched boto3 client method raises as if the worker died during the call."""
    settings.INBOX_CALLBACK_LEASE_SECONDS = 0
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)
    spy.plan = [crash]

    with pytest.raises(RuntimeError):
        callback_send(outbox_id=outbox.pk)
    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.PENDING, 1)

    assert outbox_drain() == 1
    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.SENT, 2)
    assert Task.objects.get(pk=review.task.pk).state == TaskState.COMPLETED


@pytest.mark.emulator
def test_a_drain_of_a_backlog_sends_each_row_once(invoice_machine, reviewer, spy, settings):
    """The spy records the token of each call to the boto3 client; every call is real."""
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    reviews = [_review(invoice_machine) for _ in range(7)]
    for number, review in enumerate(reviews):
        (_complete if number % 2 else _reject)(review, reviewer)

    handled = []
    while handled[-1:] != [0]:
        handled.append(outbox_drain(batch=3))

    assert handled == [3, 3, 1, 0]
    assert Counter(spy.tokens) == Counter({review.token: 1 for review in reviews})
    rows = Outbox.objects.filter(task__in=[review.task for review in reviews])
    assert {(row.status, row.attempts) for row in rows} == {(OutboxStatus.SENT, 1)}
    for number, review in enumerate(reviews):
        state = Task.objects.get(pk=review.task.pk).state
        assert state == (TaskState.COMPLETED if number % 2 else TaskState.REJECTED)
        assert [e["type"] for e in _task_outcomes(review.execution)] == [
            "TaskSucceeded" if number % 2 else "TaskFailed"]
        assert [e.action for e in review.task.events.order_by("version")][-1] == "delivered"


@pytest.mark.emulator
@pytest.mark.parametrize(("batch", "helpers", "asked"), [
    (3, 1, [1]),  # the first batch comes full: a backlog; one ask, however many batches
    (3, 0, []),  # a helper, or INBOX_OUTBOX_DRAINS = 1: no ask
    (10, 1, []),  # the first batch is not full: no backlog, no ask
])
def test_a_drain_asks_for_helpers_only_when_its_first_batch_comes_full(
    invoice_machine, reviewer, spy, settings, monkeypatch, batch, helpers, asked
):
    """The ask is recorded (patched), not sent; every call to Step Functions is real."""
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    requests: list[int] = []
    monkeypatch.setattr(effects, "drain_helpers_request",
                        lambda *, count, expires: requests.append(count))
    reviews = [_review(invoice_machine) for _ in range(7)]
    for review in reviews:
        _complete(review, reviewer)

    assert outbox_drain(batch=batch, budget_seconds=30, helpers=helpers) == 7

    assert requests == asked
    assert Counter(spy.tokens) == Counter({review.token: 1 for review in reviews})


@pytest.mark.emulator
def test_the_beat_drain_and_its_helper_send_a_backlog_once(
    invoice_machine, reviewer, spy, settings, monkeypatch, eager_celery
):
    """Beat's drain finds a backlog and asks for one helper: outbox_drain_task again, run
    here at once (eager Celery) through the real enqueue. The helper drains what the first
    drain did not claim and asks for none; each row is sent once. outbox_drain is wrapped
    to record each drain's helpers and what it handled."""
    from inbox import tasks

    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    settings.INBOX_OUTBOX_DRAINS = 2
    monkeypatch.setattr(tasks, "DRAIN_BATCH", 3)
    monkeypatch.setattr(effects, "enqueue", lambda name, *arguments: None)  # drains only
    drains: list[tuple[int, int]] = []
    real = tasks.outbox_drain

    def recorded(**kwargs):
        handled = real(**kwargs)
        drains.append((kwargs["helpers"], handled))
        return handled

    monkeypatch.setattr(tasks, "outbox_drain", recorded)
    reviews = [_review(invoice_machine) for _ in range(7)]
    for review in reviews:
        _complete(review, reviewer)

    assert tasks.outbox_drain_task() == 3

    assert drains == [(0, 4), (1, 3)]  # the helper ended first: it ran inside the ask
    assert Counter(spy.tokens) == Counter({review.token: 1 for review in reviews})
    assert {(row.status, row.attempts) for row in Outbox.objects.all()} == {
        (OutboxStatus.SENT, 1)}


def test_a_failed_ask_for_helpers_is_logged_and_the_drain_goes_on(monkeypatch, caplog):
    """The broker refuses the helper's message (patched): logged with its traceback, and
    nothing raised to the drain that asked."""
    def refused(*args, **kwargs):
        raise ConnectionError("broker down")

    monkeypatch.setattr(effects.app.tasks[effects.DRAIN_TASK], "apply_async", refused)

    with caplog.at_level(logging.ERROR, logger="inbox.effects"):
        effects.drain_helpers_request(count=1, expires=4)

    assert [record.getMessage() for record in caplog.records
            if record.name == "inbox.effects"] == [
        "Asking for 1 more outbox drain(s) failed; this drain goes on alone"]
    assert "ConnectionError: broker down" in caplog.text  # the traceback, as logged


@pytest.mark.emulator
def test_a_batch_message_sends_its_due_rows_once_and_skips_the_rest(
    invoice_machine, reviewer, spy
):
    """callbacks_send (one Celery message for a batch's callbacks): each due pending row is
    sent once, one not yet due and one already sent are skipped, and sending the same ids
    again sends nothing."""
    reviews = [_review(invoice_machine) for _ in range(4)]
    rows = [(_complete if number % 2 else _reject)(review, reviewer)
            for number, review in enumerate(reviews)]
    assert callback_send(outbox_id=rows[0].pk) == SendResult.SENT  # already sent
    Outbox.objects.filter(pk=rows[1].pk).update(  # not yet due
        next_attempt_at=timezone.now() + datetime.timedelta(hours=1))
    spy.calls.clear()
    spy.tokens.clear()
    ids = [row.pk for row in rows]

    assert callbacks.callbacks_send(outbox_ids=ids) == 2
    assert callbacks.callbacks_send(outbox_ids=ids) == 0

    assert Counter(spy.tokens) == Counter({reviews[2].token: 1, reviews[3].token: 1})
    states = dict(Outbox.objects.filter(pk__in=ids).values_list("pk", "status"))
    assert [states[pk] for pk in ids] == [OutboxStatus.SENT, OutboxStatus.PENDING,
                                          OutboxStatus.SENT, OutboxStatus.SENT]
    for review in reviews[2:]:
        assert execution_wait(execution_arn=review.execution)["status"] in (
            "SUCCEEDED", "FAILED")
        assert [e.action for e in review.task.events.order_by("version")][-1] == "delivered"


@pytest.mark.emulator
@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_drains_at_once_never_send_a_row_twice(
    invoice_machine, reviewer, spy, settings, monkeypatch
):
    """Two threads drain one backlog at once, each in small batches with its own sender
    threads; the spy records the token of each call to the boto3 client. The on-commit
    enqueue is dropped (patched) so that the drains are the only senders."""
    monkeypatch.setattr(effects, "enqueue", lambda name, *arguments: None)
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    reviews = [_review(invoice_machine) for _ in range(12)]
    for review in reviews:
        _complete(review, reviewer)

    def drain(_: int) -> int:
        handled = 0
        while Outbox.objects.filter(status=OutboxStatus.PENDING).exists():
            handled += outbox_drain(batch=2)
        return handled

    results, errors = race(drain, range(2))

    assert errors == []
    assert sum(results) == len(reviews)
    assert Counter(spy.tokens) == Counter({review.token: 1 for review in reviews})
    assert {(row.status, row.attempts) for row in Outbox.objects.all()} == {
        (OutboxStatus.SENT, 1)}
    assert set(Task.objects.values_list("state", flat=True)) == {TaskState.COMPLETED}
    for review in reviews:
        assert [e["type"] for e in _task_outcomes(review.execution)] == ["TaskSucceeded"]


@pytest.mark.emulator
def test_a_throttled_send_among_the_batch_retries_only_that_row(
    invoice_machine, reviewer, spy, fast_retries, settings
):
    """A patched boto3 client method throttles the call with one row's token; the other
    calls, and that row's retry, are real."""
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    reviews = [_review(invoice_machine) for _ in range(4)]
    outboxes = [_complete(review, reviewer) for review in reviews]
    victim, victim_outbox = reviews[2], outboxes[2]
    spy.by_token[victim.token] = fail_with("ThrottlingException", 400)

    assert outbox_drain() == 4

    victim_outbox.refresh_from_db()
    assert (victim_outbox.status, victim_outbox.attempts) == (OutboxStatus.PENDING, 1)
    assert "ThrottlingException" in victim_outbox.last_error
    assert Task.objects.get(pk=victim.task.pk).state == TaskState.COMPLETING
    others = Outbox.objects.exclude(pk=victim_outbox.pk)
    assert {(row.status, row.attempts) for row in others} == {(OutboxStatus.SENT, 1)}

    assert outbox_drain() == 1

    victim_outbox.refresh_from_db()
    assert (victim_outbox.status, victim_outbox.attempts) == (OutboxStatus.SENT, 2)
    assert Counter(spy.tokens) == Counter(
        {review.token: 2 if review is victim else 1 for review in reviews})
    assert Task.objects.get(pk=victim.task.pk).state == TaskState.COMPLETED
    assert [e["type"] for e in _task_outcomes(victim.execution)] == ["TaskSucceeded"]


@pytest.mark.emulator
def test_the_statements_of_a_drain_do_not_grow_with_the_batch(
    invoice_machine, reviewer, spy, settings
):
    """Every call reaches the emulator; the drain's sender threads touch no database."""
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    statements = []
    for size in (2, 8):
        reviews = [_review(invoice_machine) for _ in range(size)]
        for number, review in enumerate(reviews):
            (_complete if number % 2 else _reject)(review, reviewer)
        with CaptureQueriesContext(connection) as queries:
            assert outbox_drain(batch=size) == size
        statements.append(len(queries))
        assert set(Outbox.objects.values_list("status", flat=True)) == {OutboxStatus.SENT}

    assert statements[0] == statements[1]
    assert len(spy.calls) == 10


@pytest.mark.emulator
def test_one_send_claims_and_reads_as_a_batch_does_and_never_reads_the_input(
    invoice_machine, reviewer, spy
):
    """The on-commit send of one decision: one claiming UPDATE, one read of what sending
    needs (not the task's input, answer or form), then the record of the outcome (which
    reads no input either); the same statements as a batch of one."""
    outbox = _complete(_review(invoice_machine), reviewer)
    with CaptureQueriesContext(connection) as queries:
        assert callback_send(outbox_id=outbox.pk) == SendResult.SENT
    sql = [q["sql"] for q in queries.captured_queries]
    assert sql[0].startswith('UPDATE "inbox_outbox"'), sql[0]
    assert sql[1].startswith("SELECT") and '"inbox_outbox"' in sql[1], sql[1]
    for column in ("input", "input_order", "answer", "form"):
        assert f'"inbox_task"."{column}"' not in sql[1], column
    for column in ("input", "input_order"):
        assert not any(f'"inbox_task"."{column}"' in statement for statement in sql), column
    assert len(spy.calls) == 1

    single = len(sql)
    other = _complete(_review(invoice_machine), reviewer)
    with CaptureQueriesContext(connection) as queries:
        assert callbacks.callbacks_send(outbox_ids=[other.pk]) == 1
    assert len(queries) == single


@pytest.mark.emulator
def test_the_limiter_is_asked_before_each_send(invoice_machine, reviewer, spy, settings,
                                               monkeypatch):
    """A spy wraps (and calls) the drain's rate limit; the spy on the boto3 client checks,
    as each call begins, that permits granted so far cover the calls so far."""
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    settings.INBOX_SENDTASK_RATE = 3
    reviews = [_review(invoice_machine) for _ in range(5)]
    for review in reviews:
        _complete(review, reviewer)
    asked, granted = [], Counter()
    real_rate_take = callbacks.rate_take

    def rate_take(**kwargs):
        permit = real_rate_take(**kwargs)
        asked.append(kwargs.get("count", 1))
        granted[permit.window] += permit.calls
        return permit

    covered = []
    spy.before_call = lambda: covered.append(sum(granted.values()) >= len(spy.calls))
    monkeypatch.setattr(callbacks, "rate_take", rate_take)

    assert outbox_drain(batch=10, budget_seconds=10) == 5

    assert covered == [True] * 5
    assert sum(granted.values()) == len(spy.calls) == 5
    assert max(granted.values()) <= 3
    # A batch asks for its permits at once: never more requests than windows it needed.
    assert max(asked) > 1 and len(asked) < 5
    assert set(Outbox.objects.values_list("status", flat=True)) == {OutboxStatus.SENT}


def test_a_batch_waits_for_the_next_window_whatever_its_jitter(monkeypatch):
    """Granted part of its permits early in a window, a batch waits for the
    next window even when the jitter added to that wait takes it past the bound: the
    bound is on the window's wait (max_wait from the last grant), the jitter only spreads
    the waiters."""
    from inbox.ratelimit import Permit

    answers = iter([Permit(granted=True, window=1, wait=0.97, calls=3),
                    Permit(granted=True, window=2, wait=0.97, calls=2)])
    monkeypatch.setattr(callbacks, "rate_take", lambda **_: next(answers))
    monkeypatch.setattr(callbacks.random, "uniform", lambda low, high: high)
    slept: list[float] = []
    monkeypatch.setattr(callbacks.time, "sleep", slept.append)
    released: list = []
    monkeypatch.setattr(callbacks, "_release", lambda rows, **_: released.extend(rows))

    class Pool:
        def submit(self, *args, **kwargs):
            return None

    rows = [(f"row-{index}", "token") for index in range(5)]
    sending = callbacks._send_start(Pool(), rows)
    assert released == [] and sending.held_back == []
    assert [row for row, _, _ in sending.calls] == [row for row, _ in rows]
    assert slept == [pytest.approx(0.97 + 0.05)]


# The SendTask* rate limit ----------------------------------------------------------------


def test_the_rate_limiter_never_lets_more_than_n_through_a_window():
    """Sixteen threads take permits as fast as they can from one limit of 10 per second."""
    name, limit = unique("rate"), 10
    takes, errors = race(lambda _: [rate_take(name=name, limit=limit) for _ in range(25)],
                         range(16))
    assert errors == []
    permits = [permit for taken in takes for permit in taken]

    granted = Counter(p.window for p in permits if p.granted)
    assert max(granted.values()) == limit
    assert all(count <= limit for count in granted.values())
    assert all(0 < p.wait <= 1 for p in permits if not p.granted)


def test_a_batch_of_permits_gets_what_the_window_has_left_in_one_take():
    """A window of a day, so that the three takes fall in one."""
    name, day = unique("rate"), 86400

    first, second, third = (rate_take(name=name, limit=10, window_seconds=day, count=count)
                            for count in (7, 7, 1))

    assert (first.granted, first.calls, first.wait) == (True, 7, 0.0)
    assert (second.granted, second.calls) == (True, 3) and 0 < second.wait <= day
    assert (third.granted, third.calls) == (False, 0) and 0 < third.wait <= day
    assert first.window == second.window == third.window


def test_batches_of_permits_never_let_more_than_n_through_a_window():
    """Sixteen threads take three permits at a time as fast as they can from a limit of 10."""
    name, limit = unique("rate"), 10
    takes, errors = race(
        lambda _: [rate_take(name=name, limit=limit, count=3) for _ in range(25)], range(16))
    assert errors == []
    permits = [permit for taken in takes for permit in taken]

    granted = Counter()
    for permit in permits:
        granted[permit.window] += permit.calls
    assert max(granted.values()) == limit
    assert all(0 <= p.calls <= 3 and p.granted == (p.calls > 0) for p in permits)
    assert all(0 < p.wait <= 1 for p in permits if p.calls < 3)


@pytest.fixture
def redis_cache(redis_cache_of):
    """Django's own RedisCache: the counter's round trips whatever the backend's client."""
    return redis_cache_of(RedisCache)


def test_a_redis_counter_is_one_round_trip_with_its_expiry(redis_cache, monkeypatch):
    """Django's add and incr took three (SET NX, EXISTS, INCRBY); one pipeline now."""
    import redis.connection

    redis_cache.get(unique("warm"))  # the connection's own handshake is not counted
    sends = []
    real_send = redis.connection.Connection.send_packed_command

    def send(self, command, *args, **kwargs):
        sends.append(command)
        return real_send(self, command, *args, **kwargs)

    monkeypatch.setattr(redis.connection.Connection, "send_packed_command", send)
    key = unique("window")

    assert counter_increment(cache=redis_cache, key=key, timeout=5) == 1
    assert len(sends) == 1
    assert counter_increment(cache=redis_cache, key=key, timeout=5, amount=2) == 3
    assert len(sends) == 2

    assert redis_cache.get(key) == 3  # Django's own read sees the counter
    client = redis_cache._cache.get_client(write=False)
    assert 0 < client.ttl(redis_cache.make_and_validate_key(key)) <= 5
    forever = unique("total")
    counter_increment(cache=redis_cache, key=forever, timeout=None, amount=4)
    assert redis_cache.get(forever) == 4
    assert client.ttl(redis_cache.make_and_validate_key(forever)) == -1  # no expiry


def test_an_unavailable_limits_store_at_start_is_logged_not_fatal(settings, caplog):
    """store_ready (the sender's and the clock's first step) warns as rate_take does."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": "redis://127.0.0.1:1/0"}}
    with caplog.at_level(logging.WARNING, logger="inbox.ratelimit"):
        ratelimit.store_ready()
    assert "Rate limit store unavailable at start" in caplog.text


@pytest.mark.emulator
def test_a_sender_without_capacity_gives_its_claim_back(invoice_machine, reviewer, spy,
                                                        settings, clock):
    """A rate of 0 pauses every SendTask* call; the row waits without losing an attempt."""
    settings.INBOX_SENDTASK_RATE = 0
    settings.INBOX_SENDTASK_MAX_WAIT_SECONDS = 0
    review = _review(invoice_machine)
    outbox = _complete(review, reviewer)
    before = timezone.now()

    assert callback_send(outbox_id=outbox.pk) == SendResult.RATE_LIMITED

    outbox.refresh_from_db()
    assert (outbox.status, outbox.attempts) == (OutboxStatus.PENDING, 0)
    # Due again at the next window (at most a second away), not after a lease.
    assert before < outbox.next_attempt_at <= timezone.now() + datetime.timedelta(seconds=1.1)
    assert spy.calls == []

    settings.INBOX_SENDTASK_RATE = 250
    clock.now = max(clock.now, outbox.next_attempt_at)
    assert callback_send(outbox_id=outbox.pk) == SendResult.SENT
    assert spy.calls == ["send_task_success"]


# Secrecy ---------------------------------------------------------------------------------


@pytest.mark.emulator
def test_no_log_record_and_no_last_error_contains_the_token(
    invoice_machine, reviewer, spy, fast_retries, raw_logs
):
    """Patched boto3 client methods throttle, lose a response, and refuse with a message
    that echoes the token (as AWS validation messages echo values)."""
    lost, dead, timed_out = (_review(invoice_machine) for _ in range(3))
    tokens = [lost.token, dead.token, timed_out.token]

    lost_outbox = _complete(lost, reviewer)
    spy.plan = [fail_with("ThrottlingException", 400), lose_response]
    results = [callback_send(outbox_id=lost_outbox.pk) for _ in range(3)]
    assert results == [SendResult.RETRY, SendResult.RETRY, SendResult.RECONCILED]

    dead_outbox = _reject(dead, reviewer)
    spy.plan = [fail_with("ValidationException", 400,
                          f"Value '{dead.token}' at 'taskToken' failed to satisfy constraint")]
    assert callback_send(outbox_id=dead_outbox.pk) == SendResult.DEAD

    aws.task_success(token=timed_out.token, output={"answer": {"decision": "reject"}})
    expired_outbox = _complete(timed_out, reviewer)
    assert callback_send(outbox_id=expired_outbox.pk) == SendResult.EXPIRED

    assert raw_logs.texts, "the senders log what they do"
    for token in tokens:
        assert not [text for text in raw_logs.texts if token in text]
    texts = [*Outbox.objects.values_list("last_error", flat=True),
             *Task.objects.values_list("reason", flat=True)]
    assert "ValidationException" in Outbox.objects.get(pk=dead_outbox.pk).last_error
    for token in tokens:
        assert not [text for text in texts if token in text]
