"""Intake: envelopes on the SQS intake queue become tasks, exactly once, token encrypted.

Tests that talk to SQS use a queue pair of their own (settings override plus
``aws.intake_queues_ensure``), so messages of other tests never interfere.
"""

import datetime
import json
import logging
import threading
import time
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.roles import Role
from accounts.services import skill_ensure
from inbox.history import GENESIS_HASH, events_verify
from inbox.models import (
    IntakeError,
    ProcessFailure,
    SignalOutbox,
    Task,
    TaskEvent,
    TaskState,
)
from inbox.services import intake as intake_module
from inbox.services.admin import intake_redrive
from inbox.services.intake import intake_message, intake_messages, intake_poll
from inbox.tasks import intake_poll_task
from inbox.tokens import token_decrypt, token_digest
from processes import aws
from processes.services import process_deploy, process_start
from tests.concurrency import race
from tests.factories import envelope, sqs_message
from tests.processes.lifecycle import unique_name, wait_for
from tests.sfn import execution_wait, unique

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
AWS_LIKE_TOKEN = "AQCEAAAAKgAAAAMAAAAAAAAAAY" + "x9Kq2Zr" * 120


@pytest.fixture
def queues(settings, emulator) -> dict[str, str]:
    """Give the test an intake queue and dead-letter queue of its own."""
    name = unique("intake-test")
    settings.INBOX_INTAKE_QUEUE = name
    settings.INBOX_INTAKE_DLQ = f"{name}-dlq"
    return aws.intake_queues_ensure()


def _send(queues: dict[str, str], body: dict | str) -> str:
    text = body if isinstance(body, str) else json.dumps(body)
    return aws.message_send(url=queues["queue_url"], body=text)


def _depth(url: str) -> tuple[int, int]:
    """Return (visible, in flight) message counts of the queue at url."""
    attributes = aws.queue_attributes(url=url)
    return (int(attributes["ApproximateNumberOfMessages"]),
            int(attributes["ApproximateNumberOfMessagesNotVisible"]))


def _drain(url: str) -> list[dict[str, Any]]:
    """Receive every visible message of the queue at url (they stay hidden for a while)."""
    received: list[dict[str, Any]] = []
    while batch := aws.messages_receive(url=url, wait_seconds=0, visibility_timeout=60):
        received.extend(batch)
    return received


def _row_text(row: Any) -> str:
    """Return every concrete field of a row as text, binary fields decoded byte for byte."""
    parts = []
    for field in row._meta.concrete_fields:
        value = getattr(row, field.attname)
        if isinstance(value, bytes | memoryview):
            value = bytes(value).decode("latin-1")
        parts.append(value if isinstance(value, str) else json.dumps(value, default=str))
    return "\n".join(parts)


def _poll_until(condition, *, timeout: float = 20) -> None:
    """Poll the intake queue in short rounds until condition() holds."""

    def polled() -> bool:
        intake_poll(wait_seconds=1, budget_seconds=2)
        return condition()

    wait_for(polled, timeout=timeout, what="the intake")


# One message ------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [AWS_LIKE_TOKEN, str(uuid.uuid4())])
def test_valid_envelope_becomes_one_queued_task_with_its_token_encrypted(review_skill, token):
    body = envelope(
        taskToken=token, minProficiency=2, priority=70, heartbeatSeconds=300,
        timeouts={"offer": 60, "work": 600, "overall": 3600, "escalation": 900},
        onTimeout="escalate", excludeWorkersOf=["intake"],
    )
    before = timezone.now()

    assert intake_message(message=sqs_message(body)) == "created"

    task = Task.objects.get()
    assert task.state == TaskState.QUEUED and task.version == 1 and task.assignee is None
    assert (task.execution_arn, task.stage) == (body["execution"], "review")
    assert (task.process_name, task.process_version) == ("invoice-approval", 1)
    assert (task.skill, task.min_proficiency) == (review_skill, 2)
    assert (task.title, task.form, task.input) == (body["title"], "approve-reject", body["input"])
    assert (task.priority, task.exclude_workers_of) == (70, ["intake"])
    assert (task.offer_seconds, task.work_seconds, task.overall_seconds) == (60, 600, 3600)
    assert (task.escalation_seconds, task.on_timeout, task.heartbeat_seconds) == (
        900, "escalate", 300)
    assert task.entered_at == datetime.datetime(2026, 11, 30, 9, tzinfo=datetime.UTC)
    assert task.offer_deadline is None and task.work_deadline is None
    # The overall clock runs from when the task entered the inbox, not the stage.
    assert before + datetime.timedelta(seconds=3600) <= task.overall_deadline
    assert task.overall_deadline <= timezone.now() + datetime.timedelta(seconds=3600)

    assert token_decrypt(task.token_ciphertext) == token
    assert task.token_digest == token_digest(token)
    assert token not in _row_text(task)

    event = TaskEvent.objects.get(task=task)
    assert (event.version, event.action, event.from_state, event.to_state) == (
        1, "receive", "", TaskState.QUEUED)
    assert (event.actor, event.actor_label, event.prev_hash) == (None, "intake", GENESIS_HASH)
    assert token not in _row_text(event)


def test_minimal_envelope_takes_the_schema_defaults(review_skill):
    """minProficiency, excludeWorkersOf, escalation and heartbeatSeconds are optional."""
    body = envelope()
    for optional in ("minProficiency", "excludeWorkersOf"):
        del body[optional]

    assert intake_message(message=sqs_message(body)) == "created"

    task = Task.objects.get()
    assert (task.min_proficiency, task.exclude_workers_of) == (1, [])
    assert (task.escalation_seconds, task.heartbeat_seconds) == (None, None)


def test_a_redelivered_envelope_is_a_duplicate_and_creates_nothing(review_skill):
    body = envelope()
    assert intake_message(message=sqs_message(body)) == "created"

    assert intake_message(message=sqs_message(body, receive_count=2)) == "duplicate"
    assert (Task.objects.count(), TaskEvent.objects.count()) == (1, 1)


def test_an_unknown_skill_is_an_intake_error_naming_skill(review_skill):
    body = envelope(skill="no-such-skill")
    message = sqs_message(body, receive_count=3)

    assert intake_message(message=message) == "invalid"

    assert not Task.objects.exists()
    error = IntakeError.objects.get()
    assert error.message_id == message["MessageId"] and error.receive_count == 3
    assert [p.split(":")[0] for p in error.problems] == ["skill"]
    assert (error.execution_arn, error.stage) == (body["execution"], "review")
    assert "no-such-skill" not in _row_text(error)
    assert body["taskToken"] not in _row_text(error)


def test_receiving_a_refused_message_again_updates_its_one_intake_error(review_skill):
    body = envelope(priority=101)
    message = sqs_message(body)
    intake_message(message=message)

    intake_message(message={**message, "Attributes": {"ApproximateReceiveCount": "4"}})

    error = IntakeError.objects.get()
    assert (error.receive_count, error.problems) == (4, ["priority: must be at most 100"])


def test_a_message_taken_after_a_refusal_clears_its_intake_error(review_skill):
    """An admin creates the missing skill; the next receive of the message makes the task."""
    message = sqs_message(envelope(skill="late-skill"))
    assert intake_message(message=message) == "invalid"

    skill_ensure(slug="late-skill", name="Late skill")
    again = {**message, "Attributes": {"ApproximateReceiveCount": "2"}}

    assert intake_message(message=again) == "created"
    assert not IntakeError.objects.exists()


@pytest.mark.parametrize(("change", "field"), [
    ({"timeouts": {"offer": 60, "work": 60, "overall": 366 * 86400}}, "timeouts.overall"),
    ({"heartbeatSeconds": 10**12}, "heartbeatSeconds"),
    ({"form": "no-such-form"}, "form"),
    ({"enteredAt": "yesterday"}, "enteredAt"),
    ({"execution": "arn:aws:states:us-east-1:123456789012:execution:x:" + "y" * 2100},
     "execution"),
])
def test_what_the_schema_cannot_check_is_checked_too(review_skill, change, field):
    message = sqs_message(envelope(**change))

    assert intake_message(message=message) == "invalid"

    problems = IntakeError.objects.get().problems
    assert [p.split(":")[0] for p in problems] == [field]
    assert "no-such-form" not in json.dumps(problems)


def test_a_token_in_the_wrong_field_is_not_recorded(review_skill):
    """A refused envelope's execution and stage are kept only when they hold no token."""
    token = str(uuid.uuid4())
    body = envelope(taskToken=token, stage=token, priority=-1)

    assert intake_message(message=sqs_message(body)) == "invalid"

    error = IntakeError.objects.get()
    assert error.stage == ""
    assert token not in _row_text(error)


@pytest.mark.django_db(transaction=True)
def test_a_process_failure_is_recorded_once_and_mailed_to_the_admins(make_user, mailoutbox):
    admins = [make_user(roles=(Role.ADMIN,)) for _ in range(2)]
    make_user(roles=(Role.WORKER,))
    make_user(roles=(Role.SUPERVISOR,))
    leaked = str(uuid.uuid4())
    notice = {
        "kind": "process-failure/v1",
        "execution": "arn:aws:states:us-east-1:123456789012:execution:invoice:e-1",
        "process": {"name": "invoice-approval", "version": 1},
        "error": {"Error": "Something.Else", "Cause": f"failed with taskToken: {leaked}"},
    }
    message = sqs_message(notice)

    assert intake_message(message=message) == "recorded"
    assert intake_message(message={**message, "ReceiptHandle": "again"}) == "recorded"
    # A second copy of the notice (Step Functions retried the send) is the same failure.
    assert intake_message(message=sqs_message(notice)) == "recorded"

    failure = ProcessFailure.objects.get()
    assert (failure.message_id, failure.error) == (message["MessageId"], "Something.Else")
    assert (failure.process_name, failure.process_version) == ("invoice-approval", 1)
    assert leaked not in failure.cause
    assert len(mailoutbox) == 1
    mail = mailoutbox[0]
    assert sorted(mail.to) == sorted(admin.email for admin in admins)
    assert "invoice-approval v1" in mail.subject and "Something.Else" in mail.subject
    assert notice["execution"] in mail.body and leaked not in mail.body


def test_a_process_failure_mail_waits_for_the_commit(make_user, mailoutbox,
                                                      django_capture_on_commit_callbacks):
    make_user(roles=(Role.ADMIN,))
    notice = {"kind": "process-failure/v1", "execution": "arn:e", "process": {
        "name": "p", "version": 2}, "error": {"Error": "States.TaskFailed", "Cause": None}}

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert intake_message(message=sqs_message(notice)) == "recorded"

    assert mailoutbox == [] and len(callbacks) == 1


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_deliveries_of_one_envelope_make_one_task(review_skill):
    """Eight threads handle the same message at once: one creates, seven see a duplicate."""
    message = sqs_message(envelope())
    racers = 8
    start = threading.Barrier(racers)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def deliver() -> None:
        try:
            start.wait()
            outcomes.append(intake_message(message=message))
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(racers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert sorted(outcomes) == ["created"] + ["duplicate"] * (racers - 1)
    assert (Task.objects.count(), TaskEvent.objects.count()) == (1, 1)


# The queue --------------------------------------------------------------------------------


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_the_same_envelope_delivered_three_times_makes_one_task(queues, review_skill):
    body = envelope()
    for _ in range(3):
        _send(queues, body)

    counts = intake_poll(wait_seconds=0)

    assert (counts["created"], counts["duplicate"]) == (1, 2)
    assert Task.objects.filter(token_digest=token_digest(body["taskToken"])).count() == 1
    # Every copy was deleted once its transaction committed.
    assert _depth(queues["queue_url"]) == (0, 0)



@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_handled_messages_are_deleted_in_one_batch_per_receive(queues, review_skill,
                                                               monkeypatch, caplog):
    """Ten envelopes, one receive: one DeleteMessageBatch, no single deletes.

    The emulator answers; a spy counts the calls. An entry SQS could not delete (a stale
    receipt handle, faked by spoiling one before the call) is logged and comes back.
    """
    calls = []
    real_call = aws._call

    def spy(*, service, operation, **params):
        calls.append(operation)
        if operation == "delete_message_batch":
            params["Entries"][0]["ReceiptHandle"] = "stale-receipt-handle"
        return real_call(service=service, operation=operation, **params)

    monkeypatch.setattr(aws, "_call", spy)
    for _ in range(10):
        _send(queues, envelope())

    counts = intake_poll(wait_seconds=0, max_messages=10)

    assert counts["created"] == 10
    assert calls.count("delete_message_batch") == calls.count("receive_message") - 1 >= 1
    assert "delete_message" not in calls
    assert "could not delete message" in caplog.text
    assert _depth(queues["queue_url"])[0] + _depth(queues["queue_url"])[1] == 1

@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_the_messages_of_several_receives_share_one_delete(queues, review_skill, monkeypatch):
    """At a trickle (here one message a receive) the handled messages wait for each other
    and go in one DeleteMessageBatch, not one per receive; the poll ends with all deleted.
    A poll that makes its messages visible again at once (visibility timeout 0) deletes
    each receive's at once: a wait would hand them out again."""
    deletes: list[int] = []
    real_call = aws._call

    def spy(*, service, operation, **params):
        if operation == "delete_message_batch":
            deletes.append(len(params["Entries"]))
        return real_call(service=service, operation=operation, **params)

    monkeypatch.setattr(aws, "_call", spy)
    monkeypatch.setattr(intake_module, "DELETE_WAIT_SECONDS", 30)  # only the poll's end sends
    for _ in range(3):
        _send(queues, envelope())

    counts = intake_poll(wait_seconds=0, max_messages=1)
    # With a visibility timeout of its own, the wait stays far below it: 0 s, at once.
    for _ in range(2):
        _send(queues, envelope())
    again = intake_poll(wait_seconds=0, max_messages=1, visibility_timeout=0)

    assert (counts["created"], again["created"]) == (3, 2)
    # The second poll: each receive's message deleted on its own (a message visible again
    # at once may be received and deleted twice, as before: a duplicate).
    assert deletes[0] == 3 and len(deletes) >= 3 and set(deletes[1:]) == {1}
    assert _depth(queues["queue_url"]) == (0, 0)


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_handled_message_waits_for_company_at_most_the_delete_wait(queues, review_skill,
                                                                      monkeypatch):
    """A lone message is deleted once its wait is up, while the next receive still
    long-polls: never held until the poll ends (and near its visibility timeout)."""
    calls: list[str] = []
    real_call = aws._call

    def spy(*, service, operation, **params):
        answer = real_call(service=service, operation=operation, **params)
        if operation in ("receive_message", "delete_message_batch"):
            calls.append(f"{operation} {len(answer.get('Messages', params.get('Entries', [])))}")
        return answer

    monkeypatch.setattr(intake_module, "DELETE_WAIT_SECONDS", 0.2)
    _send(queues, envelope())
    monkeypatch.setattr(aws, "_call", spy)

    counts = intake_poll(wait_seconds=3, max_messages=10, budget_seconds=3)

    assert counts["created"] == 1
    # The delete went while the second receive waited out its 3 s long poll.
    assert calls == ["receive_message 1", "delete_message_batch 1", "receive_message 0"]


def test_a_delete_that_crashes_fails_the_poll_after_the_others(monkeypatch):
    """Not one SQS refused (that is logged): an error of the call itself is raised by
    close(), in the consumer, and the batches after it are not sent."""
    sent: list[int] = []

    def delete(*, url, messages, queue):
        sent.append(len(messages))
        raise RuntimeError("the delete crashed")

    monkeypatch.setattr(intake_module, "messages_done_delete", delete)
    deleter = intake_module.MessageDeleter(url="https://sqs.example/q", queue="Intake",
                                           wait=30)
    deleter.add([sqs_message(envelope()) for _ in range(12)])
    with pytest.raises(RuntimeError, match="the delete crashed"):
        deleter.close()
    assert sent == [10]


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_poll_outside_a_transaction_receives_ahead_and_deletes_behind(
        queues, review_skill, monkeypatch):
    """As the poller runs (no transaction open): the next receive goes out while a receive
    is handled, each receive's delete runs behind it, and all of it ends before the poll
    returns: every envelope a task, the queue empty."""
    threads: list[tuple[str, str]] = []
    real_call = aws._call

    def spy(*, service, operation, **params):
        threads.append((operation, threading.current_thread().name))
        return real_call(service=service, operation=operation, **params)

    monkeypatch.setattr(aws, "_call", spy)
    for _ in range(25):
        _send(queues, envelope())

    counts = intake_poll(wait_seconds=0, max_messages=10)

    assert counts["created"] == 25 and Task.objects.count() == 25
    receives = [name for operation, name in threads if operation == "receive_message"]
    deletes = [name for operation, name in threads if operation == "delete_message_batch"]
    assert len(receives) >= 4 and all(n.startswith("sqs-receive-ahead") for n in receives)
    assert len(deletes) >= 3 and all(n.startswith("intake-delete") for n in deletes)
    assert _depth(queues["queue_url"]) == (0, 0)


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_receive_ahead_left_in_flight_loses_no_message(queues, review_skill):
    """The caller stops after the first batch while the next receive is out: its messages
    are not handled now, and come back after their visibility timeout to be handled then."""
    for _ in range(20):
        _send(queues, envelope())
    batches = aws.messages_receive_batches(url=queues["queue_url"], wait_seconds=0,
                                           budget_seconds=10, max_messages=10,
                                           visibility_timeout=1, ahead=True)
    first = next(batches)
    batches.close()
    assert len(first) == 10
    assert Task.objects.count() == 0

    created = 0

    def all_handled() -> bool:
        nonlocal created
        created += intake_poll(wait_seconds=0, max_messages=10)["created"]
        return created == 20

    wait_for(all_handled, timeout=30, what="every message handled after its timeout")
    assert Task.objects.count() == 20
    wait_for(lambda: _depth(queues["queue_url"]) == (0, 0), what="the queue empty")


class _Pauses:
    """processes.aws's time, with each sleep recorded and a hook run before it."""

    def __init__(self, before=None) -> None:
        self.slept: list[float] = []
        self.before = before
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        if self.before is not None:
            self.before()
            self.before = None
        time.sleep(seconds)


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_messages_arriving_in_the_window_after_a_partial_receive_share_the_next(
        queues, review_skill, settings, monkeypatch):
    """As the poller runs: three envelopes wait, four more come while the window is open;
    the second receive holds the four, then one empty receive ends the poll."""
    settings.INBOX_RECEIVE_WINDOW_MS = 300
    receives: list[int] = []
    real_call = aws._call

    def spy(*, service, operation, **params):
        answer = real_call(service=service, operation=operation, **params)
        if operation == "receive_message":
            receives.append(len(answer.get("Messages", [])))
        return answer

    for _ in range(3):
        _send(queues, envelope())
    pauses = _Pauses(before=lambda: [_send(queues, envelope()) for _ in range(4)])
    monkeypatch.setattr(aws, "time", pauses)
    monkeypatch.setattr(aws, "_call", spy)

    counts = intake_poll(wait_seconds=0, max_messages=10)

    assert counts["created"] == 7 and Task.objects.count() == 7
    assert receives == [3, 4, 0]
    assert pauses.slept == [pytest.approx(0.3), pytest.approx(0.3)]
    assert _depth(queues["queue_url"]) == (0, 0)


@pytest.mark.emulator
def test_a_full_receive_is_followed_at_once_and_no_window_waits_none(queues, monkeypatch):
    """A backlog is read as fast as without the window: only the partial batch waits."""
    for _ in range(12):
        _send(queues, envelope())
    pauses = _Pauses()
    monkeypatch.setattr(aws, "time", pauses)

    sizes = [len(batch) for batch in aws.messages_receive_batches(
        url=queues["queue_url"], wait_seconds=0, budget_seconds=10, window_seconds=0.25)]
    assert sizes == [10, 2] and pauses.slept == [0.25]

    for _ in range(3):
        _send(queues, envelope())
    pauses.slept.clear()
    sizes = [len(batch) for batch in aws.messages_receive_batches(
        url=queues["queue_url"], wait_seconds=0, budget_seconds=10, window_seconds=0)]
    assert sizes == [3] and pauses.slept == []


def _malformed(token: str) -> list[tuple[str, str]]:
    """Return ten refused bodies, each with the text its problem must contain."""
    return [
        ('{"kind": "human-task/v1", "taskToken": ', "(body)"),
        (json.dumps(envelope(taskToken=token, kind="human-task/v9")), "kind:"),
        (json.dumps({k: v for k, v in envelope().items() if k != "taskToken"}), "taskToken"),
        (json.dumps(envelope(taskToken=token, priority=101)), "priority:"),
        (json.dumps(envelope(taskToken=token, execution="not-an-arn")), "execution:"),
        (json.dumps(envelope(taskToken=token, skill="no-such-skill")), "skill:"),
        (json.dumps(envelope(taskToken=token, form="no-such-form")), "form:"),
        (json.dumps(envelope(taskToken=token, timeouts={"offer": 1, "work": 1})), "timeouts"),
        (json.dumps(envelope(taskToken=token, enteredAt="yesterday")), "enteredAt:"),
        (json.dumps(envelope(taskToken=token, colour="red")), "unknown field"),
    ]


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_malformed_messages_in_a_batch_are_recorded_and_reach_the_dead_letter_queue(
    queues, review_skill,
):
    """Valid envelopes land; each bad one is refused on every receive, then moves to the DLQ.

    A visibility timeout of 0 makes each refused message visible again at once, so one
    poll sees it five times (the redrive policy) instead of once a minute.
    """
    token = str(uuid.uuid4())
    valid = [envelope() for _ in range(3)]
    bad = _malformed(token)
    expected: dict[str, str] = {}
    sent_bad: set[str] = set()
    for index, (body, field) in enumerate(bad):
        if index % 4 == 0:
            _send(queues, valid[index // 4])
        expected[_send(queues, body)] = field
        sent_bad.add(body)

    counts = intake_poll(wait_seconds=0, budget_seconds=60, visibility_timeout=0)

    assert counts["created"] == 3 and counts["error"] == 0
    assert counts["invalid"] == 10 * 5
    assert {t.token_digest for t in Task.objects.all()} == {
        token_digest(body["taskToken"]) for body in valid}
    errors = {error.message_id: error for error in IntakeError.objects.all()}
    assert errors.keys() == expected.keys()
    for message_id, field in expected.items():
        error = errors[message_id]
        assert error.receive_count == 5
        assert field in "; ".join(error.problems), (field, error.problems)
        assert token not in _row_text(error)
    assert _depth(queues["queue_url"]) == (0, 0)
    dead = _drain(queues["dlq_url"])
    assert {m["Body"] for m in dead} == sent_bad


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_refused_message_is_not_deleted(queues, review_skill):
    _send(queues, envelope(skill="no-such-skill"))

    counts = intake_poll(wait_seconds=0)

    assert counts["invalid"] == 1
    assert _depth(queues["queue_url"]) == (0, 1)  # in flight until its visibility timeout


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_an_unexpected_error_is_recorded_and_the_batch_goes_on(queues, review_skill,
                                                                monkeypatch, caplog):
    """A failure no local service can produce is injected by patching the task's creation.

    The doomed row fails the receive's one multi-row insert (tasks_receive), as a row the
    database refuses would, and then its own insert (task_receive): the batch's failure is
    logged, each envelope is created on its own, and only the doomed one is an error.
    """
    doomed = envelope()
    original, original_batch = intake_module.task_receive, intake_module.tasks_receive

    def task_receive(**fields: Any) -> Task:
        if fields["execution_arn"] == doomed["execution"]:
            raise ValueError(f"boom near {doomed['taskToken']}")
        return original(**fields)

    def tasks_receive(rows: list[dict[str, Any]]) -> list[Task]:
        if any(fields["execution_arn"] == doomed["execution"] for fields in rows):
            raise ValueError(f"boom near {doomed['taskToken']}")
        return original_batch(rows)

    monkeypatch.setattr(intake_module, "task_receive", task_receive)
    monkeypatch.setattr(intake_module, "tasks_receive", tasks_receive)
    others = [envelope(), envelope()]
    _send(queues, others[0])
    doomed_id = _send(queues, doomed)
    _send(queues, others[1])

    counts = intake_poll(wait_seconds=0)

    assert (counts["created"], counts["error"]) == (2, 1)
    # The failed message's transaction rolled back: no task, no event.
    assert Task.objects.count() == 2 and TaskEvent.objects.count() == 2
    error = IntakeError.objects.get()
    assert error.message_id == doomed_id
    assert error.problems == ["(unexpected): ValueError: boom near [redacted]"]
    assert _depth(queues["queue_url"]) == (0, 1)
    assert "creating each on its own" in caplog.text
    assert doomed["taskToken"] not in caplog.text


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_redrive_moves_dead_letters_back_once_the_cause_is_fixed(queues, db):
    body = envelope(skill="late-skill")
    _send(queues, body)
    intake_poll(wait_seconds=0, visibility_timeout=0)
    assert not Task.objects.exists()
    assert _depth(queues["dlq_url"]) == (1, 0)

    skill_ensure(slug="late-skill", name="Late skill")
    assert intake_redrive() == 1

    assert _depth(queues["dlq_url"]) == (0, 0)
    assert intake_poll(wait_seconds=0)["created"] == 1
    assert Task.objects.get().skill.slug == "late-skill"
    assert intake_redrive() == 0


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_redrive_moves_at_most_max_messages(queues):
    for _ in range(3):
        aws.message_send(url=queues["dlq_url"], body="{}")

    assert intake_redrive(max_messages=2) == 2

    assert _depth(queues["queue_url"]) == (2, 0)


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_admins_redrive_from_the_intake_errors_page(queues, make_user, client):
    aws.message_send(url=queues["dlq_url"], body="{}")
    IntakeError.objects.create(message_id="m-1", problems=["kind: must be one of x"])
    client.force_login(make_user(roles=(Role.ADMIN,)))

    page = client.get("/admin/inbox/intakeerror/")
    response = client.post("/admin/inbox/intakeerror/", {
        "action": "redrive_dead_letters",
        "_selected_action": [str(IntakeError.objects.get().pk)],
    }, follow=True)

    assert page.status_code == 200 and b"kind: must be one of x" in page.content
    error = IntakeError.objects.get()
    assert client.get(f"/admin/inbox/intakeerror/{error.pk}/change/").status_code == 200
    assert client.get("/admin/inbox/processfailure/").status_code == 200
    assert "Moved 1 message(s)" in response.content.decode()
    assert _depth(queues["queue_url"]) == (1, 0)


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_no_log_record_of_the_intake_holds_a_token(queues, review_skill, make_user, caplog,
                                                    monkeypatch):
    """Valid, duplicate, refused, failing and failure-notice messages, logged at DEBUG.

    The failing one fails its receive's batch insert, then its own (both patched).
    """
    caplog.set_level(logging.DEBUG)
    make_user(roles=(Role.ADMIN,))
    valid, refused, failing = envelope(), envelope(priority=500), envelope()
    tokens = [valid["taskToken"], refused["taskToken"], failing["taskToken"], str(uuid.uuid4())]
    original, original_batch = intake_module.task_receive, intake_module.tasks_receive

    def task_receive(**fields: Any) -> Task:
        if fields["execution_arn"] == failing["execution"]:
            raise RuntimeError(f"taskToken={failing['taskToken']} {failing['taskToken']}")
        return original(**fields)

    def tasks_receive(rows: list[dict[str, Any]]) -> list[Task]:
        if any(fields["execution_arn"] == failing["execution"] for fields in rows):
            raise RuntimeError(f"taskToken={failing['taskToken']} {failing['taskToken']}")
        return original_batch(rows)

    monkeypatch.setattr(intake_module, "task_receive", task_receive)
    monkeypatch.setattr(intake_module, "tasks_receive", tasks_receive)
    for body in (valid, valid, refused, failing):
        _send(queues, body)
    _send(queues, {"kind": "process-failure/v1", "execution": valid["execution"],
                   "process": {"name": "invoice-approval", "version": 1},
                   "error": {"Error": "X", "Cause": json.dumps({"taskToken": tokens[3]})}})
    _send(queues, json.dumps(refused)[:-5])

    counts = intake_poll(wait_seconds=0)

    assert counts == {"created": 1, "duplicate": 1, "recorded": 1, "invalid": 2, "error": 1,
                      "migrated": 0, "superseded": 0}
    assert caplog.records
    for record in caplog.records:
        text = record.getMessage() + (record.exc_text or "")
        if record.exc_info:
            text += logging.Formatter().formatException(record.exc_info)
        for token in tokens:
            assert token not in text, record.name
    for row in [*Task.objects.all(), *IntakeError.objects.all(), *ProcessFailure.objects.all()]:
        for token in tokens:
            assert token not in _row_text(row)


# One receive, in one transaction -----------------------------------------------------------


def _receive_checked(task: Task) -> None:
    """Assert a task has exactly its receive event, whose chain verifies to the task's head."""
    [event] = task.events.all()
    assert (event.version, event.action, event.from_state, event.to_state) == (
        1, "receive", "", TaskState.QUEUED)
    assert event.prev_hash == GENESIS_HASH and task.chain_head == event.hash
    assert events_verify(task=task) is None


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_receive_makes_its_valid_tasks_records_the_invalid_and_skips_duplicates(
    queues, review_skill, monkeypatch,
):
    """Four valid envelopes, a refused one, a second copy of a valid one and a copy of an
    envelope taken before, in one receive: four tasks in one batch, one IntakeError, and
    one DeleteMessageBatch of the six messages done with. A spy counts the SQS calls."""
    before = envelope()
    assert intake_message(message=sqs_message(before)) == "created"
    valid = [envelope() for _ in range(4)]
    refused = envelope(skill="no-such-skill")
    calls: list[tuple[str, dict]] = []
    real_call = aws._call

    def spy(*, service, operation, **params):
        calls.append((operation, params))
        return real_call(service=service, operation=operation, **params)

    monkeypatch.setattr(aws, "_call", spy)
    ids = {_send(queues, body): name for body, name in [
        (valid[0], "valid"), (refused, "refused"), (valid[1], "valid"), (valid[0], "again"),
        (valid[2], "valid"), (before, "before"), (valid[3], "valid")]}
    batches = []
    real_batch = intake_module.tasks_receive

    def tasks_receive(rows: list[dict[str, Any]]) -> list[Task]:
        batches.append(len(rows))
        return real_batch(rows)

    monkeypatch.setattr(intake_module, "tasks_receive", tasks_receive)

    counts = intake_poll(wait_seconds=0, max_messages=10)

    assert [op for op, _ in calls if op == "receive_message"] == ["receive_message"] * 2
    assert counts == {"created": 4, "duplicate": 2, "recorded": 0, "invalid": 1, "error": 0,
                      "migrated": 0, "superseded": 0}
    assert batches == [4]
    tasks = Task.objects.exclude(token_digest=token_digest(before["taskToken"]))
    assert sorted(t.token_digest for t in tasks) == sorted(
        token_digest(body["taskToken"]) for body in valid)
    for task in tasks:
        _receive_checked(task)
    [error] = IntakeError.objects.all()
    assert ids[error.message_id] == "refused" and "skill:" in error.problems[0]
    [delete] = [params for op, params in calls if op == "delete_message_batch"]
    assert len(delete["Entries"]) == 6
    assert "delete_message" not in [op for op, _ in calls]
    # Only the refused message stays, in flight until its visibility timeout.
    assert _depth(queues["queue_url"]) == (0, 1)


def test_the_batch_writes_the_rows_task_receive_writes(review_skill):
    """The same envelope through intake_message (task_receive) and in a receive of two
    (tasks_receive): the same task columns, the same event, each chain verifying."""
    alone, first, second = envelope(), envelope(), envelope()
    assert intake_message(message=sqs_message(alone)) == "created"
    assert intake_messages(messages=[sqs_message(first), sqs_message(second)]) == [
        "created", "created"]

    rows = {row.token_digest: row for row in Task.objects.all()}
    one, batched = rows[token_digest(alone["taskToken"])], rows[token_digest(first["taskToken"])]
    differ = {"id", "token_ciphertext", "token_digest", "execution_arn", "created_at",
              "overall_deadline", "chain_head"}
    for field in Task._meta.concrete_fields:
        if field.name not in differ:
            assert getattr(one, field.attname) == getattr(batched, field.attname), field.name
    assert token_decrypt(batched.token_ciphertext) == first["taskToken"]
    event_fields = ("version", "action", "from_state", "to_state", "actor_id", "actor_label",
                    "reason", "data")
    [event_one], [event_batched] = one.events.all(), batched.events.all()
    assert [getattr(event_one, name) for name in event_fields][:-1] == [
        getattr(event_batched, name) for name in event_fields][:-1]
    assert event_batched.data == {"overall_deadline": batched.overall_deadline.isoformat()}
    for task in rows.values():
        _receive_checked(task)


@pytest.mark.parametrize("bus", ["", "default"])
def test_a_receive_s_statements_do_not_grow_with_its_size(review_skill, settings, bus):
    """Two envelopes and ten take the same statements: a receive is one batch.

    With a signals bus set, each task's signal is written too, in one INSERT.
    """
    settings.INBOX_SIGNALS_BUS = bus
    statements = {}
    for size in (2, 10):
        messages = [sqs_message(envelope()) for _ in range(size)]
        with CaptureQueriesContext(connection) as queries:
            assert intake_messages(messages=messages) == ["created"] * size
        statements[size] = [query["sql"].split(" ", 1)[0] for query in queries.captured_queries]

    assert statements[2] == statements[10]
    assert statements[10].count("INSERT") == (3 if bus else 2)
    assert Task.objects.count() == TaskEvent.objects.count() == 12
    assert SignalOutbox.objects.count() == (12 if bus else 0)


def test_a_receive_of_redeliveries_clears_their_intake_errors(review_skill):
    """Refused on a first receive (the skill did not exist), taken on a later one."""
    body = envelope(skill="created-later")
    message = sqs_message(body)
    assert intake_messages(messages=[message]) == ["invalid"]
    skill_ensure(slug="created-later", name="Created later")
    again = {**message, "Attributes": {"ApproximateReceiveCount": "2"}}

    assert intake_messages(messages=[again, sqs_message(envelope())]) == ["created", "created"]

    assert not IntakeError.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_token_taken_by_another_poller_after_the_batch_read_is_a_duplicate(
    review_skill, monkeypatch, caplog,
):
    """The race the batch's read cannot see: another poller commits one of its envelopes
    between the read of the taken digests and the INSERT (forced: a thread commits it
    there, through a patched tasks_receive). The INSERT fails on the unique digest; each
    envelope is then created on its own, and the one taken meanwhile is a duplicate."""
    messages = [sqs_message(envelope()) for _ in range(4)]
    real_batch = intake_module.tasks_receive
    other: list[str] = []

    def tasks_receive(rows: list[dict[str, Any]]) -> list[Task]:
        def poller() -> None:
            try:
                other.append(intake_message(message=messages[2]))
            finally:
                connection.close()

        thread = threading.Thread(target=poller)
        thread.start()
        thread.join()
        return real_batch(rows)

    monkeypatch.setattr(intake_module, "tasks_receive", tasks_receive)

    outcomes = intake_messages(messages=messages)

    assert other == ["created"]
    assert outcomes == ["created", "created", "duplicate", "created"]
    assert "IntegrityError" in caplog.text
    assert Task.objects.count() == TaskEvent.objects.count() == 4
    for task in Task.objects.all():
        _receive_checked(task)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_pollers_racing_on_copies_of_one_receive_make_each_task_once(review_skill):
    """Four threads handle copies of the same ten messages at once: ten tasks, thirty
    duplicates, whichever way their batches interleave."""
    messages = [sqs_message(envelope()) for _ in range(10)]
    results, errors = race(lambda _: intake_messages(messages=messages), range(4))

    assert errors == []
    outcomes = [outcome for result in results for outcome in result]
    assert sorted(outcomes) == ["created"] * 10 + ["duplicate"] * 30
    assert Task.objects.count() == TaskEvent.objects.count() == 10
    for task in Task.objects.all():
        _receive_checked(task)


# Celery and the command --------------------------------------------------------------------


def test_poll_task_skips_while_another_poller_holds_the_lock(monkeypatch):
    """intake_poll is replaced by a recorder: the lock is what is under test."""
    calls: list[int] = []
    monkeypatch.setattr(intake_module, "intake_poll", lambda: calls.append(1) or {"created": 2})
    cache.delete(intake_module.POLL_LOCK_KEY)
    cache.add(intake_module.POLL_LOCK_KEY, "another-poller", timeout=60)
    try:
        assert intake_poll_task() is None
        assert calls == []
    finally:
        cache.delete(intake_module.POLL_LOCK_KEY)

    assert intake_poll_task() == {"created": 2}
    assert calls == [1]
    assert cache.get(intake_module.POLL_LOCK_KEY) is None


def test_poll_task_releases_the_lock_when_the_poll_fails(monkeypatch):
    def fail() -> dict[str, int]:
        raise RuntimeError("SQS is down")

    monkeypatch.setattr(intake_module, "intake_poll", fail)
    cache.delete(intake_module.POLL_LOCK_KEY)

    with pytest.raises(RuntimeError):
        intake_poll_task()
    assert cache.get(intake_module.POLL_LOCK_KEY) is None


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_intake_run_once_prints_the_counts(queues, review_skill):
    _send(queues, envelope())
    out = StringIO()

    call_command("intake_run", "--once", "--wait", "0", stdout=out)

    assert "created 1" in out.getvalue()
    assert Task.objects.count() == 1


# End to end -------------------------------------------------------------------------------


def _invoice_process_deploy() -> str:
    """Deploy the demo invoice spec under a name of its own; return that name."""
    name = unique_name("invoice")
    text = (SPECS / "invoice-approval.yaml").read_text(encoding="utf-8")
    process_deploy(text=text.replace("process: invoice-approval", f"process: {name}"),
                   source="invoice-approval.yaml")
    return name


INVOICE = {"invoice_id": "INV-7", "supplier": "ACME", "amount": 900, "currency": "EUR"}


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_real_execution_s_human_stage_becomes_a_task_whose_token_works(queues, review_skill):
    """Deploy and start the invoice process; the intake turns its envelope into a task."""
    name = _invoice_process_deploy()
    execution, _ = process_start(name=name, input=INVOICE, business_key=unique("INV"))

    _poll_until(lambda: Task.objects.filter(execution_arn=execution.execution_arn).exists())

    task = Task.objects.get(execution_arn=execution.execution_arn)
    assert (task.stage, task.process_name, task.process_version) == ("review", name, 1)
    assert (task.skill, task.form, task.priority) == (review_skill, "approve-reject", 50)
    assert task.title == "Review invoice INV-7 from ACME"
    assert task.input == INVOICE
    assert (task.offer_seconds, task.work_seconds, task.overall_seconds) == (300, 1800, 86400)
    assert task.state == TaskState.QUEUED and task.entered_at <= timezone.now()
    # The stored token is the execution's own: Step Functions accepts it.
    aws.task_success(token=token_decrypt(task.token_ciphertext),
                     output={"answer": {"decision": "approve"}, "worker": "1"})
    assert execution_wait(execution_arn=execution.execution_arn)["status"] == "SUCCEEDED"


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_real_execution_s_failure_notice_is_recorded_and_mailed(queues, review_skill,
                                                                    make_user, mailoutbox):
    admin = make_user(roles=(Role.ADMIN,))
    name = _invoice_process_deploy()
    execution, _ = process_start(name=name, input=INVOICE, business_key=unique("INV"))
    _poll_until(lambda: Task.objects.filter(execution_arn=execution.execution_arn).exists())
    task = Task.objects.get(execution_arn=execution.execution_arn)

    aws.task_failure(token=token_decrypt(task.token_ciphertext), error="Something.Else",
                     cause="boom")
    _poll_until(lambda: ProcessFailure.objects.exists())

    failure = ProcessFailure.objects.get()
    assert (failure.execution_arn, failure.process_name) == (execution.execution_arn, name)
    assert failure.error == "Something.Else"
    assert [mail.to for mail in mailoutbox] == [[admin.email]]
    done = execution_wait(execution_arn=execution.execution_arn)
    assert (done["status"], done.get("error")) == ("FAILED", "Process.Failed")


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_stage_may_use_a_form_of_its_deployed_spec(queues, review_skill):
    name = unique_name("forms")
    process_deploy(source="forms.yaml", text=f"""\
process: {name}
version: 1
description: A stage with a form of its own.
forms:
  check-notes:
    title: Notes
    fields:
      - {{name: note, type: textarea, required: true}}
stages:
  - id: check
    kind: human
    skill: invoice-review
    title: Check
    form: check-notes
    timeouts: {{offer: 60, work: 60, overall: 600}}
    show: [ref]
  - id: done
    kind: succeed
""")
    own = envelope(process={"name": name, "version": 1}, form="check-notes")
    builtin = envelope(process={"name": name, "version": 1}, form="acknowledge")
    elsewhere = envelope(process={"name": name, "version": 2}, form="check-notes")

    assert intake_message(message=sqs_message(own)) == "created"
    assert intake_message(message=sqs_message(builtin)) == "created"
    # Version 2 is not deployed: only the built-in forms are known for it.
    assert intake_message(message=sqs_message(elsewhere)) == "invalid"
    assert [p.split(":")[0] for p in IntakeError.objects.get().problems] == ["form"]


def test_escalate_without_an_escalation_clock_is_refused(db, review_skill):
    """An escalating stage must say how long the supervisors have."""
    from inbox.models import IntakeError
    from inbox.services.intake import intake_message
    from tests.factories import envelope, sqs_message

    outcome = intake_message(message=sqs_message(envelope(onTimeout="escalate")))
    assert outcome == "invalid"
    assert IntakeError.objects.get().problems == [
        "timeouts.escalation: required with onTimeout escalate"]


@pytest.mark.parametrize("count", [1, 3])
def test_a_receive_s_skill_and_migration_reads_are_the_orm_s_statements(db, count):
    """Compiled once (config.compiled) instead of by the ORM on each receive, the two reads
    every receive makes send exactly the statement and parameters the ORM's queryset
    would, for any number of skills, executions and digests."""
    from django.db.models import Q

    from accounts.models import Skill
    from inbox.models import TaskMigration
    from inbox.services.intake import _SKILLS_READ
    from inbox.services.migration import _ARRIVALS_READ, _MOVED, _WAITING

    slugs = [f"skill-{n}" for n in range(count)]
    arns = [f"arn:aws:states:eu-west-1:1:execution:m:{n}" for n in range(count)]
    digests = [f"{n:064x}" for n in range(count + 1)]

    def orm(queryset) -> tuple[str, list]:
        sql, params = queryset.query.get_compiler(using="default").as_sql()
        return sql, list(params)

    assert _SKILLS_READ.statement("all", slugs=slugs) == orm(
        Skill.objects.filter(slug__in=slugs))
    assert _ARRIVALS_READ.statement("all", arns=arns, digests=digests) == orm(
        TaskMigration.objects.filter(Q(to_execution_arn__in=arns, status__in=_WAITING)
                                     | Q(from_token_digest__in=digests, status__in=_MOVED)))
    skill_ensure(slug="skill-0", name="Skill 0")
    assert [skill.slug for skill in _SKILLS_READ.run("all", slugs=slugs)] == ["skill-0"]
