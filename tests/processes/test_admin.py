"""The admin shows processes, versions and executions, read-only."""

import pytest
from django.test import Client

from accounts.roles import Role
from processes.services import process_deploy, process_start
from tests.processes.lifecycle import unique_name, wait_spec

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_browser(admin) -> Client:
    client = Client()
    client.force_login(admin)
    return client


@pytest.mark.emulator
def test_admin_sees_versions_and_executions_but_cannot_change_them(emulator, admin_browser):
    """Change pages render as read-only views; add pages are refused."""
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")
    execution, _ = process_start(name=name, input={"amount": 3}, business_key="K-1")

    for url in (
        f"/admin/processes/process/{version.process.pk}/change/",
        f"/admin/processes/processversion/{version.pk}/change/",
        f"/admin/processes/execution/{execution.pk}/change/",
    ):
        response = admin_browser.get(url)
        assert response.status_code == 200, url
        assert b'type="submit" value="Save"' not in response.content, url
    page = admin_browser.get(f"/admin/processes/processversion/{version.pk}/change/")
    assert version.state_machine_arn.encode() in page.content
    assert b"&quot;StartAt&quot;: &quot;pause&quot;" in page.content

    for model in ("process", "processversion", "execution"):
        assert admin_browser.get(f"/admin/processes/{model}/add/").status_code == 403
        assert admin_browser.get(f"/admin/processes/{model}/").status_code == 200


def test_workers_do_not_reach_the_admin(make_user):
    client = Client()
    client.force_login(make_user(roles=(Role.WORKER,)))

    response = client.get("/admin/processes/execution/")

    assert response.status_code == 302
