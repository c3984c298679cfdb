"""Drill: Step Functions throttles or fails half of the SendTask* calls.

``FaultProxy`` stands between the inbox and the real emulator (AWS_ENDPOINT_URL points at
it) and answers ~50% of SendTaskSuccess/SendTaskFailure requests with a
ThrottlingException (400) or an InternalFailure (500) instead of forwarding them. The
outbox is drained until it is empty (several drainers on PostgreSQL, as several workers
would): every callback must land exactly once, failed attempts must be retried only after
their backoff, and no one-second window may grant more SendTask permits than the rate.

The on-commit enqueue is replaced by nothing (as if every enqueue were lost), so the
drain, which the drill watches, does every send: each drain claims a batch and sends it
from its pool of threads. Spies wrap (and call) the rate limit, the batch claim and the
retry of ``inbox.services.callback`` to record what happened and when.
"""

import datetime
import threading
import time
from collections import Counter, defaultdict

import pytest
from django.db import connection
from django.utils import timezone

from inbox import effects
from inbox.models import Outbox, OutboxStatus
from inbox.services import callback as callbacks
from inbox.services.callback import SendResult, outbox_drain
from inbox.tokens import token_decrypt
from tests.concurrency import race
from tests.drills.conftest import complete, task_outcomes
from tests.drills.faultproxy import FaultProxy
from tests.sfn import execution_wait

TASKS = 20
RATE = 4
BACKOFF_BASE = 0.5


@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_every_callback_lands_once_through_half_failing_sendtask_calls(
    start_reviews, reviewer, settings, monkeypatch, figures
):
    reviews = start_reviews(TASKS)
    monkeypatch.setattr(effects, "enqueue", lambda name, *arguments: None)
    for review in reviews:
        complete(review, reviewer)
    settings.INBOX_SENDTASK_RATE = RATE
    settings.INBOX_CALLBACK_BACKOFF_BASE_SECONDS = BACKOFF_BASE
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    permits, claims, retries = [], defaultdict(list), []
    lock = threading.Lock()
    real_rate_take, real_claim = callbacks.rate_take, callbacks._claim_due
    real_retry = callbacks._retry_or_dead

    def rate_take(**kwargs):
        permit = real_rate_take(**kwargs)
        with lock:
            permits.append(permit)
        return permit

    def claim(*, limit, grace_seconds=None):
        rows = real_claim(limit=limit, grace_seconds=grace_seconds)
        with lock:
            for row in rows:
                claims[row.pk].append(timezone.now())
        return rows

    def retry(row, *, exc):
        failed_at = timezone.now()
        result = real_retry(row, exc=exc)
        due = Outbox.objects.values_list("next_attempt_at", flat=True).get(pk=row.pk)
        with lock:
            retries.append((row.pk, row.attempts, failed_at, due, result))
        return result

    monkeypatch.setattr(callbacks, "rate_take", rate_take)
    monkeypatch.setattr(callbacks, "_claim_due", claim)
    monkeypatch.setattr(callbacks, "_retry_or_dead", retry)
    drainers = 3 if connection.vendor == "postgresql" else 1
    started = time.monotonic()

    with FaultProxy(upstream=settings.AWS_ENDPOINT_URL, share=0.5) as proxy:
        settings.AWS_ENDPOINT_URL = proxy.url

        def drain(_: int) -> None:
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and Outbox.objects.filter(
                    status=OutboxStatus.PENDING).exists():
                # With a budget, as beat's drain runs (inbox.tasks): a batch whose permits
                # were all granted is followed by the next in the same window, so the rate
                # limit is reached by one drainer too (SQLite's), however slow the machine.
                outbox_drain(budget_seconds=1.0)
                time.sleep(0.05)

        _, errors = race(drain, range(drainers))
    assert errors == []
    elapsed = time.monotonic() - started

    rows = list(Outbox.objects.select_related("task"))
    assert {row.status for row in rows} == {OutboxStatus.SENT}, [r.last_error for r in rows]
    # Exactly once: one forwarded (accepted) call per token, one outcome per execution.
    forwarded = Counter(seen.token for seen in proxy.sends("forwarded"))
    tokens = {token_decrypt(row.task.token_ciphertext) for row in rows}
    assert forwarded == Counter({token: 1 for token in tokens})
    assert all(seen.status == 200 for seen in proxy.sends("forwarded"))
    for review in reviews:
        assert task_outcomes(review.execution) == ["TaskSucceeded"]
        assert execution_wait(execution_arn=review.execution)["status"] == "SUCCEEDED"
    # The faults happened and were retried, each retry only after its backoff.
    faults = Counter(seen.answer for seen in proxy.sends() if seen.answer != "forwarded")
    assert faults["throttling"] and faults["internal"]
    assert retries and all(result == SendResult.RETRY for *_, result in retries)
    for outbox_id, attempt, failed_at, due, _ in retries:
        ceiling = BACKOFF_BASE * 2 ** (attempt - 1)
        assert datetime.timedelta(0) <= due - failed_at <= datetime.timedelta(
            seconds=ceiling + 0.5), (attempt, due - failed_at)
        later = [at for at in claims[outbox_id] if at > failed_at]
        assert later and later[0] >= due, "a retry came before its backoff ran out"
    # The rate limit held in every window, and it was reached (a batch got fewer permits
    # than it asked for, or none).
    granted = Counter()
    for permit in permits:
        granted[permit.window] += permit.calls
    assert max(granted.values()) <= RATE
    refused = sum(1 for p in permits if p.wait > 0)
    assert refused
    figures(tasks=TASKS, drainers=drainers, rate=RATE, elapsed_s=round(elapsed, 1),
            sendtask_requests=len(proxy.sends()), faults=dict(faults),
            inbox_retries=len(retries),
            attempts=dict(Counter(row.attempts for row in rows)),
            max_permits_per_window=max(granted.values()), permits_refused=refused,
            longest_backoff_s=round(max((d - f).total_seconds() for _, _, f, d, _ in retries),
                                    2))
