"""Presence in a real browser, keyboard only: a worker goes away with Shift+A, the board
shows it live, dispatch passes them over and the task's explainer says why."""

import pytest

from accounts.models import Availability, User
from accounts.roles import Role
from inbox.models import Task, TaskState
from inbox.services.dispatcher import task_dispatch
from tests.browser import keyboard
from tests.browser.a11y import assert_accessible
from tests.browser.keyboard import PASSWORD, PHONE

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A change must show within a second; a little more for a busy test machine's browser.
SHOWS_WITHIN_MS = 3000


def _watch(page) -> list[str]:
    """Collect script errors, CSP violations and failed loads of the page."""
    seen: list[str] = []
    page.on("pageerror", lambda error: seen.append(f"script error: {error}"))
    page.on("console", lambda message: seen.append(message.text)
            if message.type == "error" else None)
    return seen


def _fits(page) -> None:
    sideways = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert sideways <= 0, f"{page.url} scrolls {sideways} px sideways at 360 px"


def test_a_worker_goes_away_with_the_key_and_the_board_and_the_explainer_say_so(
    browser, asgi_server, make_worker, make_task, check_skill, screenshot
):
    ana = make_worker({"document-check": 3}, email="ana@example.com", password=PASSWORD)
    ben = make_worker({"document-check": 3}, email="ben@example.com", password=PASSWORD)
    make_worker({"document-check": 3}, roles=(Role.SUPERVISOR,), email="sam@example.com",
                password=PASSWORD)
    boss_context = browser.new_context(base_url=asgi_server)
    worker_context = browser.new_context(base_url=asgi_server)
    try:
        board = boss_context.new_page()
        board.set_default_timeout(10_000)
        worker = worker_context.new_page()
        worker.set_default_timeout(10_000)
        board_problems, worker_problems = _watch(board), _watch(worker)

        keyboard.sign_in(board, "sam@example.com", start="/supervisor/")
        board.get_by_role("heading", name="Supervisor board", level=1).wait_for()
        board.wait_for_selector("[data-live][data-live-open]", state="attached")
        ana_row = board.locator('[data-presence-worker="ana@example.com"]')
        assert ana_row.get_attribute("data-availability") == "available"

        keyboard.sign_in(worker, "ana@example.com")
        worker.get_by_role("heading", name="My queues", level=1).wait_for()
        worker.wait_for_load_state()
        assert worker.locator("#presence-state").inner_text() == "Available"
        worker.keyboard.press("Shift+A")
        worker.locator('#presence-state[data-presence-state="away"]').wait_for()
        worker.get_by_role("status").get_by_text("You are away").wait_for()
        assert User.objects.get(pk=ana.pk).availability == Availability.AWAY
        assert worker.get_by_role("button", name="Be available").count() == 1
        assert_accessible(worker, "worker away (header control)")
        screenshot(worker, "presence-worker-away")

        # The board hears it live, without a reload.
        board.locator('[data-presence-worker="ana@example.com"][data-availability="away"]'
                      ).wait_for(timeout=SHOWS_WITHIN_MS)
        assert "Away" in ana_row.inner_text()
        assert_accessible(board, "board with an away worker (team presence)")
        screenshot(board, "presence-board-away")

        # Dispatch passes her over; the task's explainer says why.
        task = make_task(skill="document-check", title="Check passport P-9")
        task_dispatch(task_id=task.pk)
        task = Task.objects.get(pk=task.pk)
        assert (task.state, task.assignee) == (TaskState.OFFERED, ben)
        board.goto(f"/tasks/{task.pk}/")
        board.get_by_role("heading", name="Check passport P-9", level=1).wait_for()
        row = board.locator('[data-eligibility-worker="ana@example.com"]')
        assert row.get_attribute("data-reason") == "away"
        assert "Away: takes no new offers or assignments." in row.inner_text()
        assert board.locator('[data-eligibility-worker="sam@example.com"]').get_attribute(
            "data-reason") == "not_worker"
        assert board.locator('[data-eligibility-worker="ben@example.com"]').get_attribute(
            "data-reason") == "holder"
        assert_accessible(board, "task page explainer (who may take it)")
        screenshot(board, "presence-task-explainer")

        # On a phone everything still fits: the header's control, the board, the explainer.
        board.set_viewport_size(PHONE)
        _fits(board)
        board.goto("/supervisor/")
        board.locator("#board-presence").wait_for()
        _fits(board)
        worker.set_viewport_size(PHONE)
        # The page hears the resize before the next frame (a table that now scrolls in its
        # own box becomes focusable then).
        worker.evaluate("() => new Promise(done => requestAnimationFrame(() => "
                        "requestAnimationFrame(done)))")
        _fits(worker)
        assert_accessible(worker, "worker away on a phone")

        # Back with the same key; focus stays where it was (no reload of the page).
        worker.keyboard.press("Shift+A")
        worker.locator('#presence-state[data-presence-state="available"]').wait_for()
        assert User.objects.get(pk=ana.pk).availability == Availability.AVAILABLE
        assert board_problems == [] and worker_problems == []
    finally:
        boss_context.close()
        worker_context.close()
