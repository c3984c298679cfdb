"""Every refused API request answers one JSON shape: code, detail, and where it went wrong."""

import pytest
from rest_framework.test import APIClient

from accounts.roles import Role

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_api(admin) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin)
    return client


def test_a_validation_error_names_each_field_in_the_detail_and_in_errors(admin_api):
    response = admin_api.post("/api/processes/p/executions/",
                              {"input": {}, "business_key": "k", "version": 0}, format="json")

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    assert set(body["errors"]) == {"version"}
    assert body["detail"].startswith("The request is not valid. version: ")
    assert body["errors"]["version"] in body["detail"]


def test_nested_problems_are_named_by_their_path():
    from config.api import _flatten

    assert _flatten({"answer": {"items": [{}, {"amount": ["Must be positive."]}]},
                     "non_field_errors": ["Bad pair.", "Worse."]}) == {
        "answer.items[1].amount": "Must be positive.", "(body)": "Bad pair.; Worse."}


def test_drf_refusals_take_the_same_shape(make_user):
    anonymous = APIClient().get("/api/inbox/queues/")
    assert anonymous.status_code in (401, 403)
    assert set(anonymous.json()) == {"code", "detail"}
    assert anonymous.json()["code"] in ("not_authenticated", "authentication_failed")

    worker = APIClient()
    worker.force_authenticate(make_user(roles=(Role.WORKER,)))
    refused = worker.get("/api/processes/")
    assert refused.status_code == 403
    assert refused.json() == {"code": "permission_denied",
                              "detail": "Only admins manage processes."}
    wrong_method = worker.delete("/api/inbox/queues/")
    assert (wrong_method.status_code, wrong_method.json()["code"]) == (405, "method_not_allowed")


def test_an_unknown_api_url_answers_json_and_a_page_url_the_404_page(make_user, client):
    worker = APIClient()
    worker.force_authenticate(make_user(roles=(Role.WORKER,)))

    response = worker.post("/api/inbox/tasks/not-a-uuid/complete/", {}, format="json")

    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json()["code"] == "not_found"
    assert "/api/inbox/tasks/not-a-uuid/complete/" in response.json()["detail"]
    client.force_login(make_user(roles=(Role.WORKER,)))
    page = client.get("/tasks/not-a-uuid/")
    assert page.status_code == 404
    assert page["Content-Type"].startswith("text/html")
