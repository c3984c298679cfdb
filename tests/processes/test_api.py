"""The processes REST API: admins only; deploy, start and list through the services."""

from pathlib import Path

import pytest
from django.core.management import call_command
from rest_framework.test import APIClient

from accounts.roles import Role
from processes.models import Execution, ProcessVersion
from processes.services import process_deploy, process_start
from tests.processes.lifecycle import succeed_spec, unique_name, wait_spec

pytestmark = pytest.mark.django_db

ENDPOINTS = [
    ("get", "/api/processes/"),
    ("post", "/api/processes/deploy/"),
    ("get", "/api/processes/some-process/executions/"),
    ("post", "/api/processes/some-process/executions/"),
]


@pytest.fixture
def admin_client(admin) -> APIClient:
    client = APIClient()
    client.force_authenticate(admin)
    return client


# Permissions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
def test_anonymous_is_refused(db, method, url):
    response = getattr(APIClient(), method)(url, {}, format="json")

    assert response.status_code in (401, 403)


@pytest.mark.parametrize("role", [Role.WORKER, Role.SUPERVISOR])
@pytest.mark.parametrize(("method", "url"), ENDPOINTS)
def test_workers_and_supervisors_are_forbidden(make_user, role, method, url):
    """Only admins manage processes; the answer says so and nothing is done."""
    client = APIClient()
    client.force_authenticate(make_user(roles=(role,)))

    response = getattr(client, method)(url, {"spec": "x", "business_key": "k"}, format="json")

    assert response.status_code == 403
    assert response.json()["detail"] == "Only admins manage processes."


def test_worker_with_a_session_is_forbidden_too(make_user):
    """The same through a signed-in browser session, not only a forced authentication."""
    client = APIClient()
    client.force_login(make_user(roles=(Role.WORKER,)))

    assert client.get("/api/processes/").status_code == 403


def test_admin_may_list_processes(admin_client):
    response = admin_client.get("/api/processes/")

    assert response.status_code == 200
    assert response.json() == []


def test_superuser_is_an_admin(db):
    from accounts.models import User

    client = APIClient()
    client.force_authenticate(User.objects.create_superuser(email="root@example.com"))

    assert client.get("/api/processes/").status_code == 200


# Deploy --------------------------------------------------------------------------------------


@pytest.mark.emulator
def test_deploy_answers_201_then_200(emulator, admin_client):
    """A new version is created (201); the same text again changes nothing (200)."""
    name = unique_name()
    text = succeed_spec(name=name, description="Via the API.")

    first = admin_client.post("/api/processes/deploy/", {"spec": text}, format="json")
    second = admin_client.post("/api/processes/deploy/", {"spec": text}, format="json")

    assert first.status_code == 201
    body = first.json()
    version = ProcessVersion.objects.get(process__name=name)
    assert body["process"] == name
    assert body["version"] == 1
    assert body["created"] is True
    assert body["description"] == "Via the API."
    assert body["state_machine_arn"] == version.state_machine_arn
    assert body["spec_sha256"] == version.spec_sha256
    assert version.deployed_by.email.endswith("@example.com")
    assert second.status_code == 200
    assert second.json()["created"] is False


def test_deploy_of_an_invalid_spec_answers_400_with_every_problem(admin_client):
    response = admin_client.post(
        "/api/processes/deploy/", {"spec": "process: Bad\nversion: 0\n"}, format="json"
    )

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid_spec"
    assert "spec: process: required" in body["problems"][0]
    assert len(body["problems"]) == 3
    assert body["detail"] == "\n".join(body["problems"])


def test_deploy_without_a_spec_answers_400(admin_client):
    response = admin_client.post("/api/processes/deploy/", {}, format="json")

    assert response.status_code == 400
    assert "spec" in response.json()["errors"]


@pytest.mark.emulator
def test_deploy_of_a_changed_version_answers_409(emulator, admin_client):
    name = unique_name()
    admin_client.post("/api/processes/deploy/", {"spec": succeed_spec(name=name)}, format="json")

    response = admin_client.post(
        "/api/processes/deploy/",
        {"spec": succeed_spec(name=name, description="Changed.")},
        format="json",
    )

    assert response.status_code == 409
    assert response.json()["code"] == "conflict"
    assert "raise the version" in response.json()["detail"]


@pytest.mark.emulator
def test_list_shows_processes_with_versions_newest_first(emulator, admin_client):
    name = unique_name()
    process_deploy(text=succeed_spec(name=name, version=1), source="a.yaml")
    process_deploy(text=succeed_spec(name=name, version=2), source="a.yaml")

    response = admin_client.get("/api/processes/")

    assert response.status_code == 200
    (process,) = [p for p in response.json() if p["name"] == name]
    assert [v["version"] for v in process["versions"]] == [2, 1]
    assert process["versions"][0]["state_machine_name"] == f"{name}-v2"
    assert process["versions"][0]["deployed_by"] is None


# Executions ----------------------------------------------------------------------------------


@pytest.mark.emulator
def test_start_answers_201_then_200_for_the_same_key(emulator, admin_client):
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml")
    url = f"/api/processes/{name}/executions/"
    payload = {"input": {"amount": 5}, "business_key": "INV-5"}

    first = admin_client.post(url, payload, format="json")
    second = admin_client.post(url, payload, format="json")

    assert first.status_code == 201
    body = first.json()
    assert body["created"] is True
    assert body["process"] == name
    assert body["version"] == 1
    assert body["business_key"] == "INV-5"
    assert body["status"] == "RUNNING"
    assert body["input"] == {"amount": 5}
    assert body["started_by"].endswith("@example.com")
    assert second.status_code == 200
    assert second.json()["created"] is False
    assert second.json()["execution_arn"] == body["execution_arn"]
    assert Execution.objects.count() == 1


@pytest.mark.emulator
def test_start_with_the_same_key_and_other_input_answers_409(emulator, admin_client):
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml")
    url = f"/api/processes/{name}/executions/"
    admin_client.post(url, {"input": {"a": 1}, "business_key": "K"}, format="json")

    response = admin_client.post(url, {"input": {"a": 2}, "business_key": "K"}, format="json")

    assert response.status_code == 409


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"input": {}}, "business_key"),
        ({"input": {}, "business_key": "k" * 201}, "business_key"),
        ({"input": {}, "business_key": "k", "version": 0}, "version"),
    ],
)
def test_start_validates_its_input(admin_client, payload, field):
    response = admin_client.post("/api/processes/p/executions/", payload, format="json")

    assert response.status_code == 400
    assert field in response.json()["errors"]


def test_start_with_a_list_as_input_answers_400(admin_client):
    response = admin_client.post(
        "/api/processes/p/executions/", {"input": [1], "business_key": "k"}, format="json"
    )

    assert response.status_code == 400
    assert "must be a JSON object" in response.json()["detail"]


def test_unknown_process_answers_404(admin_client):
    assert admin_client.get("/api/processes/nope/executions/").status_code == 404
    response = admin_client.post(
        "/api/processes/nope/executions/", {"business_key": "k"}, format="json"
    )
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.emulator
def test_executions_are_listed_newest_first_a_page_at_a_time(emulator, admin_client):
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml")
    for n in range(3):
        process_start(name=name, input={"n": n}, business_key=f"K-{n}")

    response = admin_client.get(f"/api/processes/{name}/executions/?limit=2")

    assert response.status_code == 200
    body = response.json()
    assert body["count"] == 3
    assert [e["business_key"] for e in body["results"]] == ["K-2", "K-1"]
    assert body["next"] is not None
    assert body["results"][0]["started_by"] is None
    rest = admin_client.get(body["next"]).json()
    assert [e["business_key"] for e in rest["results"]] == ["K-0"]


# The schema ------------------------------------------------------------------------------------


def test_openapi_schema_generates_without_warnings(db, tmp_path: Path):
    """manage.py spectacular --validate --fail-on-warn passes, and the operations are in it."""
    out = tmp_path / "schema.yaml"

    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))

    schema = out.read_text()
    for operation in (
        "processes_list",
        "processes_deploy",
        "processes_executions_list",
        "processes_executions_start",
    ):
        assert f"operationId: {operation}" in schema
