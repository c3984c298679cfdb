"""Drill: SIGKILL the Celery worker while it sends callbacks.

A real worker (``celery -A config worker -B``) sends the callbacks of completed tasks
of real executions on the emulator, through Redis, against the test database. It is
killed with SIGKILL in the middle of the drain (no shutdown, no acks, a claim possibly
half done), started again, and every task's result must reach Step Functions exactly
once: one TaskSucceeded in each execution's history, each execution SUCCEEDED.

The worker runs with a 5 s callback lease (``tests/drills/worker_settings.py``) instead
of 120 s, so a row claimed by the killed worker is due again within the drill.
"""

import pytest
from django.conf import settings

from config.celery import app as celery_app
from inbox.models import Outbox, OutboxStatus, Task, TaskState
from tests.drills.conftest import SETTLED, complete, task_outcomes, wait_until
from tests.sfn import execution_wait

TASKS = 24


def _settled() -> int:
    return Outbox.objects.filter(status__in=SETTLED).count()


def _claimed() -> int:
    """Count the rows a sender has claimed and not settled."""
    return Outbox.objects.filter(status=OutboxStatus.PENDING, attempts__gt=0).count()


@pytest.mark.postgres
@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_drain_loses_no_callback_and_sends_none_twice(
    start_reviews, reviewer, celery_worker, figures
):
    if not settings.REDIS_URL:
        pytest.skip("needs Redis: set REDIS_URL (as .ci/run does)")
    # Leave the worker only this drill's messages, not those earlier tests left in Redis.
    celery_app.control.purge()
    reviews = start_reviews(TASKS)
    for review in reviews:
        complete(review, reviewer)  # enqueued on commit; no worker runs yet
    assert _settled() == 0
    # 8 SendTask calls a second: the drain takes ~3 s, long enough to kill it halfway.
    worker = celery_worker(redis_url=settings.REDIS_URL, INBOX_SENDTASK_RATE="8")

    worker.start()
    # Kill it holding a claim (most of the time it does: a claimed row waits for its
    # SendTask permit), so the restart must also wait out a dead worker's lease.
    wait_until(lambda: _settled() >= TASKS // 4 and _claimed() > 0, timeout=60,
               what="a quarter of the sends, with one more claimed", every=0.01)
    worker.kill()

    at_kill = _settled()
    in_flight = _claimed()
    assert 0 < at_kill < TASKS, f"the kill came too late to drill anything ({at_kill} sent)"
    worker.start()
    wait_until(lambda: _settled() == TASKS, timeout=90, what="every callback's delivery",
               every=0.2)
    worker.stop()

    for review in reviews:
        assert task_outcomes(review.execution) == ["TaskSucceeded"], review.execution
        assert execution_wait(execution_arn=review.execution)["status"] == "SUCCEEDED"
    assert set(Task.objects.values_list("state", flat=True)) == {TaskState.COMPLETED}
    rows = Outbox.objects.all()
    assert not rows.filter(status=OutboxStatus.DEAD).exists()
    figures(tasks=TASKS, settled_at_kill=at_kill, claimed_unsettled_at_kill=in_flight,
            sent=rows.filter(status=OutboxStatus.SENT).count(),
            reconciled=rows.filter(status=OutboxStatus.RECONCILED).count(),
            max_attempts=max(r.attempts for r in rows))
