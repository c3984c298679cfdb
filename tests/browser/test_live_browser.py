"""Live pages in a real browser: changes made elsewhere show within a second, no reload."""

import datetime
import re

import pytest
from django.utils import timezone

from accounts.roles import Role
from accounts.services import worker_skill_remove
from inbox.models import Task, TaskState
from inbox.services.access import worker_access_recheck
from inbox.services.clock import deadlines_sweep
from inbox.services.dispatcher import task_dispatch
from inbox.services.supervisor import task_reassign
from inbox.services.worker import task_take_next
from tests.browser import keyboard

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# A change must show within a second; a little more for a busy test machine's browser.
SHOWS_WITHIN_MS = 3000


def _listening(page) -> None:
    """Wait until the page's stream is open: changes from now on reach it."""
    page.wait_for_selector("[data-live][data-live-open]", state="attached")


def test_a_new_offer_appears_on_my_queues_and_a_accepts_it(live_page, make_task,
                                                           make_worker, check_skill):
    checker = make_worker({"document-check": 3}, email="checker@example.com")
    keyboard.sign_in(live_page, checker.email)
    live_page.get_by_role("heading", name="My queues", level=1).wait_for()
    _listening(live_page)
    urls = {live_page.url}

    task = make_task(skill="document-check", title="Check passport P-7")
    task_dispatch(task_id=task.pk)

    row = live_page.locator(f'[data-offer="{task.pk}"]')
    row.wait_for(timeout=SHOWS_WITHIN_MS)
    assert "arrived" in row.get_attribute("class")
    live_page.get_by_text("New offer: Check passport P-7").wait_for(timeout=SHOWS_WITHIN_MS)
    assert live_page.url in urls  # no reload, no navigation

    live_page.keyboard.press("a")
    live_page.get_by_role("heading", name="Check passport P-7", level=1).wait_for()
    assert Task.objects.get(pk=task.pk).state == TaskState.IN_PROGRESS


def test_a_task_reassigned_away_says_so_and_keeps_what_was_typed(live_page, make_task,
                                                                  make_worker, supervisor):
    ana = make_worker({"invoice-review": 3}, email="ana@example.com")
    ben = make_worker({"invoice-review": 3}, email="ben@example.com")
    make_task(title="Review invoice INV-77")
    task = task_take_next(worker=ana)
    keyboard.sign_in(live_page, ana.email, start=f"/tasks/{task.pk}/")
    live_page.get_by_role("heading", name="Review invoice INV-77", level=1).wait_for()
    _listening(live_page)
    comment = live_page.locator("#field-comment")
    comment.fill("Half way through my notes")

    task_reassign(supervisor=supervisor, task_id=task.pk, worker=ben,
                  reason="Ben knows this supplier")

    notice = live_page.locator("#task-notice")
    notice.wait_for(state="visible", timeout=SHOWS_WITHIN_MS)
    assert "can no longer see or act on it" in notice.inner_text()
    assert comment.input_value() == "Half way through my notes"
    buttons = live_page.locator("#answer-form button[type=submit]").all()
    assert len(buttons) == 2 and all(button.is_disabled() for button in buttons)
    # Ben's task now: under the skill's default visibility ana no longer sees it, or him.
    assert "ben@example.com" not in live_page.content()
    live_page.keyboard.press("u")  # the release key does nothing any more
    assert Task.objects.get(pk=task.pk).assignee == ben


def test_a_task_returned_when_the_skill_is_removed_says_so_and_keeps_what_was_typed(
    live_page, make_task, make_worker, admin
):
    ana = make_worker({"invoice-review": 3}, email="ana@example.com")
    make_task(title="Review invoice INV-78")
    task = task_take_next(worker=ana)
    keyboard.sign_in(live_page, ana.email, start=f"/tasks/{task.pk}/")
    live_page.get_by_role("heading", name="Review invoice INV-78", level=1).wait_for()
    _listening(live_page)
    comment = live_page.locator("#field-comment")
    comment.fill("My notes so far")

    worker_skill_remove(worker=ana, skill=task.skill, actor=admin)
    worker_access_recheck(worker=ana, actor=admin)

    notice = live_page.locator("#task-notice")
    notice.wait_for(state="visible", timeout=SHOWS_WITHIN_MS)
    assert "taken away" in notice.inner_text()
    assert comment.input_value() == "My notes so far"
    buttons = live_page.locator("#answer-form button[type=submit]").all()
    assert len(buttons) == 2 and all(button.is_disabled() for button in buttons)
    fresh = Task.objects.get(pk=task.pk)
    assert (fresh.state, fresh.assignee) == (TaskState.QUEUED, None)


def test_the_board_shows_a_task_escalating_by_itself(live_page, make_task, make_user,
                                                     review_skill):
    boss = make_user(roles=(Role.ADMIN,), email="boss@example.com")
    task = make_task(onTimeout="escalate", title="Review invoice INV-88",
                     timeouts={"offer": 60, "work": 600, "overall": 60, "escalation": 3600})
    keyboard.sign_in(live_page, boss.email, start="/supervisor/")
    live_page.get_by_role("heading", name="Supervisor board", level=1).wait_for()
    _listening(live_page)
    row = live_page.locator("#board-list tr", has_text="Review invoice INV-88")
    assert "Queued" in row.inner_text()

    deadlines_sweep(now=timezone.now() + datetime.timedelta(seconds=61))

    row.get_by_text("Escalated", exact=True).wait_for(timeout=SHOWS_WITHIN_MS)
    assert Task.objects.get(pk=task.pk).state == TaskState.ESCALATED


def test_a_stream_refused_with_an_error_is_opened_again_and_changes_still_show(
    live_page, make_task, make_worker, check_skill
):
    """The first /live/ request is answered 500 (as when the web's pool is exhausted by a
    reconnect burst): the browser gives such a stream up for good, so the page must open
    a new one itself. Playwright's route answers for the server once, then lets every
    later request through."""
    refused: list[str] = []

    def once(route) -> None:
        if not refused:
            refused.append(route.request.url)
            route.fulfill(status=500, body="pool exhausted")
        else:
            route.continue_()

    live_page.route(re.compile(r"/live/"), once)
    checker = make_worker({"document-check": 3}, email="checker@example.com")
    keyboard.sign_in(live_page, checker.email)
    live_page.get_by_role("heading", name="My queues", level=1).wait_for()
    _listening(live_page)
    assert len(refused) == 1
    urls = {live_page.url}

    task = make_task(skill="document-check", title="Check passport P-8")
    task_dispatch(task_id=task.pk)

    live_page.locator(f'[data-offer="{task.pk}"]').wait_for(timeout=SHOWS_WITHIN_MS)
    assert live_page.url in urls  # no reload, no navigation
