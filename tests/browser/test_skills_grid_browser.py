"""An admin's skills pages in a real browser, keyboard only: a skill created, set to push and
edited; the matrix as an arrow-key grid saving one cell at a time, with undo; the worker
search; a bulk grant. axe-core checks every page state; a 360 px phone scrolls none
sideways."""

import pytest

from accounts.models import AuditAction, AuditEvent, Dispatch, PeerVisibility, Skill, WorkerSkill
from accounts.roles import Role
from tests.browser import keyboard
from tests.browser.a11y import assert_accessible
from tests.browser.keyboard import PASSWORD, PHONE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def watch(page) -> list[str]:
    """Collect script errors, CSP violations and failed loads (the 400s of refusals aside)."""
    return keyboard.watch(page, refusals_ok=True)


sign_in = keyboard.sign_in_home


def sideways(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def cell_in_focus(page) -> str:
    """The id of the control in the grid cell that has focus ("" if focus is elsewhere)."""
    return page.evaluate("""() => {
        const el = document.activeElement;
        if (!el || !el.matches('[data-grid-cell]')) return '';
        const control = el.querySelector('select, input');
        return control ? control.id : el.textContent.trim();
    }""")


def editing(page) -> str:
    """The id of the control being edited in the grid ("" if none)."""
    return page.evaluate("""() => {
        const el = document.activeElement;
        return el && el.closest('td.editing') ? el.id : '';
    }""")


def held(worker) -> dict[str, int]:
    return dict(WorkerSkill.objects.filter(worker=worker)
                .values_list("skill__slug", "proficiency"))


@pytest.fixture
def team(make_user, make_worker, review_skill, approval_skill):
    make_user(roles=(Role.ADMIN,), email="root@example.com", password=PASSWORD)
    return {
        "ana": make_worker({"invoice-review": 2}, email="ana@example.com", password=PASSWORD),
        "bo": make_worker({"finance-approval": 5}, email="bo@example.com", password=PASSWORD),
        "cy": make_worker(email="cy@example.com", password=PASSWORD),
    }


def test_an_admin_creates_a_skill_sets_it_to_push_and_edits_it(page, screenshot, team):
    problems = watch(page)
    sign_in(page, "root@example.com")
    page.goto("/team/skills/")
    page.get_by_role("heading", name="Skills", level=1).wait_for()
    page.get_by_role("navigation", name="Team").get_by_role(
        "link", name="Skill settings").focus()
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Skill settings", level=1).wait_for()
    page.wait_for_function("document.activeElement.textContent.trim() === 'New skill'")
    assert_accessible(page, "skill list")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="New skill", level=1).wait_for()
    page.wait_for_function("document.activeElement.id === 'id_slug'")
    assert page.evaluate("document.activeElement.id") == "id_slug"
    assert_accessible(page, "new skill form")

    # A slug no envelope could name is refused at its field; what was typed stays.
    page.keyboard.type("Tax Check")
    page.keyboard.press("Tab")
    page.keyboard.type("Tax check")
    page.keyboard.press("Enter")
    page.locator("#id_slug-error").wait_for()
    assert "lowercase letters, digits and hyphens" in page.locator("#id_slug-error").inner_text()
    page.wait_for_function("document.activeElement.id === 'id_slug'")
    assert page.evaluate("document.activeElement.id") == "id_slug"
    assert page.locator("#id_slug").input_value() == "Tax Check"
    assert page.locator("#id_name").input_value() == "Tax check"
    assert page.get_by_role("status").inner_text().startswith("Nothing saved: Slug:")
    assert_accessible(page, "new skill form refused")
    assert not Skill.objects.filter(name="Tax check").exists()

    page.keyboard.press("Control+a")
    page.keyboard.type("tax-check")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Skill settings", level=1).wait_for()
    page.get_by_role("status").get_by_text("Created the skill Tax check (tax-check), pull."
                                           ).wait_for()
    page.wait_for_function(
        "document.activeElement.getAttribute('aria-label') === 'Edit Tax check'")
    assert_accessible(page, "skill list after create")
    skill = Skill.objects.get(slug="tax-check")
    assert skill.dispatch == Dispatch.PULL

    # Set it to push: Enter on its Edit link, Tab to dispatch, arrow to push, Enter.
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Tax check tax-check", level=1).wait_for()
    page.wait_for_function("document.activeElement.id === 'id_name'")
    assert page.evaluate("document.activeElement.id") == "id_name"
    assert_accessible(page, "edit skill form")
    page.keyboard.press("Tab")   # description
    page.keyboard.press("Tab")   # dispatch: pull, checked
    assert page.evaluate("document.activeElement.value") == "pull"
    page.keyboard.press("ArrowDown")
    assert page.evaluate("document.activeElement.value") == "push"
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text("Saved Tax check (tax-check): dispatch.").wait_for()
    skill.refresh_from_db()
    assert skill.dispatch == Dispatch.PUSH

    # Edit it again: a new name and team visibility.
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Tax check tax-check", level=1).wait_for()
    page.keyboard.press("Control+a")
    page.keyboard.type("Tax checks")
    page.keyboard.press("Tab")
    page.keyboard.type("VAT numbers and invoices")
    page.keyboard.press("Tab")   # dispatch
    page.keyboard.press("Tab")   # peer visibility: own
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Tab")   # the button
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text(
        "Saved Tax checks (tax-check): name, description, peer visibility.").wait_for()
    skill.refresh_from_db()
    assert (skill.name, skill.description, skill.peer_visibility) == (
        "Tax checks", "VAT numbers and invoices", PeerVisibility.TEAM)
    assert list(AuditEvent.objects.filter(subject="tax-check").order_by("pk")
                .values_list("action", flat=True)) == [
        AuditAction.SKILL_CREATED, AuditAction.SKILL_EDITED, AuditAction.SKILL_EDITED]
    screenshot(page, "admin-skill-settings")
    assert problems == []


def test_the_matrix_is_an_arrow_key_grid_saving_a_cell_with_undo(page, screenshot, team):
    problems = watch(page)
    ana, bo = team["ana"], team["bo"]
    sign_in(page, "root@example.com")
    page.goto("/team/skills/")
    grid = page.get_by_role("grid", name="Skills")
    grid.wait_for()
    page.wait_for_function("document.activeElement.matches('[data-grid-cell]')")
    assert cell_in_focus(page) == f"c-{ana.pk}-skill-finance-approval"
    assert_accessible(page, "skills grid")

    # One tab stop: Tab leaves the grid, Shift+Tab comes back to the same cell.
    page.keyboard.press("Tab")
    assert cell_in_focus(page) == ""
    page.keyboard.press("Shift+Tab")
    assert cell_in_focus(page) == f"c-{ana.pk}-skill-finance-approval"

    page.keyboard.press("ArrowRight")
    assert cell_in_focus(page) == f"c-{ana.pk}-skill-invoice-review"
    page.keyboard.press("ArrowDown")
    assert cell_in_focus(page) == f"c-{bo.pk}-skill-invoice-review"
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Home")
    assert cell_in_focus(page) == f"pick-{ana.pk}"
    page.keyboard.press("End")
    assert cell_in_focus(page) == f"c-{ana.pk}-capacity"
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    assert cell_in_focus(page) == f"c-{ana.pk}-skill-invoice-review"

    # Esc cancels an edit: nothing is posted, the cell keeps its value.
    page.keyboard.press("5")
    assert editing(page) == f"c-{ana.pk}-skill-invoice-review"
    assert page.locator(f"#c-{ana.pk}-skill-invoice-review").input_value() == "5"
    assert_accessible(page, "skills grid, a cell edited")
    page.keyboard.press("Escape")
    assert cell_in_focus(page) == f"c-{ana.pk}-skill-invoice-review"
    assert page.locator(f"#c-{ana.pk}-skill-invoice-review").input_value() == "2"
    assert held(ana) == {"invoice-review": 2}

    # A digit edits the cell, Enter saves that one cell; focus stays on it.
    page.keyboard.press("4")
    page.keyboard.press("Enter")
    status = page.get_by_role("status")
    status.get_by_text("Saved ana@example.com: Invoice review 4.").wait_for()
    assert cell_in_focus(page) == f"c-{ana.pk}-skill-invoice-review"
    assert held(ana) == {"invoice-review": 4}
    assert status.get_by_role("button", name="Undo").is_visible()
    assert_accessible(page, "skills grid, a cell saved (undo offered)")

    # z undoes it.
    page.keyboard.press("z")
    status.get_by_text("Undone: Invoice review of ana@example.com back to 2.").wait_for()
    assert page.locator(f"#c-{ana.pk}-skill-invoice-review").input_value() == "2"
    assert held(ana) == {"invoice-review": 2}
    assert cell_in_focus(page) == f"c-{ana.pk}-skill-invoice-review"

    # Enter, arrows in the cell, Enter: the proficiency changes; Ctrl+Z undoes it too.
    page.keyboard.press("Enter")
    assert editing(page) == f"c-{ana.pk}-skill-invoice-review"
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    status.get_by_text("Saved ana@example.com: Invoice review 3.").wait_for()
    page.keyboard.press("Control+z")
    status.get_by_text("Undone: Invoice review of ana@example.com back to 2.").wait_for()
    assert held(ana) == {"invoice-review": 2}

    # A bad capacity: refused at its cell with why, the typed value stays, nothing saved.
    page.keyboard.press("End")
    page.keyboard.type("101")
    assert page.locator(f"#c-{ana.pk}-capacity").input_value() == "101"
    page.keyboard.press("Enter")
    page.locator(f"#c-{ana.pk}-capacity-error").wait_for()
    assert page.locator(f"#c-{ana.pk}-capacity-error").inner_text() == (
        "Capacity must be a whole number from 0 to 100.")
    assert status.inner_text().startswith("Nothing saved for ana@example.com: Capacity")
    assert editing(page) == f"c-{ana.pk}-capacity"
    assert page.locator(f"#c-{ana.pk}-capacity").input_value() == "101"
    assert page.locator(f"#c-{ana.pk}-capacity").get_attribute("aria-invalid") == "true"
    assert_accessible(page, "skills grid, a cell refused")
    ana.refresh_from_db()
    assert ana.capacity == 3
    page.keyboard.press("Control+a")
    page.keyboard.type("7")
    page.keyboard.press("Enter")
    status.get_by_text("Saved ana@example.com: capacity 7.").wait_for()
    assert page.locator(f"#c-{ana.pk}-capacity-error").count() == 0
    ana.refresh_from_db()
    assert ana.capacity == 7
    screenshot(page, "admin-skills-grid")

    # The status's Undo button does what z does; then there is nothing left to undo.
    status.get_by_role("button", name="Undo").focus()
    page.keyboard.press("Enter")
    status.get_by_text("Undone: Capacity of ana@example.com back to 3.").wait_for()
    ana.refresh_from_db()
    assert ana.capacity == 3
    assert page.locator(f"#c-{ana.pk}-capacity").input_value() == "3"
    assert cell_in_focus(page) == f"c-{ana.pk}-capacity"  # back where the change was
    page.keyboard.press("z")
    status.get_by_text("Nothing to undo").wait_for()

    # The page's Save buttons are for pages without the script: none is in the way.
    assert not page.get_by_role("button", name="Save ana@example.com").is_visible()
    assert list(AuditEvent.objects.filter(subject=ana.email, actor_id__isnull=False)
                .order_by("pk").values_list("action", flat=True)) == [
        AuditAction.SKILL_CHANGED] * 4 + [AuditAction.CAPACITY_CHANGED] * 2
    assert problems == []


def test_slash_finds_workers_and_a_bulk_grant_gives_them_a_skill(page, screenshot, team):
    problems = watch(page)
    ana, bo, cy = team["ana"], team["bo"], team["cy"]
    sign_in(page, "root@example.com")
    page.goto("/team/skills/")
    page.get_by_role("grid", name="Skills").wait_for()
    page.wait_for_function("document.activeElement.matches('[data-grid-cell]')")

    page.keyboard.press("/")
    page.wait_for_function("document.activeElement.id === 'team-search'")
    assert page.evaluate("document.activeElement.id") == "team-search"
    page.keyboard.type("bo")
    rows = page.locator("tr[data-team-row]:not([hidden])")
    assert rows.count() == 1 and "bo@example.com" in rows.inner_text()
    page.get_by_text("1 of 3 workers on this page match").wait_for()
    assert_accessible(page, "skills grid filtered")
    page.keyboard.press("Control+a")
    page.keyboard.press("Backspace")
    assert page.locator("tr[data-team-row]:not([hidden])").count() == 3
    page.keyboard.type("y")
    page.keyboard.press("Enter")   # Search: the server's, through every page
    page.wait_for_url("**/team/skills/?q=y")
    page.get_by_role("grid", name="Skills").wait_for()
    assert page.locator("tr[data-team-row]").count() == 1
    assert_accessible(page, "skills page searched")
    page.goto("/team/skills/")
    page.get_by_role("grid", name="Skills").wait_for()
    page.wait_for_function("document.activeElement.matches('[data-grid-cell]')")

    # Select ana and cy with Space in the first column, then grant them Finance approval 4.
    page.keyboard.press("Home")
    page.keyboard.press(" ")
    page.keyboard.press("ArrowDown")
    page.keyboard.press("ArrowDown")
    page.keyboard.press(" ")
    assert page.locator("input[name=worker]:checked").count() == 2
    page.get_by_text("2 selected").wait_for()
    assert_accessible(page, "skills grid, workers selected")
    page.keyboard.press("Shift+Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == (
        "Grant to selected workers")
    page.keyboard.press("Shift+Tab")
    page.wait_for_function("document.activeElement.id === 'bulk-proficiency'")
    assert page.evaluate("document.activeElement.id") == "bulk-proficiency"
    page.keyboard.press("4")
    page.keyboard.press("Shift+Tab")
    page.wait_for_function("document.activeElement.id === 'bulk-skill'")
    assert page.evaluate("document.activeElement.id") == "bulk-skill"
    page.keyboard.press("f")
    assert page.locator("#bulk-skill").input_value() == "finance-approval"
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text(
        "Granted Finance approval at 4 to 2 worker(s): ana@example.com, cy@example.com."
    ).wait_for()
    assert held(ana) == {"invoice-review": 2, "finance-approval": 4}
    assert held(cy) == {"finance-approval": 4}
    assert held(bo) == {"finance-approval": 5}
    assert AuditEvent.objects.filter(action=AuditAction.SKILL_GRANTED, actor_id__isnull=False,
                                     detail__bulk=True).count() == 2
    assert_accessible(page, "skills page after a bulk grant")

    # Nobody selected: refused, the skill and proficiency chosen stay.
    page.locator("#bulk-proficiency").focus()
    page.keyboard.press("2")
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")
    page.locator("#bulk-worker-error").wait_for()
    assert page.locator("#bulk-proficiency").input_value() == "2"
    page.wait_for_function("document.activeElement.matches('[data-grid-cell]')")
    assert cell_in_focus(page) == f"pick-{ana.pk}"  # where workers are selected
    assert page.get_by_role("status").inner_text().startswith("Nothing granted: Select at "
                                                              "least one worker")
    assert_accessible(page, "skills page, bulk grant refused")
    screenshot(page, "admin-skills-bulk")
    assert problems == []


def test_the_skills_pages_fit_a_360px_phone(browser, live_server, team, screenshot):
    context = browser.new_context(base_url=live_server.url, viewport=PHONE)
    try:
        page = context.new_page()
        page.set_default_timeout(10_000)
        problems = watch(page)
        sign_in(page, "root@example.com")
        for path in ["/team/skills/", "/team/skills/settings/", "/team/skills/settings/new/",
                     "/team/skills/settings/invoice-review/edit/"]:
            page.goto(path)
            page.wait_for_load_state()
            assert sideways(page) == 0, path
            assert_accessible(page, f"phone {path}")
            if path == "/team/skills/":
                screenshot(page, "admin-skills-grid-phone")
        page.goto("/team/skills/settings/new/")
        page.locator("#id_slug").fill("Bad Slug")
        page.keyboard.press("Enter")
        page.locator("#id_slug-error").wait_for()
        assert sideways(page) == 0
        assert problems == []
    finally:
        context.close()


def test_a_cell_saved_long_after_sign_in_asks_for_the_password_then_is_saved(
    page, team, settings
):
    """The grid's fetch meets the recent-sign-in rule: the row's form is posted the plain
    way, allauth asks for the password and resumes the post."""
    import time
    from importlib import import_module

    from accounts import sessions

    problems = watch(page)
    ana = team["ana"]
    sign_in(page, "root@example.com")
    page.goto("/team/skills/")
    page.get_by_role("grid", name="Skills").wait_for()
    page.wait_for_function("document.activeElement.matches('[data-grid-cell]')")
    key = next(cookie["value"] for cookie in page.context.cookies()
               if cookie["name"] == settings.SESSION_COOKIE_NAME)
    store = import_module(settings.SESSION_ENGINE).SessionStore(session_key=key)
    store[sessions.AUTHENTICATED_AT] = (time.time()
                                        - settings.ACCOUNT_REAUTHENTICATION_TIMEOUT - 1)
    store.save()

    page.keyboard.press("ArrowRight")
    page.keyboard.press("4")
    page.keyboard.press("Enter")
    page.wait_for_url("**/accounts/reauthenticate/**")
    assert held(ana) == {"invoice-review": 2}
    # The password-again page puts the cursor in its field: type, Enter, and on.
    page.wait_for_function("document.activeElement.type === 'password'")
    assert_accessible(page, "the password-again page")
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url("**/team/skills/**")
    page.get_by_role("status").get_by_text("Saved ana@example.com: Invoice review 4."
                                           ).wait_for()
    assert held(ana) == {"invoice-review": 4}
    page.wait_for_function(f"document.activeElement.contains(document.getElementById("
                           f"'c-{ana.pk}-skill-invoice-review'))")
    assert problems == []
