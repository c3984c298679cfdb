"""Complete and next swaps the next task in place: one POST, no new document, keyboard only."""

import re

import pytest

from inbox.models import Task, TaskState
from tests.browser.a11y import assert_accessible
from tests.browser.keyboard import PASSWORD, watch
from tests.browser.test_reviewer_browser import open_task_titled, sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def problems(live_page):
    """Collect script errors, CSP violations and failed loads; none may happen.

    A 400 is no problem: it is the task page showing a bad answer's errors.
    """
    seen = watch(live_page, refusals_ok=True)
    yield seen
    assert seen == []


class Traffic:
    """The requests a page makes, by method and kind."""

    def __init__(self, page) -> None:
        self.seen: list[tuple[str, str, str]] = []
        page.on("request", lambda r: self.seen.append((r.method, r.resource_type, r.url)))

    def since(self, mark: int) -> list[tuple[str, str]]:
        """Return the requests since mark, but the live stream's and the favicon (which
        headless Chromium fetches when it pleases)."""
        return [(method, kind) for method, kind, url in self.seen[mark:]
                if "/live/" not in url and not url.endswith("/favicon.svg")]


def test_complete_and_next_swaps_the_next_task_in_with_one_request(
    live_page, screenshot, problems, make_task, make_worker
):
    page = live_page
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    for number in (1, 2, 3):
        make_task(title=f"Review invoice INV-{number}", priority=50 - number)
    traffic = Traffic(page)
    sign_in(page, "ana@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-1")
    first_url = page.url
    page.evaluate("window.sameDocument = true")

    mark = len(traffic.seen)
    page.keyboard.press("1")
    page.keyboard.press("Control+Enter")
    page.get_by_role("heading", name="Review invoice INV-2", level=1).wait_for()
    page.wait_for_function("document.activeElement.id === 'task-title'")

    second = Task.objects.get(title="Review invoice INV-2")
    assert page.evaluate("window.sameDocument") is True  # swapped, not loaded
    assert traffic.since(mark) == [("POST", "fetch")]
    assert page.url.endswith(f"/tasks/{second.pk}/")
    assert page.title() == "Review invoice INV-2 · Inbox"
    assert page.get_by_role("status").inner_text() == "Completed: Review invoice INV-1."
    assert Task.objects.get(title="Review invoice INV-1").state == TaskState.COMPLETING
    assert (second.state, second.assignee.email) == (TaskState.IN_PROGRESS, "ana@example.com")
    # The swapped page listens to the live stream from its own point on.
    page.locator(f'[data-live-task="{second.pk}"][data-live-open]').wait_for()
    assert_accessible(page, "a task page swapped in by Complete and next")
    screenshot(page, "reviewer-swapped")

    # Its keys work as on a loaded page: 2 (Reject) makes the comment required, and the
    # browser stops the Ctrl+Enter without it, before anything is posted.
    mark = len(traffic.seen)
    page.keyboard.press("2")
    page.keyboard.press("Control+Enter")
    page.wait_for_function("document.activeElement.id === 'field-comment'")
    assert traffic.since(mark) == []
    page.keyboard.type("Duplicate.")
    page.keyboard.press("Control+Enter")
    page.get_by_role("heading", name="Review invoice INV-3", level=1).wait_for()
    page.wait_for_function("document.activeElement.id === 'task-title'")
    assert page.evaluate("window.sameDocument") is True
    assert Task.objects.get(pk=second.pk).answer == {"decision": "reject",
                                                     "comment": "Duplicate."}

    # Back shows the task before as it is now (decided), forward the one after.
    page.go_back()
    page.get_by_role("heading", name="Review invoice INV-2", level=1).wait_for()
    page.wait_for_load_state()
    assert page.url.endswith(f"/tasks/{second.pk}/")
    assert page.locator("#task-meta .state").inner_text() == "Completing"
    assert not page.locator("#answer-form").count()
    page.go_back()
    page.get_by_role("heading", name="Review invoice INV-1", level=1).wait_for()
    page.wait_for_load_state()
    assert page.url == first_url
    page.go_forward()
    page.get_by_role("heading", name="Review invoice INV-2", level=1).wait_for()
    page.wait_for_load_state()
    page.go_forward()
    page.get_by_role("heading", name="Review invoice INV-3", level=1).wait_for()
    assert page.locator("#answer-form").count() == 1

    # The last task: nothing waits, so home opens (a page of its own) and says so.
    open_task_titled(page, "Review invoice INV-3")
    page.keyboard.press("1")
    page.keyboard.press("Control+Enter")
    page.get_by_role("heading", name="My queues", level=1).wait_for()
    assert "Nothing is waiting in your queues." in page.get_by_role("status").inner_text()
    assert Task.objects.filter(state=TaskState.COMPLETING).count() == 3


def test_an_answer_the_server_refuses_is_swapped_in_with_its_error_at_the_field(
    live_page, problems, make_task, make_worker
):
    page = live_page
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-5")
    make_task(title="Review invoice INV-6")
    sign_in(page, "ana@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-5")
    url = page.url
    page.evaluate("window.sameDocument = true")
    page.keyboard.press("2")
    page.evaluate("document.getElementById('answer-form').noValidate = true")
    page.keyboard.press("Control+Enter")

    page.locator("#field-comment-error").wait_for()
    page.wait_for_function("document.activeElement.id === 'field-comment'")
    assert page.evaluate("window.sameDocument") is True
    assert page.url == url
    assert page.get_by_role("status").inner_text() == (
        "The answer needs another look: see Comment.")
    assert_accessible(page, "a refused answer swapped in")
    page.keyboard.type("Wrong supplier.")
    page.keyboard.press("Control+Enter")
    page.get_by_role("heading", name="Review invoice INV-6", level=1).wait_for()
    assert re.search(r"/tasks/[0-9a-f-]{36}/$", page.url)


def test_a_task_swapped_in_hears_a_change_made_to_it_on_the_same_stream(
    live_page, problems, make_task, make_worker
):
    from accounts.roles import Role
    from inbox.services.supervisor import task_return

    page = live_page
    boss = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-7", priority=60)
    make_task(title="Review invoice INV-8", priority=50)
    live: list[str] = []
    page.on("request", lambda r: live.append(r.url) if "/live/" in r.url else None)
    sign_in(page, "ana@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-7")
    page.locator("[data-live-open]").wait_for(state="attached")
    page.keyboard.press("1")
    page.keyboard.press("Control+Enter")
    page.get_by_role("heading", name="Review invoice INV-8", level=1).wait_for()
    page.locator("[data-live-task][data-live-open]").wait_for(state="attached")
    streams = len(live)

    task_return(supervisor=boss, task_id=Task.objects.get(title="Review invoice INV-8").pk,
                reason="Needs a second look.")

    notice = page.locator("#task-notice")
    notice.wait_for()
    assert "This task changed while you had it open" in notice.inner_text()
    assert len(live) == streams  # the same stream, not a new connection
    # The taken-away form is greyed without fading its text below contrast.
    page.locator(".taken-away").wait_for()
    assert_accessible(page, "a swapped-in task taken away while open")


def test_a_reject_from_its_dialog_swaps_the_next_task_in_too(
    live_page, problems, make_task, make_worker
):
    page = live_page
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-9", priority=60)
    make_task(title="Review invoice INV-10", priority=50)
    sign_in(page, "ana@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-9")
    page.evaluate("window.sameDocument = true")

    page.keyboard.press("r")
    page.get_by_role("dialog", name="Reject the task without answering").wait_for()
    page.keyboard.type("Not an invoice")
    page.keyboard.press("Enter")

    page.get_by_role("heading", name="Review invoice INV-10", level=1).wait_for()
    page.wait_for_function("document.activeElement.id === 'task-title'")
    assert page.evaluate("window.sameDocument") is True
    assert page.get_by_role("status").inner_text() == "Rejected: Review invoice INV-9."
    assert not page.locator("dialog[open]").count()
    assert Task.objects.get(title="Review invoice INV-9").state == TaskState.REJECTING
    assert_accessible(page, "a task page swapped in by a reject")


def test_a_supervisor_who_reviews_opens_the_supervisor_dialogs_on_a_swapped_in_task(
    live_page, problems, make_task, make_worker
):
    """The dialogs a swap brings in are the ones g/e/q/b open, and Esc gives focus back."""
    from accounts.roles import Role

    page = live_page
    make_worker({"invoice-review": 4}, roles=(Role.WORKER, Role.SUPERVISOR),
                email="sam@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-21", priority=60)
    make_task(title="Review invoice INV-22", priority=50)
    sign_in(page, "sam@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-21")
    page.evaluate("window.sameDocument = true")
    page.keyboard.press("1")
    page.keyboard.press("Control+Enter")
    page.get_by_role("heading", name="Review invoice INV-22", level=1).wait_for()
    assert page.evaluate("window.sameDocument") is True  # swapped, not loaded
    dialog = page.locator("#supervise-dialog")
    for key, field in (("e", "extend-clock"), ("q", "return-reason")):
        page.keyboard.press(key)
        dialog.wait_for()
        assert page.evaluate("document.activeElement.id") == field
        assert dialog.locator("form[data-supervise-form]").count() == 1
        page.keyboard.press("Escape")
        dialog.wait_for(state="hidden")
    # The return asks first on the swapped-in page too.
    page.keyboard.press("q")
    dialog.wait_for()
    page.keyboard.type("Needs a second pair of eyes")
    page.keyboard.press("Enter")
    page.locator("#confirm-dialog").wait_for()
    assert Task.objects.get(title="Review invoice INV-22").state == TaskState.IN_PROGRESS
    assert_accessible(page, "the return's confirm dialog on a swapped-in task")
