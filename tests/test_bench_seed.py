"""The benches' bulk-loaded tasks carry the history intake would have written, so that
what a take reads (each task's events) is as in production; their workers' API tokens
sign in as tokens in steady use do."""

import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from accounts.models import ApiToken
from inbox.history import events_verify
from inbox.models import GENESIS_HASH, Task, TaskEvent
from inbox.services import worker as worker_service

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from _common import api_token, tasks_insert, workers_create


@pytest.mark.postgres  # the seeding hashes in SQL (inbox_isoformat, migration 0010)
def test_seeded_tasks_have_a_receive_event_the_chain_verifies(review_skill, make_worker):
    with connection.cursor() as cursor:
        tasks_insert(cursor, count=3, skill_id=str(review_skill.pk))  # no history: untouched
        tasks_insert(cursor, count=4, start=4, skill_id=str(review_skill.pk), history=True)
    seeded = list(Task.objects.exclude(chain_head=GENESIS_HASH))
    assert len(seeded) == 4
    assert TaskEvent.objects.count() == 4  # only the seeded tasks got an event
    for task in seeded:
        event = task.events.get()
        assert (event.action, event.version, event.to_state) == ("receive", 1, "queued")
        assert event.data == {"overall_deadline": task.overall_deadline.isoformat()}
        assert event.at == task.created_at
        assert events_verify(task=task) is None
    # A take links its event to the seeded head, as it would to intake's.
    worker = make_worker({review_skill.slug: 3})
    Task.objects.filter(chain_head=GENESIS_HASH).delete()
    taken = worker_service.task_take_next(worker=worker)
    assert [e.action for e in taken.events.order_by("version")] == ["receive", "take_next"]
    assert events_verify(task=taken) is None


@pytest.mark.postgres
def test_seeding_refuses_tasks_that_would_not_be_fresh(review_skill):
    with connection.cursor() as cursor, pytest.raises(ValueError, match="version 1"):
        tasks_insert(cursor, count=1, skill_id=str(review_skill.pk), history=True,
                     state="'in_progress'")


def test_bench_tokens_take_as_a_token_in_steady_use_writes_no_note(review_skill, make_task):
    """bench/take_next.py's HTTP takers each use a token for only a few takes: created as
    just used, their takes write no last-use note (one a minute per token in production)."""
    make_task()
    make_task()
    [worker] = workers_create(1, skills_of=lambda i: [review_skill.pk], prefix="seed-",
                              api_tokens=True)
    token = ApiToken.objects.get(user_id=worker)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {api_token('seed-', 0)}")
    for _ in range(2):
        with CaptureQueriesContext(connection) as captured:
            response = client.post("/api/inbox/tasks/next/", {}, format="json")
        assert response.status_code == 200, response.content
        assert response.json()["assignee"] == token.user.email
        writes = [q["sql"] for q in captured.captured_queries
                  if q["sql"].startswith("UPDATE") and "accounts_apitoken" in q["sql"]]
        assert writes == []
    token.refresh_from_db()
    assert token.last_used_at is not None
