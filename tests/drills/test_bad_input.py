"""Drill: bad input gets a clear error saying what is wrong and where, and changes nothing.

Adds what tests/inbox/test_intake.py, test_api.py, test_pages.py and
test_supervisor_pages.py do not cover yet: oversize envelope fields and non-object
bodies at the intake; wrong methods, unparsable JSON, malformed answers, unknown task
ids and another worker's task on the API; wrong methods and another worker's task on
the pages. Each test counts rows and versions before and after.
"""

import json
import uuid

import pytest
from rest_framework.test import APIClient

from accounts.models import Skill
from inbox.models import IntakeError, Outbox, Task, TaskEvent
from inbox.services.intake import intake_message
from inbox.services.worker import task_take_next
from tests.factories import envelope, sqs_message

ACTIONS = ["claim", "accept", "decline", "release", "complete", "reject"]


def _state() -> tuple:
    """Everything a refused request must leave as it was."""
    return (
        sorted(Task.objects.values_list("id", "state", "version", "assignee_id")),
        TaskEvent.objects.count(),
        Outbox.objects.count(),
    )


@pytest.fixture
def api():
    def client_for(user) -> APIClient:
        client = APIClient()
        client.force_authenticate(user)
        return client

    return client_for


@pytest.fixture
def held(make_task, make_worker):
    """A task in progress with its holder, and a second worker of the same skill."""
    holder = make_worker({"invoice-review": 3})
    other = make_worker({"invoice-review": 5})
    make_task()
    return task_take_next(worker=holder), holder, other


# Intake ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "problem"), [
    ({"taskToken": "t" * 3000}, "taskToken: must be at most 2048 characters"),
    ({"title": "x" * 10_000}, "title: must be at most 300 characters"),
    ({"stage": "s" * 81}, "stage: must be at most 80 characters"),
])
def test_an_oversize_envelope_field_is_refused_naming_the_field_and_its_limit(
    review_skill, change, problem
):
    body = envelope(**change)

    assert intake_message(message=sqs_message(body)) == "invalid"

    assert Task.objects.count() == 0
    problems = IntakeError.objects.get().problems
    assert problems == [problem]
    assert body["taskToken"] not in json.dumps(problems)


@pytest.mark.parametrize("body", ["null", "[]", '"a string"', "42", '{"kind": "human-task/v1"'])
def test_a_body_that_is_not_a_json_object_is_refused_saying_so(review_skill, body):
    assert intake_message(message=sqs_message(body)) == "invalid"

    assert Task.objects.count() == 0
    [problem] = IntakeError.objects.get().problems
    assert problem in ("(top): must be a JSON object",
                       "(body): must be a JSON object; it is not valid JSON")


# API ---------------------------------------------------------------------------------------


def test_wrong_methods_on_the_api_are_405_naming_the_method(api, held):
    task, holder, _ = held
    client = api(holder)
    before = _state()
    for method, url in [("get", "/api/inbox/tasks/next/"),
                        ("get", f"/api/inbox/tasks/{task.pk}/complete/"),
                        ("put", f"/api/inbox/tasks/{task.pk}/"),
                        ("delete", f"/api/inbox/tasks/{task.pk}/"),
                        ("post", "/api/inbox/queues/")]:
        response = getattr(client, method)(url)
        assert response.status_code == 405, (method, url)
        assert response.json()["detail"] == f'Method "{method.upper()}" not allowed.'
    assert _state() == before


def test_unparsable_json_is_a_400_saying_where(api, held):
    task, holder, _ = held
    before = _state()

    response = api(holder).post(f"/api/inbox/tasks/{task.pk}/complete/",
                                '{"answer": {"decision": "approve"',
                                content_type="application/json")

    assert response.status_code == 400
    assert response.json()["detail"].startswith("JSON parse error")
    assert _state() == before


@pytest.mark.parametrize(("payload", "field"), [
    ({"answer": "approve"}, "answer"),
    ({"answer": ["approve"]}, "answer"),
    ({"answer": {"decision": "maybe"}}, "decision"),
    ({"answer": {"decision": "approve", "colour": "red"}}, "colour"),
    ({"answer": {"decision": "reject", "comment": "x" * 3000}}, "comment"),
    ({"answer": {"decision": "approve"}, "version": "latest"}, "version"),
])
def test_a_malformed_answer_is_a_400_naming_the_field(api, held, payload, field):
    task, holder, _ = held
    before = _state()

    response = api(holder).post(f"/api/inbox/tasks/{task.pk}/complete/", payload, format="json")

    assert response.status_code == 400, response.json()
    body = response.json()
    assert field in (body.get("errors") or body), body
    assert _state() == before


@pytest.mark.parametrize("action", ACTIONS)
def test_an_unknown_task_is_a_404_for_every_action(api, held, action):
    _, holder, _ = held
    before = _state()

    response = api(holder).post(f"/api/inbox/tasks/{uuid.uuid4()}/{action}/",
                                {"reason": "x", "answer": {"decision": "approve"}},
                                format="json")

    assert response.status_code == 404
    assert response.json() == {"code": "not_found", "detail": "No such task."}
    assert _state() == before


@pytest.mark.parametrize("visibility", ["own", "team"])
@pytest.mark.parametrize("action", ["complete", "reject", "release", "accept", "decline"])
def test_another_worker_s_task_is_refused_by_the_api(api, held, action, visibility):
    """Unseen (the skill's default visibility): 404; seen read-only (team): 409."""
    Skill.objects.filter(slug="invoice-review").update(peer_visibility=visibility)
    task, _, other = held
    before = _state()

    response = api(other).post(f"/api/inbox/tasks/{task.pk}/{action}/",
                               {"reason": "mine now", "answer": {"decision": "approve"}},
                               format="json")

    if visibility == "own":
        assert response.status_code == 404, response.json()
        assert response.json() == {"code": "not_found", "detail": "No such task."}
    else:
        assert response.status_code == 409, response.json()
        assert response.json() == {"code": "conflict", "detail": (
            "This offer is not yours." if action in ("accept", "decline")
            else "You do not hold this task.")}
    assert _state() == before


# Pages -------------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["complete", "release", "claim", "accept"])
def test_a_get_on_a_page_action_is_405(held, browser_for, action):
    task, holder, _ = held
    before = _state()

    assert browser_for(holder).get(f"/tasks/{task.pk}/{action}/").status_code == 405
    assert _state() == before


@pytest.mark.parametrize("visibility", ["own", "team"])
@pytest.mark.parametrize("action", ["complete", "reject", "release"])
def test_another_worker_s_task_is_refused_by_the_pages(held, browser_for, action, visibility):
    """Unseen (the skill's default visibility): 404; seen read-only (team): refused."""
    Skill.objects.filter(slug="invoice-review").update(peer_visibility=visibility)
    task, _, other = held
    before = _state()

    response = browser_for(other).post(f"/tasks/{task.pk}/{action}/",
                                       {"decision": "approve", "reason": "mine now",
                                        "version": task.version}, follow=True)

    if visibility == "own":
        assert response.status_code == 404
    else:
        assert response.redirect_chain == [(f"/tasks/{task.pk}/", 302)]
        assert [str(m) for m in response.context["messages"]] == ["You do not hold this task."]
    assert _state() == before
