"""Every refused API request answers one JSON shape: code, detail, and where it went wrong."""

import pytest
from django.test import Client
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


# Bounded bodies, and every other refusal in the same shape ---------------------------------


@pytest.fixture
def held(make_task, worker):
    """A task the worker holds, and the worker's API client."""
    from inbox.services.worker import task_claim

    task = task_claim(worker=worker, task_id=make_task().pk)
    client = APIClient()
    client.force_authenticate(worker)
    return task, client


def _unchanged(task) -> bool:
    before = (task.state, task.version, task.events.count())
    task.refresh_from_db()
    return (task.state, task.version, task.events.count()) == before


def test_a_body_nested_50000_deep_is_a_400_naming_its_depth_and_changes_nothing(held):
    """It was an HTML 500: json.loads raised RecursionError."""
    task, client = held

    response = client.post(f"/api/inbox/tasks/{task.pk}/complete/", "[" * 50_000,
                           content_type="application/json")

    assert response.status_code == 400
    assert response.json() == {
        "code": "too_deep",
        "detail": "The JSON body nests 50,000 levels deep, more than the 64 the API reads."}
    assert _unchanged(task)


def test_a_body_nested_64_deep_is_read_and_65_deep_is_refused(held):
    task, client = held
    url = f"/api/inbox/tasks/{task.pk}/complete/"

    def body(depth: int) -> str:
        # {"answer": ...} is the first level.
        return '{"answer": ' + "[" * (depth - 1) + "]" * (depth - 1) + "}"

    assert client.post(url, body(64), content_type="application/json").json()["code"] != (
        "too_deep")
    assert client.post(url, body(65), content_type="application/json").json()["code"] == (
        "too_deep")
    assert _unchanged(task)


@pytest.mark.parametrize("size", [1_048_577, 3_000_000])
def test_a_body_over_the_api_limit_is_a_413_in_the_json_shape(held, size):
    """Above 1 MiB the API's parser refuses it; above Django's 2.5 MB, Django (was an HTML
    400)."""
    task, client = held
    body = '{"answer": {"comment": "' + "x" * size + '"}}'

    response = client.post(f"/api/inbox/tasks/{task.pk}/complete/", body,
                           content_type="application/json")

    assert response.status_code == 413
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "code": "too_large",
        "detail": "The request body is larger than 1,048,576 bytes, the most the API reads."}
    assert _unchanged(task)


def test_a_page_form_over_djangos_limit_keeps_the_html_400(make_task, worker, client):
    from inbox.services.worker import task_claim

    task = task_claim(worker=worker, task_id=make_task().pk)
    client.force_login(worker)

    response = client.post(f"/tasks/{task.pk}/complete/",
                           {"decision": "reject", "comment": "x" * 3_000_000})

    assert response.status_code == 400
    assert response["Content-Type"].startswith("text/html")
    assert _unchanged(task)


@pytest.mark.parametrize("content_type", ["text/plain", "multipart/form-data; boundary=b",
                                          "application/x-www-form-urlencoded"])
def test_a_body_that_is_not_json_is_a_415_in_the_json_shape(held, content_type):
    task, client = held

    response = client.post(f"/api/inbox/tasks/{task.pk}/complete/", "answer=x",
                           content_type=content_type)

    assert response.status_code == 415
    assert response.json()["code"] == "unsupported_media_type"
    assert _unchanged(task)


def test_a_request_django_refuses_under_api_is_a_400_in_the_json_shape(admin):
    """A SuspiciousOperation (here a Host not allowed) is refused before any view."""
    client = APIClient(HTTP_HOST="evil.example")
    client.force_authenticate(admin)

    response = client.get("/api/inbox/queues/")
    page = Client(HTTP_HOST="evil.example").get("/")

    assert response.status_code == 400
    assert set(response.json()) == {"code", "detail"}
    assert response.json()["code"] == "bad_request"
    assert (page.status_code, page["Content-Type"].startswith("text/html")) == (400, True)


def test_a_server_error_under_api_is_json_without_internals_and_a_page_keeps_its_page(
        admin, monkeypatch):
    """A bug is simulated by patching the queues selector to raise (no service can)."""

    def broken(**kwargs):
        raise RuntimeError("internal detail: /srv/secret.py line 9")

    monkeypatch.setattr("inbox.api.my_queues", broken)
    monkeypatch.setattr("inbox.views.my_queues", broken)
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(admin)
    browser = Client(raise_request_exception=False)
    browser.force_login(admin)

    response = api.get("/api/inbox/queues/")
    page = browser.get("/")

    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert set(response.json()) == {"code", "detail"}
    assert response.json()["code"] == "server_error"
    assert b"secret" not in response.content and b"RuntimeError" not in response.content
    assert (page.status_code, page["Content-Type"].startswith("text/html")) == (500, True)


@pytest.mark.parametrize("cause", ["pool", "other"])
def test_a_request_that_waited_past_the_pools_timeout_is_a_503_with_retry_after(
        admin, monkeypatch, cause):
    """Every pooled connection busy past the wait (a burst of reconnecting pages) is not a
    failure of the request: 503 and Retry-After, under /api/ in the error shape. Django
    wraps psycopg's error in its own, as here; any other database error stays a 500."""
    from django.db.utils import OperationalError
    from psycopg_pool import PoolTimeout

    def starved(**kwargs):
        if cause == "pool":
            try:
                raise PoolTimeout("couldn't get a connection after 10.00 sec")
            except PoolTimeout as timeout:
                raise OperationalError(str(timeout)) from timeout
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr("inbox.api.my_queues", starved)
    monkeypatch.setattr("inbox.views.my_queues", starved)
    api = APIClient(raise_request_exception=False)
    api.force_authenticate(admin)
    browser = Client(raise_request_exception=False)
    browser.force_login(admin)

    response = api.get("/api/inbox/queues/")
    page = browser.get("/")

    if cause == "other":
        assert (response.status_code, page.status_code) == (500, 500)
        assert "Retry-After" not in response and "Retry-After" not in page
        return
    assert (response.status_code, response["Retry-After"]) == (503, "2")
    assert response.json()["code"] == "busy"
    assert "try again" in response.json()["detail"]
    assert (page.status_code, page["Retry-After"]) == (503, "2")
    assert b"busy" in page.content
