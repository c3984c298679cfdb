"""A task whose input holds a 100 KB unbroken string stays usable in a real browser.

Chromium took 17-19 s to lay such a page out (the value wrapped anywhere); the page now
shows the value's start and the whole behind "Show all". How long it takes is a figure
of bench/render.py; here the page must work: the answer form takes focus, the shortcuts
answer, the whole value can be opened and read.
"""

import pytest

from inbox.models import Task, TaskState
from inbox.services.worker import task_take_next
from tests.browser import keyboard
from tests.browser.keyboard import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

LONG = 100_000


def test_a_task_with_a_100_kb_unbroken_value_can_be_read_and_answered_by_keyboard(
        page, screenshot, make_task, make_worker):
    ana = make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-1", input={"invoice_id": "INV-1", "blob": "A" * LONG})
    task = task_take_next(worker=ana)
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    keyboard.sign_in(page, "ana@example.com", start=f"/tasks/{task.pk}/")

    page.get_by_role("heading", name="Review invoice INV-1", level=1).wait_for()
    page.wait_for_function("document.activeElement.id === 'task-title'")
    shown = page.get_by_role("definition").filter(has_text="AAAA").first
    assert shown.inner_text().startswith("A" * 500 + "…")
    screenshot(page, "long-value-task")

    # The whole value: its disclosure is reached by keyboard and opens a scrolling box.
    show_all = page.get_by_text(f"Show all {LONG:,} characters")
    show_all.focus()
    page.keyboard.press("Enter")
    whole = page.get_by_role("region", name=f"All {LONG:,} characters")
    whole.wait_for()
    assert len(whole.inner_text()) == LONG
    assert whole.evaluate("el => el.scrollWidth > el.clientWidth")  # scrolls, not broken
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    screenshot(page, "long-value-shown")
    page.keyboard.press("Tab")
    assert whole.evaluate("el => el === document.activeElement")

    # The answer form: 2 picks Reject, the comment takes focus and text, Ctrl+Enter sends.
    page.keyboard.press("2")
    assert page.get_by_role("radio", name="Reject").is_checked()
    comment = page.get_by_role("textbox", name="Comment")
    comment.focus()
    assert comment.evaluate("el => el === document.activeElement")
    page.keyboard.type("The attachment is garbage.")
    page.keyboard.press("Control+Enter")
    page.get_by_role("heading", name="My queues", level=1).wait_for()

    task = Task.objects.get()
    assert task.state == TaskState.COMPLETING
    assert task.answer == {"decision": "reject", "comment": "The attachment is garbage."}
    assert errors == []
