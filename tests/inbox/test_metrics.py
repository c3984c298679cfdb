"""/metrics: values that match the tasks made, a fixed query count, auth, and no secrets.

Tasks come in through the real intake and move through the real services; the intake
queues are the emulator's. The only patch is a boto3 client method raising AWS throttling,
which the emulator cannot do on demand (the test says so).
"""

import datetime
import json
import socket

import pytest
from botocore.exceptions import ClientError
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from accounts.roles import Role
from accounts.services import skill_ensure
from inbox.models import Outbox, Task
from inbox.services.callback import SendResult, callback_send
from inbox.services.clock import deadlines_sweep
from inbox.services.worker import task_complete, task_take_next
from processes import aws

TOKEN = "metrics-scraper-token-" + "x" * 24
APPROVE = {"decision": "approve", "comment": "fine"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _parse(text: str) -> Samples:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _scrape(client: Client | None = None) -> Samples:
    response = (client or Client()).get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return _parse(response.content.decode())


def _value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture(autouse=True)
def metrics_token(settings) -> str:
    settings.INBOX_METRICS_TOKEN = TOKEN
    return TOKEN


@pytest.fixture
def reviewer(make_worker, review_skill):
    return make_worker({"invoice-review": 3})


def test_tasks_by_state_and_skill_match_the_tasks_made(
    private_intake, make_task, reviewer, approval_skill
):
    for _ in range(3):
        make_task()
    make_task(skill="finance-approval")
    taken = task_take_next(worker=reviewer)
    samples = _scrape()
    assert _value(samples, "inbox_tasks", state="queued", skill="invoice-review") == 2
    assert _value(samples, "inbox_tasks", state="in_progress", skill="invoice-review") == 1
    assert _value(samples, "inbox_tasks", state="offered", skill="invoice-review") == 0
    assert _value(samples, "inbox_tasks", state="queued", skill="finance-approval") == 1
    assert _value(samples, "inbox_tasks", state="escalated", skill="finance-approval") == 0
    assert taken.skill.slug == "invoice-review"


def test_oldest_waiting_age_is_the_oldest_queued_task_of_each_skill(
    private_intake, make_task, approval_skill
):
    old, _young = make_task(), make_task()
    # Backdating created_at is the only way to age a task without waiting an hour.
    Task.objects.filter(pk=old.pk).update(created_at=timezone.now() - datetime.timedelta(hours=1))
    samples = _scrape()
    age = _value(samples, "inbox_tasks_oldest_waiting_seconds", skill="invoice-review")
    assert 3600 <= age < 3660
    assert _value(samples, "inbox_tasks_oldest_waiting_seconds", skill="finance-approval") == 0


def test_overdue_counts_a_task_past_its_work_deadline(private_intake, make_task, reviewer,
                                                      clock):
    make_task(timeouts={"offer": 300, "work": 1, "overall": 86400})
    make_task()
    task_take_next(worker=reviewer)  # the older one: its work clock is one second
    assert _value(_scrape(), "inbox_tasks_overdue", skill="invoice-review") == 0
    clock.advance(seconds=1.2)
    assert _value(_scrape(), "inbox_tasks_overdue", skill="invoice-review") == 1


def test_clock_lateness_is_how_long_the_earliest_due_deadline_waits_for_the_sweeper(
    private_intake, make_task, reviewer, clock
):
    make_task(timeouts={"offer": 300, "work": 1, "overall": 86400})
    make_task(timeouts={"offer": 300, "work": 600, "overall": 86400})
    task_take_next(worker=reviewer)  # the older one: its work clock is one second
    on_time = _scrape()
    for name in ("offer", "work", "overall"):
        assert _value(on_time, "inbox_clock_lateness_seconds", clock=name) == 0
    clock.advance(seconds=31)
    late = _scrape()
    assert _value(late, "inbox_clock_lateness_seconds", clock="work") == pytest.approx(30)
    assert _value(late, "inbox_clock_lateness_seconds", clock="offer") == 0
    assert _value(late, "inbox_clock_lateness_seconds", clock="overall") == 0
    assert deadlines_sweep()["work"] == 1
    assert _value(_scrape(), "inbox_clock_lateness_seconds", clock="work") == 0


def test_outbox_backlog_and_age_follow_pending_callbacks(private_intake, make_task, reviewer):
    before = _scrape()
    assert _value(before, "inbox_outbox_pending") == 0
    assert _value(before, "inbox_outbox_oldest_pending_seconds") == 0
    make_task()
    task = task_take_next(worker=reviewer)
    task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    Outbox.objects.filter(task=task).update(
        created_at=timezone.now() - datetime.timedelta(minutes=10))
    samples = _scrape()
    assert _value(samples, "inbox_outbox_pending") == 1
    assert 600 <= _value(samples, "inbox_outbox_oldest_pending_seconds") < 660


def test_signal_backlog_and_age_follow_pending_signals(private_intake, make_task, reviewer,
                                                       settings, clock):
    settings.INBOX_SIGNALS_BUS = "default"
    before = _scrape()
    assert _value(before, "inbox_signals_pending") == 0
    assert _value(before, "inbox_signals_oldest_pending_seconds") == 0
    make_task()
    task_take_next(worker=reviewer)
    clock.advance(seconds=90)
    samples = _scrape()
    assert _value(samples, "inbox_signals_pending") == 2  # received, taken
    assert _value(samples, "inbox_signals_oldest_pending_seconds") == 90


def test_dead_letter_depth_comes_from_sqs(private_intake, db):
    dlq = aws.queue_url(name=settings.INBOX_INTAKE_DLQ)
    for number in range(3):
        aws.message_send(url=dlq, body=json.dumps({"refused": number}))
    aws.message_send(url=aws.queue_url(name=settings.INBOX_INTAKE_QUEUE), body="{}")
    samples = _scrape()
    assert _value(samples, "inbox_intake_dlq_messages") == 3
    assert _value(samples, "inbox_intake_queue_messages") == 1
    assert _value(samples, "inbox_scrape_error", source="sqs") == 0


def test_sqs_not_answering_is_a_scrape_error_not_a_failed_page(
    private_intake, make_task, settings
):
    make_task()
    settings.AWS_ENDPOINT_URL = f"http://127.0.0.1:{_closed_port()}"
    samples = _scrape()
    assert _value(samples, "inbox_scrape_error", source="sqs") == 1
    assert not any(name == "inbox_intake_dlq_messages" for name, _labels in samples)
    assert _value(samples, "inbox_tasks", state="queued", skill="invoice-review") == 1


def test_callback_errors_are_counted_by_kind_across_processes_through_the_cache(
    private_intake, make_task, reviewer, settings, monkeypatch
):
    """A refused token on the emulator, then AWS throttling (patched: the emulator cannot
    throttle on demand) until the callback is dead."""
    before = _scrape()
    make_task()  # its token and execution are unknown to the emulator
    task = task_take_next(worker=reviewer)
    task_complete(worker=reviewer, task_id=task.pk, answer=APPROVE)
    assert callback_send(outbox_id=Outbox.objects.get(task=task).pk) == SendResult.EXPIRED

    settings.INBOX_CALLBACK_MAX_ATTEMPTS = 1
    make_task()
    throttled = task_take_next(worker=reviewer)
    task_complete(worker=reviewer, task_id=throttled.pk, answer=APPROVE)

    def throttle(**params):
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"},
                           "ResponseMetadata": {"HTTPStatusCode": 400}}, "SendTaskSuccess")

    monkeypatch.setattr(aws.client(service="stepfunctions"), "send_task_success", throttle)
    assert callback_send(outbox_id=Outbox.objects.get(task=throttled).pk) == SendResult.DEAD

    after = _scrape()

    def delta(name: str, **labels: str) -> float:
        return _value(after, name, **labels) - _value(before, name, **labels)

    assert delta("inbox_callback_errors_total", kind="token_refused") == 1
    assert delta("inbox_callback_errors_total", kind="throttled") == 1
    assert delta("inbox_callback_errors_total", kind="transient") == 0
    assert delta("inbox_callbacks_dead_total") == 1
    assert _value(after, "inbox_scrape_error", source="cache") == 0


def test_query_count_does_not_grow_with_tasks_or_skills(private_intake, make_task, reviewer):
    make_task()
    with CaptureQueriesContext(connection) as few:
        _scrape()
    for number in range(4):
        skill_ensure(slug=f"extra-{number}", name=f"Extra {number}")
        make_task(skill=f"extra-{number}")
    for _ in range(5):
        make_task()
    task_take_next(worker=reviewer)
    with CaptureQueriesContext(connection) as many:
        samples = _scrape()
    assert _value(samples, "inbox_tasks", state="queued", skill="extra-3") == 1
    # Skills and tasks, the task counts, one MIN per clock, the callback outbox, the signal
    # outbox.
    assert len(many.captured_queries) == len(few.captured_queries) == 7


def test_anonymous_and_wrong_token_get_401(db):
    anonymous = Client().get("/metrics")
    assert anonymous.status_code == 401
    assert anonymous["WWW-Authenticate"].startswith("Bearer")
    wrong = Client().get("/metrics", HTTP_AUTHORIZATION="Bearer " + "y" * 46)
    assert wrong.status_code == 401


def test_signed_in_non_staff_gets_403_and_staff_may_read(db, emulator, make_user, browser_for):
    worker = make_user(roles=(Role.WORKER,))
    assert browser_for(worker).get("/metrics").status_code == 403
    admin = make_user(roles=(Role.ADMIN,))
    assert admin.is_staff
    assert browser_for(admin).get("/metrics").status_code == 200


def test_without_a_configured_token_only_staff_may_read(db, settings, make_user, browser_for):
    settings.INBOX_METRICS_TOKEN = None
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer ").status_code == 401
    assert Client().get("/metrics", HTTP_AUTHORIZATION="Bearer None").status_code == 401
    assert browser_for(make_user(roles=(Role.WORKER,))).get("/metrics").status_code == 403


def test_output_holds_no_token_or_secret(private_intake, make_task, reviewer):
    task = make_task()
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    body = response.content.decode()
    assert "inbox_tasks{" in body
    for secret in (TOKEN, settings.SECRET_KEY, *settings.INBOX_TOKEN_KEYS,
                   settings.INBOX_TOKEN_DIGEST_KEY, task.execution_arn):
        assert secret not in body
    assert "token-" not in body  # the envelopes' task tokens start so
