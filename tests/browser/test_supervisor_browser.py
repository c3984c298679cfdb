"""A supervisor in a real browser: the board, its refresh, and a reassignment."""

import datetime

import pytest
from django.utils import timezone

from accounts.models import Availability
from accounts.roles import Role
from accounts.services import worker_set_availability, worker_set_capacity
from inbox.models import Task, TaskState
from inbox.services.clock import deadlines_sweep
from inbox.services.worker import task_take_next
from tests.browser import keyboard
from tests.browser.keyboard import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]




def sign_in(page, email: str) -> None:
    keyboard.sign_in(page, email, start="/supervisor/")


def test_supervisor_sees_an_escalated_task_and_reassigns_it(
    page, screenshot, problems, make_task, make_worker
):
    make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,), email="sam@example.com",
                password=PASSWORD)
    ana = make_worker({"invoice-review": 4}, email="ana@example.com")
    bo = make_worker({"invoice-review": 2}, email="bo@example.com")
    for number in range(4):
        make_task(title=f"Review invoice INV-{number}", priority=40 + number)
    task_take_next(worker=bo)
    stuck = make_task(title="Review invoice INV-99", onTimeout="escalate",
                      timeouts={"offer": 60, "work": 60, "overall": 60, "escalation": 600})
    deadlines_sweep(now=timezone.now() + datetime.timedelta(seconds=120))
    assert Task.objects.get(pk=stuck.pk).state == TaskState.ESCALATED

    page.clock.install()  # the board's 15 s refresh runs when the test moves the clock
    sign_in(page, "sam@example.com")
    page.get_by_role("heading", name="Supervisor board", level=1).wait_for()
    page.wait_for_load_state()
    # Queued, offered, in progress, overdue (the escalation clock is running), escalated.
    counts = page.locator("table.board-counts tbody tr").first
    assert counts.locator("td").all_inner_texts()[:5] == ["3", "0", "1", "0", "1"]
    row = page.locator("tr[data-nav-row]", has_text="INV-99")
    assert row.locator(".state").inner_text() == "Escalated"
    updated = page.locator("#board-updated time").get_attribute("datetime")

    # The board refreshes itself: a task that arrives shows up without a reload.
    make_task(title="Review invoice INV-100")
    page.clock.run_for(16_000)
    page.locator("tr[data-nav-row]", has_text="INV-100").wait_for()
    assert page.locator("#board-updated time").get_attribute("datetime") != updated
    screenshot(page, "supervisor-board")

    # ? lists the board's own shortcuts, and none of a task's.
    page.keyboard.press("?")
    help_dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    help_dialog.wait_for()
    listed = help_dialog.locator("dt kbd").all_inner_texts()
    assert sorted(listed) == sorted(["j", "k", "Enter", "x", "/", "f", "g", "e", "q", "b",
                                     "?", "Esc"])
    page.keyboard.press("Escape")
    help_dialog.wait_for(state="hidden")

    # f goes to the filters, and Enter on a select shows the tasks: no tabbing to Show.
    page.keyboard.press("f")
    assert page.evaluate("document.activeElement.id") == "f-skill"
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Enter")
    page.wait_for_url("**/supervisor/?*skill=invoice-review*")
    page.locator("tr[data-nav-row]", has_text="INV-100").wait_for()
    page.keyboard.press("Escape")  # focus leaves the filter, so the board's keys work

    # j moves to the first row (escalated and overdue tasks come first); x checks
    # it for a bulk action and x again unchecks it; Enter opens it.
    page.keyboard.press("j")
    box = page.locator("tr[data-nav-row]", has_text="INV-99").get_by_role("checkbox")
    page.keyboard.press("x")
    assert box.is_checked()
    page.keyboard.press("x")
    assert not box.is_checked()
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Review invoice INV-99", level=1).wait_for()
    page.get_by_role("combobox", name="Worker").select_option(
        label="ana@example.com · available · proficiency 4 · 3 of 3 free")
    page.locator("#reassign-reason").fill("Ana knows this supplier")
    page.get_by_role("button", name="Reassign", exact=True).click()
    status = page.get_by_role("status")
    status.get_by_text("Reassigned to ana@example.com").wait_for()
    assert "Reassigned to ana@example.com: Review invoice INV-99." in status.inner_text()
    stuck.refresh_from_db()
    assert (stuck.state, stuck.assignee) == (TaskState.IN_PROGRESS, ana)
    assert page.locator("table.history tbody tr").last.inner_text().count("Ana knows") == 1
    screenshot(page, "supervisor-task")


@pytest.mark.emulator
def test_the_task_page_fetches_the_execution_timeline_and_swaps_it_in(
    page, problems, make_task, make_worker, emulator, eager_celery
):
    """Celery runs eagerly in the live server; the envelope's execution does not exist on
    the emulator, so what the poll brings in is the loud failure."""
    make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,), email="tia@example.com",
                password=PASSWORD)
    task = make_task(title="Review invoice INV-7")
    sign_in(page, "tia@example.com")
    page.get_by_role("heading", name="Supervisor board", level=1).wait_for()
    page.goto(f"/tasks/{task.pk}/")
    timeline = page.locator("#timeline")
    timeline.get_by_text("Fetching the execution's timeline…").wait_for()
    timeline.get_by_text("Could not read the execution's history (ExecutionDoesNotExist)",
                         exact=False).wait_for()
    assert timeline.get_attribute("data-timeline-pending") is None
    assert page.locator("[data-timeline]").count() == 1


def test_supervisor_triages_an_escalated_task_with_the_keyboard(page, problems, screenshot,
                                                                 make_task, make_worker):
    """The escalated count leads to the escalated task; its page says what is true and
    offers the supervisor actions; the picker lists only who may take it; the clock is
    called Escalation on its card and in Extend."""
    make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,), email="sam@example.com",
                password=PASSWORD)
    make_worker({"invoice-review": 4}, email="ana@example.com")
    away = make_worker({"invoice-review": 5}, email="away@example.com")
    worker_set_availability(worker=away, availability=Availability.AWAY)
    full = make_worker({"invoice-review": 5}, email="full@example.com")
    worker_set_capacity(worker=full, capacity=0)
    stuck = make_task(title="Review invoice INV-99", onTimeout="escalate",
                      timeouts={"offer": 60, "work": 60, "overall": 60, "escalation": 600})
    deadlines_sweep(now=timezone.now() + datetime.timedelta(seconds=120))
    make_task(title="Review invoice INV-1")

    sign_in(page, "sam@example.com")
    page.get_by_role("heading", name="Supervisor board", level=1).wait_for()
    # Escalated and overdue first, apart, with why and since when.
    attention = page.locator("#board-attention")
    assert "INV-99" in attention.inner_text() and "INV-1\n" not in attention.inner_text()
    assert "The overall clock ran out; the supervisors have the escalation clock to act. (since" \
        in attention.inner_text()
    assert "Escalation" in attention.locator(".clock-name").inner_text()
    page.get_by_role("link", name="1 escalated invoice-review").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**state=escalated**")
    assert page.locator("tr[data-nav-row]").count() == 1
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Review invoice INV-99", level=1).wait_for()

    answer = page.locator("#task-holder")
    assert "nobody holds this task" in answer.inner_text()
    assert "Why: The overall clock ran out" in answer.inner_text()
    assert "Someone else holds" not in page.content()
    assert page.get_by_role("button", name="Take next task").count() == 0
    assert page.locator('[data-clock="overall"] .clock-label').inner_text().lower() == \
        "escalation"
    page.get_by_role("link", name="Supervise: reassign, return, extend or abort").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**#supervise")
    options = page.locator("#reassign-worker option").all_inner_texts()
    assert options == ["Choose…", "ana@example.com · available · proficiency 4 · 3 of 3 free"]
    assert page.locator("#extend-clock option").all_inner_texts() == ["Escalation"]
    screenshot(page, "supervisor-escalated-task")
    page.locator("#extend-minutes").fill("15")
    page.locator("#extend-reason").fill("Waiting on the supplier")
    page.locator("#extend-reason").press("Enter")
    page.get_by_role("status").get_by_text(
        "Extended the escalation clock: Review invoice INV-99.").wait_for()
    assert Task.objects.get(pk=stuck.pk).state == TaskState.ESCALATED
