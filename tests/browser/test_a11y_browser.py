"""axe-core on every page each role reaches, on a desktop and on a phone, and in the states
a keyboard user opens (the shortcut help, a refused answer): 0 violations."""

import pytest

from tests.browser.a11y import assert_accessible, violations
from tests.browser.keyboard import LONG_EMAIL, PHONE
from tests.browser.test_layout_browser import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

DESKTOP = {"width": 1280, "height": 800}
ROLES = {LONG_EMAIL: "reviewer", "sam@example.com": "supervisor", "root@example.com": "admin"}


def pages_of(day) -> dict[str, list[str]]:
    held = day["held"].pk
    return {
        LONG_EMAIL: ["/", f"/tasks/{held}/", f"/tasks/{held}/reject/", "/team/tokens/"],
        "sam@example.com": ["/supervisor/", "/supervisor/?overdue=1", f"/tasks/{held}/",
                            "/supervisor/executions/", "/supervisor/executions/?status=DONE"],
        "root@example.com": ["/team/skills/", "/team/tokens/",
                             "/team/audit/", "/team/intake/", "/team/processes/"],
    }


def test_axe_finds_a_violation_it_is_shown(page, live_server):
    """The check can fail: an image without text and an unlabelled field are reported."""
    page.goto("/accounts/login/")
    page.evaluate("""() => {
        const img = document.createElement('img'); img.src = '/static/inbox/favicon.svg';
        document.querySelector('main').append(img);
        document.querySelector('main').append(document.createElement('input'));
    }""")
    found = violations(page)
    assert any(line.startswith("image-alt") for line in found), found
    assert any(line.startswith("label") for line in found), found


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_every_page_state_has_no_axe_violations(browser, live_server, day, viewport,
                                                screenshot):
    size = "phone" if viewport is PHONE else "desktop"
    for email, paths in pages_of(day).items():
        who = ROLES[email]
        context = browser.new_context(base_url=live_server.url, viewport=viewport)
        try:
            page = context.new_page()
            page.set_default_timeout(10_000)
            sign_in(page, email)
            for path in paths:
                page.goto(path)
                page.wait_for_load_state()
                page.locator("h1").first.wait_for()
                assert_accessible(page, f"{email} {path}")
                # Every page as each role sees it: test-artifacts/, and the README's pictures.
                name = path.strip("/").replace("/", "-").replace("?", "-").replace("=", "")
                name = "task" if path.startswith("/tasks/") and path.count("/") == 3 else name
                screenshot(page, f"{size}-{who}-{name or 'home'}".replace(str(day["held"].pk),
                                                                         "task"))
            page.goto("/")
            page.locator("h1").first.wait_for()
            page.keyboard.press("?")
            page.get_by_role("dialog").wait_for()
            assert_accessible(page, f"{email} shortcut help")
        finally:
            context.close()
