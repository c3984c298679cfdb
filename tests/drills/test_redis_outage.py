"""Drill: Redis (broker and cache) unavailable for a while.

A private ``redis-server`` on a free port is this drill's broker and cache, for the web
(this process: the API and the pages through Django's test client) and for a real Celery
worker subprocess. It is stopped; workers complete tasks through the API and the pages:
every answer is accepted (HTTP 200 or the page's redirect) and waits in the outbox. Redis
is started again (empty, as after a crash without persistence: the enqueues made during
the outage are gone) and the worker's beat drains the outbox: every callback lands once.
"""

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from inbox.models import Outbox, OutboxStatus, Task, TaskState
from tests.drills.conftest import SETTLED, broker_at, task_outcomes, wait_until
from tests.sfn import execution_wait

TASKS = 6


@pytest.fixture
def web_on_private_redis(private_redis, settings):
    """Point this process's cache and Celery broker at the private Redis."""
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": private_redis.url}}
    with broker_at(private_redis.url):
        yield private_redis


@pytest.mark.postgres
@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_completions_are_accepted_while_redis_is_down_and_sent_when_it_returns(
    start_reviews, reviewer, web_on_private_redis, celery_worker, browser_for, api_client,
    figures
):
    redis = web_on_private_redis
    reviews = start_reviews(TASKS)
    worker = celery_worker(redis_url=redis.url)
    worker.start()
    api = api_client(reviewer, scope="work")
    page = browser_for(reviewer)

    redis.stop()
    assert not redis.answers()
    for index, review in enumerate(reviews):
        task = api.get(f"/api/inbox/tasks/{review.task.pk}/").json()
        if task["state"] == TaskState.QUEUED:  # else the page's complete took it as next
            task = api.post(f"/api/inbox/tasks/{review.task.pk}/claim/", {}, format="json")
            assert task.status_code == 200, task.content
            task = task.json()
        assert (task["state"], task["assignee"]) == (TaskState.IN_PROGRESS, reviewer.email)
        version = task["version"]
        if index % 2:
            done = api.post(f"/api/inbox/tasks/{review.task.pk}/complete/",
                            {"answer": {"decision": "approve"}, "version": version},
                            format="json")
            assert done.status_code == 200, done.content
            assert done.json()["state"] == TaskState.COMPLETING
        else:
            done = page.post(f"/tasks/{review.task.pk}/complete/",
                             {"decision": "approve", "version": version})
            assert done.status_code == 302, done.content
    waiting = Outbox.objects.filter(status=OutboxStatus.PENDING, attempts=0).count()
    assert waiting == TASKS  # written with each decision; nothing could be sent
    assert worker.alive()

    redis.start()
    wait_until(lambda: Outbox.objects.filter(status__in=SETTLED).count() == TASKS,
               timeout=90, what="the outbox drain after Redis came back", every=0.2)

    for review in reviews:
        assert task_outcomes(review.execution) == ["TaskSucceeded"]
        assert execution_wait(execution_arn=review.execution)["status"] == "SUCCEEDED"
    assert set(Task.objects.values_list("state", flat=True)) == {TaskState.COMPLETED}
    assert settings.CACHES["default"]["LOCATION"] == redis.url
    figures(tasks=TASKS, accepted_during_outage=waiting,
            attempts=sorted(Outbox.objects.values_list("attempts", flat=True)))


@pytest.mark.django_db(transaction=True)
def test_a_push_task_released_while_redis_is_down_is_offered_again_later(
    make_task, make_worker, check_skill, web_on_private_redis
):
    """The release stands (HTTP 200); dispatch_pending_task (beat) offers the task later."""
    from inbox.services.dispatcher import task_dispatch
    from inbox.tasks import dispatch_pending_task

    redis = web_on_private_redis
    worker = make_worker({"document-check": 3})
    task = make_task(skill="document-check")
    assert task_dispatch(task_id=task.pk).assignee == worker  # offered to the worker
    api = APIClient()
    api.force_authenticate(worker)
    accepted = api.post(f"/api/inbox/tasks/{task.pk}/accept/", {}, format="json")
    assert accepted.status_code == 200, accepted.content

    redis.stop()
    released = api.post(f"/api/inbox/tasks/{task.pk}/release/", {}, format="json")

    assert released.status_code == 200, released.content
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED
    redis.start()
    assert dispatch_pending_task() == 1
    assert Task.objects.get(pk=task.pk).state == TaskState.OFFERED


@pytest.mark.django_db(transaction=True)
def test_an_offer_made_while_redis_is_down_stands_without_its_email(
    make_task, make_worker, check_skill, web_on_private_redis
):
    """The offer's notice cannot be queued; the offer itself is committed and stands."""
    from inbox.services.dispatcher import task_dispatch

    redis = web_on_private_redis
    worker = make_worker({"document-check": 3})
    redis.stop()
    task = make_task(skill="document-check")

    assert task_dispatch(task_id=task.pk).assignee == worker
    assert Task.objects.get(pk=task.pk).state == TaskState.OFFERED
