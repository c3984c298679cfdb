"""Undo in a real browser, keyboard only: z takes the last decision back while its Undo
button shows, and nothing reaches Step Functions."""

import pytest

from inbox.models import Outbox, OutboxStatus, Task, TaskState
from inbox.services.callback import SendResult, callback_send, outbox_drain
from tests.browser.a11y import assert_accessible
from tests.browser.keyboard import PASSWORD, PHONE
from tests.browser.test_layout_browser import sideways, widest
from tests.browser.test_reviewer_browser import focused, open_task_titled, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]



def test_z_takes_a_complete_back_and_nothing_is_sent(
    page, screenshot, problems, make_task, make_worker, settings, monkeypatch
):
    """The boto3 client's SendTask* methods are patched to record any call (none may come)."""
    from processes import aws

    calls: list[str] = []
    client = aws.client(service="stepfunctions")
    for name in ("send_task_success", "send_task_failure"):
        monkeypatch.setattr(client, name, lambda name=name, **params: calls.append(name))
    # Long enough for a loaded machine to render, check and press within it.
    settings.INBOX_UNDO_SECONDS = 30
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-1")
    make_task(title="Review invoice INV-2")
    sign_in(page, "ana@example.com")

    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-1")
    page.keyboard.press("1")  # Approve
    page.keyboard.press("Control+Enter")
    open_task_titled(page, "Review invoice INV-2")
    assert page.get_by_role("status").inner_text() == "Completed: Review invoice INV-1."
    undo = page.locator("[data-undo]")
    assert undo.get_by_role("button", name="Undo").is_visible()
    assert undo.locator("time[data-undo-until]").inner_text().endswith(" s left")
    assert_accessible(page, "a task page offering to undo the last complete")
    screenshot(page, "reviewer-undo")
    page.set_viewport_size(PHONE)
    assert sideways(page) == 0, widest(page)
    assert_accessible(page, "a task page offering to undo, on a phone")
    page.set_viewport_size({"width": 1280, "height": 720})

    page.keyboard.press("z")
    open_task_titled(page, "Review invoice INV-1")
    assert focused(page) == "task-title"
    assert "Undone: Review invoice INV-1 is yours again" in page.get_by_role("status").inner_text()
    # The answer taken back is in the form again, and the form acts on the task as it is.
    assert page.get_by_role("radio", name="Approve").is_checked()
    assert not page.locator("[data-undo]").count()
    assert_accessible(page, "a task page just after an undo")

    first = Task.objects.get(title="Review invoice INV-1")
    assert first.state == TaskState.IN_PROGRESS
    assert [e.action for e in first.events.order_by("version")][-2:] == ["complete", "undo"]
    outbox = Outbox.objects.get(task=first)
    assert outbox.status == OutboxStatus.WITHDRAWN
    assert callback_send(outbox_id=outbox.pk) == SendResult.SKIPPED
    assert outbox_drain() == 0
    assert calls == []

    # Decided again: Ctrl+Enter completes it for good (the other task is still held).
    page.keyboard.press("Control+Enter")
    open_task_titled(page, "Review invoice INV-2")
    assert Task.objects.get(pk=first.pk).state == TaskState.COMPLETING


def test_the_undo_button_goes_when_its_window_closes_and_z_then_does_nothing(
    page, problems, make_task, make_worker, settings
):
    settings.INBOX_UNDO_SECONDS = 4
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-3")
    sign_in(page, "ana@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-3")
    page.keyboard.press("1")
    for _ in range(10):  # Tab on to the plain Complete button
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent.trim() === 'Complete'"):
            break
    page.keyboard.press("Enter")  # plain Complete: home

    page.get_by_role("heading", name="My queues", level=1).wait_for()
    undo = page.locator("[data-undo]")
    undo.wait_for(state="hidden", timeout=10_000)
    page.keyboard.press("z")
    page.wait_for_timeout(300)
    assert page.get_by_role("heading", name="My queues", level=1).is_visible()
    assert Task.objects.get().state == TaskState.COMPLETING
    assert "undo" not in [e.action for e in Task.objects.get().events.all()]
