"""Refused task actions (403 and 409) are audited: actor, action, task, reason; nothing else."""

import json
import uuid

import pytest
from django.core.cache import cache

from accounts.models import AuditAction, AuditEvent
from accounts.roles import Role

TOKEN = f"secret-token-{uuid.uuid4()}"
INPUT = {"invoice_id": "INV-SECRET-77", "amount": 98765}


@pytest.fixture(autouse=True)
def fresh_window():
    """Each test starts with no refusal recorded in the rate-limit window."""
    cache.clear()


def refusals():
    return AuditEvent.objects.filter(action=AuditAction.TASK_ACTION_REFUSED)


def assert_nothing_secret(entry: AuditEvent) -> None:
    text = json.dumps([entry.subject, entry.detail, entry.actor_email])
    assert TOKEN not in text
    assert "INV-SECRET-77" not in text and "98765" not in text


def test_a_409_from_the_api_is_one_audit_entry_with_actor_action_and_reason(
        api_client, make_task, worker):
    task = make_task(taskToken=TOKEN, input=INPUT)
    client = api_client(worker, scope="work")
    assert client.post(f"/api/inbox/tasks/{task.pk}/claim/", {"version": 1},
                       format="json").status_code == 200
    stale = client.post(f"/api/inbox/tasks/{task.pk}/release/", {"version": 1}, format="json")
    assert stale.status_code == 409
    entry = refusals().get()
    assert entry.actor_email == worker.email and entry.subject == str(task.pk)
    assert entry.detail["task_action"] == "release" and entry.detail["status"] == 409
    assert entry.detail["reason"] == stale.json()["detail"]
    assert_nothing_secret(entry)


def test_a_403_from_the_api_is_one_audit_entry(api_client, make_task, worker):
    """A worker's token asking for a supervisor's action is refused by role: 403."""
    task = make_task(taskToken=TOKEN, input=INPUT)
    response = api_client(worker, scope="work").post(
        f"/api/inbox/supervisor/tasks/{task.pk}/abort/", {"reason": "no"}, format="json")
    assert response.status_code == 403
    entry = refusals().get()
    assert entry.actor_email == worker.email and entry.subject == str(task.pk)
    assert entry.detail["task_action"] == "abort" and entry.detail["status"] == 403
    assert entry.detail["reason"]
    assert_nothing_secret(entry)


def test_a_successful_action_and_a_bad_input_are_not_refusals(api_client, make_task, worker):
    task = make_task()
    client = api_client(worker, scope="work")
    assert client.post(f"/api/inbox/tasks/{task.pk}/claim/", {}, format="json").status_code == 200
    assert client.post(f"/api/inbox/tasks/{task.pk}/complete/", {"answer": {"decision": "x"}},
                       format="json").status_code == 400
    assert not refusals().exists()


def test_the_same_refusal_repeated_is_audited_once_per_window(api_client, make_task, worker):
    task = make_task()
    client = api_client(worker, scope="work")
    assert client.post(f"/api/inbox/tasks/{task.pk}/claim/", {}, format="json").status_code == 200
    for _ in range(5):
        assert client.post(f"/api/inbox/tasks/{task.pk}/claim/", {},
                           format="json").status_code == 409
    assert refusals().count() == 1
    # Another action refused is another entry.
    assert client.post(f"/api/inbox/tasks/{task.pk}/release/", {"version": 1},
                       format="json").status_code == 409
    assert refusals().count() == 2
    cache.clear()  # the window passed
    client.post(f"/api/inbox/tasks/{task.pk}/claim/", {}, format="json")
    assert refusals().count() == 3


def test_a_refused_page_action_is_audited(make_task, worker, browser_for):
    task = make_task(taskToken=TOKEN, input=INPUT)
    page = browser_for(worker)
    assert page.post(f"/tasks/{task.pk}/claim/").status_code == 302
    assert not refusals().exists()
    response = page.post(f"/tasks/{task.pk}/claim/", follow=True)
    assert response.status_code == 200
    entry = refusals().get()
    assert entry.actor_email == worker.email and entry.subject == str(task.pk)
    assert entry.detail["task_action"] == "claim" and entry.detail["status"] == 409
    assert entry.detail["reason"] in response.content.decode()
    assert_nothing_secret(entry)


def test_a_page_action_refused_without_a_reason_names_the_supervisor_action(
        make_task, make_worker, browser_for):
    task = make_task()
    boss = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    browser_for(boss).post(f"/tasks/{task.pk}/abort/", {"reason": ""})
    entry = refusals().get()
    assert entry.detail["task_action"] == "abort" and entry.detail["status"] == 409


def test_refusals_are_filtered_on_the_audit_page(api_client, make_task, worker, admin,
                                                 browser_for):
    task = make_task()
    assert api_client(worker, scope="work").post(
        f"/api/inbox/tasks/{task.pk}/release/", {}, format="json").status_code == 409
    page = browser_for(admin).get("/team/audit/", {"action": "task_action_refused"})
    assert page.status_code == 200
    body = page.content.decode()
    assert "Task action refused" in body and str(task.pk) in body and worker.email in body
