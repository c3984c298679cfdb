"""Change signals on the EventBridge bus: every change, once or more, in order, no data."""

import json
import uuid

import pytest

from inbox.models import SignalOutbox
from inbox.services import signals
from inbox.services.signals import signals_relay
from inbox.services.worker import task_claim, task_release
from processes import aws

SIGNAL_KEYS = {"task", "version", "action", "state", "skill", "process", "processVersion",
               "stage", "at"}


@pytest.fixture
def bus_queue(emulator, settings) -> str:
    """Relay to the default bus, where a rule of this test's own routes signals to a queue."""
    settings.INBOX_SIGNALS_BUS = "default"
    settings.INBOX_SIGNALS_SOURCE = f"inbox.test.{uuid.uuid4().hex[:8]}"
    name = f"signals-{uuid.uuid4().hex[:12]}"
    sqs = aws.client(service="sqs")
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])[
        "Attributes"]["QueueArn"]
    events = aws.client(service="events")
    events.put_rule(Name=name, EventPattern=json.dumps(
        {"source": [settings.INBOX_SIGNALS_SOURCE], "detail-type": [signals.DETAIL_TYPE]}))
    events.put_targets(Rule=name, Targets=[{"Id": "q", "Arn": arn}])
    return url


def _received(url: str) -> list[dict]:
    bodies = []
    while messages := aws.messages_receive(url=url, wait_seconds=1):
        bodies.extend(json.loads(m["Body"]) for m in messages)
        aws.messages_delete(url=url, receipt_handles=[m["ReceiptHandle"] for m in messages])
    return bodies


def _relay_all() -> int:
    sent = 0
    while (done := signals_relay())["sent"]:
        sent += done["sent"]
    return sent


def test_no_bus_no_signal_rows(make_task, worker, settings):
    settings.INBOX_SIGNALS_BUS = ""
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    assert not SignalOutbox.objects.exists()
    assert signals_relay() == {"sent": 0, "failed": 0}


@pytest.mark.emulator
def test_every_change_is_relayed_in_version_order_without_data(bus_queue, make_task, worker):
    task = make_task(input={"secret": "the-input"}, title="Pay INV-7")
    task_claim(worker=worker, task_id=task.pk)
    task_release(worker=worker, task_id=task.pk, reason="lunch")

    assert _relay_all() == 3  # one per task and call: three calls

    bodies = _received(bus_queue)
    details = [body["detail"] for body in bodies]
    assert [(d["version"], d["action"], d["state"]) for d in details] == [
        (1, "receive", "queued"), (2, "claim", "in_progress"), (3, "release", "queued")]
    assert all(set(d) == SIGNAL_KEYS and d["task"] == str(task.pk) for d in details)
    assert {body["detail-type"] for body in bodies} == {signals.DETAIL_TYPE}
    text = json.dumps(bodies)
    assert "the-input" not in text and "INV-7" not in text and "lunch" not in text
    assert not SignalOutbox.objects.filter(sent_at__isnull=True).exists()


@pytest.mark.emulator
def test_a_refused_signal_is_retried_and_its_task_s_later_ones_wait(bus_queue, make_task,
                                                                   worker, monkeypatch, clock):
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    real_put = aws.events_put
    monkeypatch.setattr(aws, "events_put",
                        lambda *, entries: ["ThrottlingException"] * len(entries))

    assert signals_relay() == {"sent": 0, "failed": 1}
    first = SignalOutbox.objects.get(task=task, version=1)
    assert first.attempts == 1 and first.sent_at is None
    assert "ThrottlingException" in first.last_error
    assert signals_relay() == {"sent": 0, "failed": 0}  # backing off; version 2 waits

    monkeypatch.setattr(aws, "events_put", real_put)
    clock.advance(seconds=signals.BACKOFF_BASE_SECONDS + 1)
    assert _relay_all() == 2
    assert [b["detail"]["version"] for b in _received(bus_queue)] == [1, 2]


def test_a_relay_that_died_mid_call_leaves_its_rows_to_the_next(make_task, worker, settings,
                                                              monkeypatch, clock):
    settings.INBOX_SIGNALS_BUS = "default"
    make_task()

    def die(*, entries):
        raise RuntimeError("the worker died mid-call")

    monkeypatch.setattr(aws, "events_put", die)
    with pytest.raises(RuntimeError):
        signals_relay()
    row = SignalOutbox.objects.get()
    assert row.sent_at is None and row.next_attempt_at > clock.now

    monkeypatch.setattr(aws, "events_put", lambda *, entries: [None] * len(entries))
    assert signals_relay() == {"sent": 0, "failed": 0}  # the lease still holds
    clock.advance(seconds=signals.LEASE_SECONDS + 1)
    assert signals_relay() == {"sent": 1, "failed": 0}
    assert SignalOutbox.objects.get().sent_at == clock.now
