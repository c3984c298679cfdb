"""What a hot request costs the database: its statements, counted.

Take next and a decision over the REST API do no work their answer does not need: the
token's row with the user's roles (its last use is written at most once a minute), the task
read once for permission (its skill, holder and the actor's proficiency in the same read),
the change written conditioned on the version read (no second read, no lock held before
it), and the history the answer shows. On PostgreSQL take next is one round trip
(inbox_take_next_task), whose answer holds the history too; a decision reads the history
with its task, and writes its change, event and outbox row in one round trip. The process
version's form is read once per process (deployed versions never change).
"""

from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from inbox.models import TaskState
from inbox.services.worker import task_accept, task_decline, task_release, task_take_next
from processes.services import process_deploy

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"


@pytest.fixture
def deployed(emulator, review_skill, approval_skill):
    """The demo invoice process deployed: its tasks' form comes from its spec."""
    process_deploy(text=(SPECS / "invoice-approval.yaml").read_text(), source="invoice")


def _statements(queries: CaptureQueriesContext) -> list[str]:
    """The statements sent, without the test's own transaction markers (savepoints)."""
    return [q["sql"] for q in queries.captured_queries
            if not q["sql"].startswith(("SAVEPOINT", "RELEASE SAVEPOINT"))]


def _warm(client, make_task) -> None:
    """One take and release first: the process's spec read, the token's use noted."""
    make_task()
    taken = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    client.post(f"/api/inbox/tasks/{taken['id']}/release/", {}, format="json")


@pytest.mark.postgres
def test_take_next_over_the_api_is_two_statements(deployed, api_client, make_task,
                                                   make_worker):
    """The token, then the function, whose answer holds the history the response shows."""
    from inbox.models import TaskEvent

    worker = make_worker({"invoice-review": 3})
    client = api_client(worker, scope="work")
    _warm(client, make_task)
    with CaptureQueriesContext(connection) as queries:
        response = client.post("/api/inbox/tasks/next/", {}, format="json")
    assert response.status_code == 200
    answer = response.json()
    assert answer["state"] == TaskState.IN_PROGRESS
    statements = _statements(queries)
    assert len(statements) == 2, statements
    assert "inbox_take_next_task" in statements[1]
    stored = TaskEvent.objects.filter(task_id=answer["id"]).order_by("version")
    assert [(e["version"], e["action"], e["to_state"]) for e in answer["history"]] == [
        (e.version, e.action, e.to_state) for e in stored]
    assert answer["history"][-1]["action"] == "take_next"


def test_complete_over_the_api_reads_its_task_once_and_writes_its_three_rows_in_one(
        deployed, api_client, make_task, make_worker):
    from inbox.models import TaskEvent

    worker = make_worker({"invoice-review": 3})
    client = api_client(worker, scope="work")
    _warm(client, make_task)
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    with CaptureQueriesContext(connection) as queries:
        response = client.post(f"/api/inbox/tasks/{task['id']}/complete/",
                               {"answer": {"decision": "approve"}, "version": task["version"]},
                               format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["state"] == TaskState.COMPLETING
    answered = response.json()["history"]
    stored = TaskEvent.objects.filter(task_id=task["id"]).order_by("version")
    assert [(e["version"], e["action"], e["to_state"], e["actor"], e["at"]) for e in answered] == [
        (e.version, e.action, e.to_state, e.actor_label,
         e.at.isoformat().replace("+00:00", "Z")) for e in stored]
    assert answered[-1]["action"] == "complete"
    statements = _statements(queries)
    # token (the user's roles in the same read), the task (permission) with its history on
    # PostgreSQL, then its UPDATE conditioned on the version read with the event and the
    # outbox row in one (inbox.bulk.row_update_inserting). SQLite has no INSERT in a WITH:
    # there the UPDATE, the event and the outbox row are one statement each, and the
    # answer's history a read of its own.
    on_postgres = connection.vendor == "postgresql"
    assert len(statements) == (3 if on_postgres else 6), statements
    assert sum('FROM "inbox_task"' in sql for sql in statements) == 1
    if on_postgres:
        assert "FROM inbox_taskevent e" in statements[1]
        assert statements[2].startswith('WITH u AS (UPDATE "inbox_task"')
        assert '"version" = ' in statements[2]
        assert 'r0 AS (INSERT INTO "inbox_taskevent"' in statements[2]
        assert 'r1 AS (INSERT INTO "inbox_outbox"' in statements[2]
    else:
        assert statements[2].startswith('UPDATE "inbox_task"') and '"version" = ' in statements[2]
        assert statements[3].startswith('INSERT INTO "inbox_taskevent"')
        assert statements[4].startswith('INSERT INTO "inbox_outbox"')


def test_a_task_over_the_api_is_its_token_and_one_read(deployed, api_client, make_task,
                                                       make_worker):
    """GET a task: the token, then the task with its history in the same read (PostgreSQL;
    elsewhere the history is a read of its own)."""
    from inbox.models import TaskEvent

    worker = make_worker({"invoice-review": 3})
    client = api_client(worker, scope="work")
    _warm(client, make_task)
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    with CaptureQueriesContext(connection) as queries:
        response = client.get(f"/api/inbox/tasks/{task['id']}/")
    assert response.status_code == 200, response.json()
    stored = TaskEvent.objects.filter(task_id=task["id"]).order_by("version")
    assert [(e["version"], e["action"]) for e in response.json()["history"]] == [
        (e.version, e.action) for e in stored]
    assert len(_statements(queries)) == (2 if connection.vendor == "postgresql" else 3)


@pytest.mark.postgres
def test_complete_then_next_over_the_api_adds_only_the_take(deployed, api_client,
                                                             make_task, make_worker):
    """A decision and the next take in one request: the complete's three statements, then
    the take's one (its answer holds the next task's history)."""
    worker = make_worker({"invoice-review": 3})
    client = api_client(worker, scope="work")
    _warm(client, make_task)
    make_task()
    task = client.post("/api/inbox/tasks/next/", {}, format="json").json()
    with CaptureQueriesContext(connection) as queries:
        response = client.post(f"/api/inbox/tasks/{task['id']}/complete/",
                               {"answer": {"decision": "approve"}, "then": "next"},
                               format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["next"]["state"] == TaskState.IN_PROGRESS
    statements = _statements(queries)
    assert len(statements) == 4, statements
    assert statements[2].startswith('WITH u AS (UPDATE "inbox_task"')
    assert "inbox_take_next_task" in statements[3]


@pytest.mark.parametrize("action", ["accept", "decline", "release"])
def test_a_workers_transition_is_at_most_three_statements(action, make_task, make_worker,
                                                          check_skill):
    """The conditional update and the event (one statement on PostgreSQL); a decline's
    pass: one more."""
    from inbox.services.dispatcher import task_dispatch

    worker = make_worker({"document-check": 3, "invoice-review": 3})
    if action == "release":
        make_task()
        task = task_take_next(worker=worker)
    else:
        task = make_task(skill="document-check")
        task_dispatch(task_id=task.pk)
    service = {"accept": task_accept, "decline": task_decline, "release": task_release}[action]
    arguments = {"reason": "Not mine."} if action == "decline" else {}
    task.refresh_from_db()
    assert task.assignee == worker
    from inbox.selectors import access_task

    access_task(user=worker, task_id=task.pk)  # the roles read, remembered on the user
    with CaptureQueriesContext(connection) as queries:
        service(worker=worker, task_id=task.pk, **arguments)
    statements = _statements(queries)
    # access_task's read, then the transition's: update and event (one round trip on
    # PostgreSQL: inbox.bulk.row_update_inserting), + the pass.
    expected = 1 + (1 if connection.vendor == "postgresql" else 2) + (action == "decline")
    assert len(statements) == expected, statements
