"""The admins' processes page: each process and its deployed versions."""

import pytest

from accounts.roles import Role
from processes.services import process_deploy
from tests.pages import help_keys
from tests.processes.lifecycle import unique_name, wait_spec


@pytest.mark.parametrize("role", [Role.WORKER, Role.SUPERVISOR])
def test_the_processes_page_does_not_exist_for_workers_and_supervisors(role, make_user,
                                                                       browser_for):
    assert browser_for(make_user(roles=(role,))).get("/team/processes/").status_code == 404


@pytest.mark.emulator
def test_processes_are_listed_with_their_versions(emulator, admin, browser_for):
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml", user=admin)
    newest, _ = process_deploy(text=wait_spec(name=name, version=2), source="a.yaml")
    page = browser_for(admin).get("/team/processes/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"<code>{name}</code>" in html
    assert f"<code>{newest.state_machine_name}</code>" in html
    assert html.index("v2 <span") < html.index("<td>v1</td>")  # newest first, marked current
    assert "root@example.com" in html  # v1's deployer


def test_the_help_lists_only_the_shortcuts_every_page_has(admin, browser_for):
    html = browser_for(admin).get("/team/processes/").content.decode()
    assert help_keys(html) == {"?", "Esc"}
