"""An admin's pages in a real browser: the skills matrix, edited with the keyboard only."""

import pytest

from accounts.models import WorkerSkill
from accounts.roles import Role
from tests.browser import keyboard
from tests.browser.keyboard import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]



def watch(page) -> list[str]:
    """Collect script errors, CSP violations and failed loads (the 400s of refusals aside)."""
    return keyboard.watch(page, refusals_ok=True)


sign_in = keyboard.sign_in_home


def test_an_admin_grants_a_skill_with_the_keyboard_and_the_worker_sees_its_queue(
    page, screenshot, live_server, make_user, make_worker, make_task, approval_skill
):
    problems = watch(page)
    make_user(roles=(Role.ADMIN,), email="root@example.com", password=PASSWORD)
    ana = make_worker(email="ana@example.com", password=PASSWORD)
    make_worker({"finance-approval": 3}, email="bo@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-1")
    sign_in(page, "root@example.com")

    page.goto("/team/skills/")
    page.get_by_role("heading", name="Skills", level=1).wait_for()
    page.wait_for_load_state()
    # Focus starts on the first cell, ana's Finance approval (the matrix is an arrow-key
    # grid: tests/browser/test_skills_grid_browser.py); a digit edits Invoice review.
    page.wait_for_function(
        f"document.activeElement.contains(document.getElementById("
        f"'c-{ana.pk}-skill-finance-approval'))")
    page.keyboard.press("ArrowRight")
    cell = page.get_by_role("combobox", name="Invoice review of ana@example.com")
    page.keyboard.type("4")
    assert cell.evaluate("el => el === document.activeElement")
    assert cell.input_value() == "4"
    page.keyboard.press("Enter")
    status = page.get_by_role("status")
    status.get_by_text("Saved ana@example.com: Invoice review 4.").wait_for()
    page.wait_for_function(  # focus back on the cell
        f"document.activeElement.contains(document.getElementById("
        f"'c-{ana.pk}-skill-invoice-review'))")
    assert cell.input_value() == "4"
    assert dict(WorkerSkill.objects.filter(worker=ana).values_list(
        "skill__slug", "proficiency")) == {"invoice-review": 4}

    # A bad capacity is refused at its cell, focus on it; nothing changes.
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    capacity = page.get_by_role("spinbutton", name="Capacity of ana@example.com")
    page.keyboard.type("101")
    assert capacity.evaluate("el => el === document.activeElement")
    page.keyboard.press("Enter")
    page.locator(f"#c-{ana.pk}-capacity-error").wait_for()
    page.wait_for_function(f"document.activeElement.id === 'c-{ana.pk}-capacity'")
    assert capacity.get_attribute("aria-invalid") == "true"
    assert status.inner_text().startswith("Nothing saved for ana@example.com: Capacity")
    ana.refresh_from_db()
    assert ana.capacity == 3
    page.goto("/team/skills/")
    page.get_by_role("heading", name="Skills", level=1).wait_for()
    screenshot(page, "admin-skills")
    for path, title in [("/team/intake/", "Intake errors"), ("/team/processes/", "Processes")]:
        page.goto(path)
        page.get_by_role("heading", name=title, level=1).wait_for()
        page.wait_for_load_state()
    assert problems == []

    # The worker, in a browser of her own, now has the Invoice review queue.
    context = page.context.browser.new_context(base_url=live_server.url)
    try:
        worker_page = context.new_page()
        worker_page.set_default_timeout(10_000)
        worker_problems = watch(worker_page)
        sign_in(worker_page, "ana@example.com")
        row = worker_page.get_by_role("row").filter(has_text="Invoice review")
        assert "4 / 5" in row.inner_text()
        assert worker_page.get_by_role(
            "button", name="Take next from Invoice review").is_visible()
        assert worker_problems == []
    finally:
        context.close()
