"""Issue 14, a supervisor's triage with the keyboard alone: g/e/q/b open each action in a
dialog (on the task page and for the board's selected row), Esc gives focus back, an extend
preset works, abort and bulk return ask first; axe-core on every dialog; a 360 px phone."""

import datetime

import pytest

from accounts.roles import Role
from inbox.models import Task, TaskState
from inbox.services.worker import task_claim
from tests.browser import keyboard
from tests.browser.a11y import assert_accessible
from tests.browser.keyboard import PASSWORD, PHONE
from tests.browser.test_layout_browser import sideways, widest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KEYS = {"g": "reassign", "e": "extend", "q": "return", "b": "abort"}



@pytest.fixture
def held(make_task, make_worker):
    """A supervisor, ana holding a task, bo free to take one; the held task."""
    make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,), email="sam@example.com",
                password=PASSWORD)
    ana = make_worker({"invoice-review": 4}, email="ana@example.com")
    make_worker({"invoice-review": 2}, email="bo@example.com")
    task = make_task(title="Review invoice INV-2026-0042")
    return task_claim(worker=ana, task_id=task.pk)


def active(page) -> dict:
    """Return what has focus: its id, its dialog's id, and its data-supervise-opens."""
    return page.evaluate("""() => { const el = document.activeElement;
        const dialog = el.closest('dialog');
        return {id: el.id, dialog: dialog ? dialog.id : null,
                opens: el.getAttribute('data-supervise-opens'),
                primary: el.hasAttribute('data-nav-primary'),
                row: (el.closest('[data-nav-row]') || {dataset: {}}).dataset.task || null}; }""")


def test_each_key_opens_its_dialog_on_the_task_page_and_esc_gives_focus_back(page, problems,
                                                                           held):
    keyboard.sign_in(page, "sam@example.com", start=f"/tasks/{held.pk}/")
    page.get_by_role("heading", name=held.title, level=1).wait_for()
    page.wait_for_load_state()
    dialog = page.locator("#supervise-dialog")
    for key, action in KEYS.items():
        page.keyboard.press(key)
        dialog.wait_for()
        form = dialog.locator(f'[data-supervise-form="{action}"]')
        assert form.count() == 1, action
        focused = active(page)
        assert focused["dialog"] == "supervise-dialog", action
        assert focused["id"] == {"reassign": "reassign-worker", "extend": "extend-clock",
                                 "return": "return-reason", "abort": "abort-reason"}[action]
        assert page.get_by_role("dialog").count() == 1
        assert_accessible(page, f"the task page's {action} dialog")
        page.keyboard.press("Escape")
        dialog.wait_for(state="hidden")
        # Focus comes back with the dialog's close event, a moment after it hid.
        page.wait_for_function("a => document.activeElement.getAttribute("
                               "'data-supervise-opens') === a", arg=action)
        assert active(page)["opens"] == action
        # The form is back in its place on the page, once.
        assert page.locator(f'#supervise [data-supervise-form="{action}"]').count() == 1
    # ? lists the keys.
    page.keyboard.press("?")
    help_dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    help_dialog.wait_for()
    listed = help_dialog.locator("dt kbd").all_inner_texts()
    assert {"g", "e", "q", "b"} <= set(listed)
    assert_accessible(page, "the task page's shortcut help with the supervisor's keys")
    page.keyboard.press("Escape")


def test_an_extend_preset_extends_by_its_own_span(page, problems, held):
    keyboard.sign_in(page, "sam@example.com", start=f"/tasks/{held.pk}/")
    page.get_by_role("heading", name=held.title, level=1).wait_for()
    page.wait_for_load_state()
    before = held.work_deadline
    page.keyboard.press("e")
    page.locator("#supervise-dialog").wait_for()
    page.keyboard.press("Tab")  # from the clock to the reason
    page.keyboard.type("Month end")
    for _ in range(4):  # minutes, Extend, +15 min, +1 h
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "+1 h"
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text(
        "Extended the work clock: Review invoice INV-2026-0042.").wait_for()
    held.refresh_from_db()
    assert (datetime.timedelta(minutes=60) <= held.work_deadline - before
            < datetime.timedelta(minutes=61))
    assert held.events.last().reason == "Month end"


def test_abort_asks_first_and_esc_goes_back_to_the_reason(page, problems, held, screenshot):
    keyboard.sign_in(page, "sam@example.com", start=f"/tasks/{held.pk}/")
    page.get_by_role("heading", name=held.title, level=1).wait_for()
    page.wait_for_load_state()
    page.keyboard.press("b")
    page.locator("#supervise-dialog").wait_for()
    page.keyboard.type("Duplicate of INV-41")
    page.keyboard.press("Enter")
    confirm = page.get_by_role("dialog", name="Abort this task?")
    confirm.wait_for()
    assert ("Abort 'Review invoice INV-2026-0042': Step Functions hears TimedOut"
            in confirm.inner_text())
    assert "Your reason: Duplicate of INV-41" in confirm.inner_text()
    assert page.evaluate("document.activeElement.textContent") == "Abort task"
    assert_accessible(page, "the abort's confirm step")
    screenshot(page, "supervisor-abort-confirm")
    assert Task.objects.get(pk=held.pk).state == TaskState.IN_PROGRESS
    page.keyboard.press("Escape")
    confirm.wait_for(state="hidden")
    page.wait_for_function("document.activeElement.id === 'abort-reason'")
    assert active(page)["id"] == "abort-reason"
    assert page.locator("#supervise-dialog").is_visible()
    assert Task.objects.get(pk=held.pk).state == TaskState.IN_PROGRESS
    page.keyboard.press("Enter")
    confirm.wait_for()
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text("Aborted: Review invoice INV-2026-0042.").wait_for()
    held.refresh_from_db()
    assert (held.state, held.reason) == (TaskState.ABORTING, "Duplicate of INV-41")


def test_the_boards_keys_act_on_the_selected_row(page, problems, held, make_task,
                                                 screenshot):
    make_task(title="Review invoice INV-2026-0043")
    keyboard.sign_in(page, "sam@example.com", start="/supervisor/?sort=-created")
    page.get_by_role("heading", name="Supervisor board", level=1).wait_for()
    page.wait_for_load_state()
    dialog = page.locator("#supervise-dialog")
    page.keyboard.press("j")
    page.keyboard.press("j")  # INV-2026-0042, the held one
    assert active(page)["row"] == str(held.pk)
    for key, action in KEYS.items():
        page.keyboard.press(key)
        dialog.locator(f'[data-supervise-form="{action}"]').wait_for()
        assert active(page)["dialog"] == "supervise-dialog"
        # It names the task it acts on, in the dialog's name too.
        assert page.get_by_role("dialog", name=held.title).count() == 1
        assert_accessible(page, f"the board's {action} dialog")
        if action == "extend":
            screenshot(page, "supervisor-board-extend-dialog")
        page.keyboard.press("Escape")
        dialog.wait_for(state="hidden")
        page.wait_for_function("document.activeElement.hasAttribute('data-nav-primary')")
        focused = active(page)
        assert focused["primary"] and focused["row"] == str(held.pk), action
    # Return the selected task, confirmed in the dialog: back on the board.
    page.keyboard.press("q")
    dialog.locator('[data-supervise-form="return"]').wait_for()
    page.keyboard.type("Ana is away")
    page.keyboard.press("Enter")
    confirm = page.get_by_role("dialog", name="Return this task to its queue?")
    confirm.wait_for()
    assert "to the invoice-review queue: ana@example.com no longer holds it" in \
        confirm.inner_text()
    assert_accessible(page, "the board's return confirm step")
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text(
        "Returned to the queue: Review invoice INV-2026-0042.").wait_for()
    assert page.url.endswith("/supervisor/?sort=-created")
    assert Task.objects.get(pk=held.pk).state == TaskState.QUEUED
    # The board's help lists the keys.
    page.keyboard.press("?")
    listed = page.get_by_role("dialog", name="Keyboard shortcuts").locator("dt kbd")
    assert {"g", "e", "q", "b"} <= set(listed.all_inner_texts())


def test_a_bulk_return_needs_confirmation(page, problems, make_task, make_worker):
    make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,), email="sam@example.com",
                password=PASSWORD)
    ana = make_worker({"invoice-review": 4}, email="ana@example.com")
    for number in range(3):
        task_claim(worker=ana, task_id=make_task(title=f"Review invoice INV-{number}").pk)
    keyboard.sign_in(page, "sam@example.com", start="/supervisor/")
    page.get_by_role("heading", name="Supervisor board", level=1).wait_for()
    page.wait_for_load_state()
    for _ in range(3):
        page.keyboard.press("j")
        page.keyboard.press("x")
    page.locator("#bulk-action").focus()
    page.locator("#bulk-action").select_option("return")
    page.keyboard.press("Tab")
    while active(page)["id"] != "bulk-reason":
        page.keyboard.press("Tab")
    page.keyboard.type("Ana is away today")
    page.keyboard.press("Enter")
    confirm = page.get_by_role("dialog", name="Return to queue: 3 tasks?")
    confirm.wait_for()
    assert ("Return 3 tasks to their queues: whoever holds them now no longer does."
            in confirm.inner_text())
    assert page.evaluate("document.activeElement.textContent") == "Return to queue: 3 tasks"
    assert_accessible(page, "the bulk return's confirm step")
    assert Task.objects.filter(assignee=ana).count() == 3
    page.keyboard.press("Escape")
    confirm.wait_for(state="hidden")
    page.wait_for_function("document.activeElement.id === 'bulk-reason'")
    assert active(page)["id"] == "bulk-reason"
    assert Task.objects.filter(assignee=ana).count() == 3
    page.keyboard.press("Enter")
    confirm.wait_for()
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text("Returned to the queue 3 of 3").wait_for()
    assert not Task.objects.filter(assignee=ana).exists()


def test_the_confirm_page_without_the_dialog_is_accessible(page, problems, held):
    """What a browser without JavaScript gets: the form posts, the server asks first (the
    dialog's words taken off here, so the script lets the form go as it is)."""
    keyboard.sign_in(page, "sam@example.com", start=f"/tasks/{held.pk}/")
    page.get_by_role("heading", name=held.title, level=1).wait_for()
    page.wait_for_load_state()
    page.evaluate("document.querySelector('[data-supervise-form=abort]')"
                  ".removeAttribute('data-confirm')")
    page.locator("#abort-reason").fill("Duplicate")
    page.locator("#abort-reason").press("Enter")
    page.get_by_role("heading", name="Abort this task?", level=1).wait_for()
    assert page.evaluate("document.activeElement.textContent") == "Abort task"
    assert_accessible(page, "the abort's confirm page")
    assert Task.objects.get(pk=held.pk).state == TaskState.IN_PROGRESS
    page.keyboard.press("Enter")
    page.get_by_role("status").get_by_text("Aborted: Review invoice INV-2026-0042.").wait_for()


def test_the_dialogs_fit_a_360px_phone(browser, live_server, held, screenshot):
    context = browser.new_context(base_url=live_server.url, viewport=PHONE)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        keyboard.sign_in(page, "sam@example.com", start=f"/tasks/{held.pk}/")
        page.get_by_role("heading", name=held.title, level=1).wait_for()
        page.wait_for_load_state()
        for key in KEYS:
            page.keyboard.press(key)
            page.locator("#supervise-dialog").wait_for()
            assert sideways(page) == 0, (key, widest(page))
            assert page.evaluate("""() => { const r = document.getElementById('supervise-dialog')
                .getBoundingClientRect(); return r.left >= 0 && r.right <= innerWidth; }""")
            assert_accessible(page, f"the {KEYS[key]} dialog on a phone")
            if key == "e":
                screenshot(page, "phone-supervisor-extend-dialog")
            page.keyboard.press("Escape")
            # Closed before the next key, as a person sees it close before pressing one.
            page.locator("#supervise-dialog").wait_for(state="hidden")
        page.keyboard.press("q")
        page.keyboard.type("away")
        page.keyboard.press("Enter")
        page.locator("#confirm-dialog").wait_for()
        assert sideways(page) == 0, widest(page)
        page.keyboard.press("Escape")
        page.keyboard.press("Escape")
        page.goto("/supervisor/")
        page.keyboard.press("j")
        page.keyboard.press("g")
        page.locator('#supervise-dialog [data-supervise-form="reassign"]').wait_for()
        assert sideways(page) == 0, widest(page)
        assert_accessible(page, "the board's reassign dialog on a phone")
        page.keyboard.press("Escape")
        # The confirm page of its own (what a browser without JavaScript gets) fits too.
        page.goto(f"/tasks/{held.pk}/")
        page.evaluate("document.querySelector('[data-supervise-form=abort]')"
                      ".removeAttribute('data-confirm')")
        page.locator("#abort-reason").fill("Duplicate")
        page.locator("#abort-reason").press("Enter")
        page.get_by_role("heading", name="Abort this task?", level=1).wait_for()
        assert sideways(page) == 0, widest(page)
        screenshot(page, "phone-supervisor-abort-confirm-page")
    finally:
        context.close()
