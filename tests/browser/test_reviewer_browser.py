"""A reviewer's day in a real browser: keyboard only, every shortcut, under the strict CSP."""

import re

import pytest

from accounts.roles import Role
from inbox.models import Task, TaskState
from inbox.services.dispatcher import task_dispatch
from inbox.services.worker import task_take_next
from tests.browser import keyboard
from tests.browser.keyboard import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]



@pytest.fixture
def problems(page):
    """Collect script errors, CSP violations and failed loads; none may happen.

    A 400 is no problem: it is the task page showing a bad answer's errors.
    """
    seen = keyboard.watch(page, refusals_ok=True)
    yield seen
    assert seen == []


def sign_in(page, email: str) -> None:
    keyboard.sign_in(page, email, start="/")
    at_home(page)


def at_home(page) -> None:
    """Wait for My queues, its script loaded (shortcuts work from then on)."""
    page.get_by_role("heading", name="My queues", level=1).wait_for()
    page.wait_for_load_state()


def focused(page) -> str:
    """Return what has focus: its id, else its name, else its tag."""
    return page.evaluate("(() => { const e = document.activeElement;"
                         " return e.id || e.name || e.tagName.toLowerCase(); })()")


def open_task_titled(page, title: str) -> None:
    """Wait for the task's page, focus on its title as the page puts it there."""
    page.get_by_role("heading", name=title, level=1).wait_for()
    page.wait_for_load_state()
    page.wait_for_function("document.activeElement.id === 'task-title'")


def test_reviewer_takes_answers_and_rejects_tasks_with_the_keyboard_only(
    page, screenshot, problems, make_task, make_worker
):
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    for number, amount in [(1, 120), (2, 12500), (3, 80)]:
        make_task(title=f"Review invoice INV-{number}", input={
            "invoice_id": f"INV-{number}", "amount": amount, "currency": "EUR",
            "supplier": {"name": "ACME Ltd", "vat_id": "ATU12345678",
                         "address": {"street": "Hauptplatz 1", "city": "Graz"}},
            "lines": [{"sku": "P-100", "quantity": 2}, {"sku": "S-7", "quantity": 1}],
        })
    sign_in(page, "ana@example.com")
    assert page.get_by_role("cell", name="3", exact=True).is_visible()  # waiting

    # n: take the next task; its page opens with focus on the title.
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-1")
    work = page.locator('[data-clock="work"] time[data-deadline]')
    before = work.inner_text()
    assert re.fullmatch(r"(29 min \d\d|30 min 00) s left", before)
    page.wait_for_function("([el, text]) => el.textContent !== text",
                           arg=[work.element_handle(), before])
    assert page.locator('[data-clock="overall"] time[data-deadline]').inner_text().endswith(
        "left")
    assert page.locator('[data-clock="offer"]').inner_text().endswith("not running")
    screenshot(page, "reviewer-task")

    # Tab to the decision, arrow to Reject, Tab to the comment, type it, Ctrl+Enter.
    page.keyboard.press("Tab")
    assert page.get_by_role("radio", name="Approve").evaluate("el => el === document.activeElement")
    page.keyboard.press("ArrowDown")
    assert page.get_by_role("radio", name="Reject").is_checked()
    page.keyboard.press("Tab")
    assert focused(page) == "field-comment"
    page.keyboard.type("Duplicate of INV-0.")
    page.keyboard.press("Control+Enter")
    open_task_titled(page, "Review invoice INV-2")
    assert page.get_by_role("status").inner_text() == "Completed: Review invoice INV-1."

    # 1 picks the first choice (Approve); Space on it would too. Ctrl+Enter submits.
    page.keyboard.press("Tab")
    page.keyboard.press("Space")
    assert page.get_by_role("radio", name="Approve").is_checked()
    page.keyboard.press("Control+Enter")
    open_task_titled(page, "Review invoice INV-3")

    # r asks why; Enter confirms; the queue is empty now, so home says so.
    assert page.get_by_role("link", name="Reject without answering…").is_visible()
    page.keyboard.press("r")
    page.get_by_role("dialog", name="Reject the task without answering").wait_for()
    reason = page.get_by_role("textbox", name="Why do you reject it?")
    reason.wait_for()
    assert focused(page) == "reject-reason"
    page.keyboard.type("Not an invoice")
    page.keyboard.press("Enter")
    at_home(page)
    assert "Nothing is waiting in your queues." in page.get_by_role("status").inner_text()

    states = dict(Task.objects.values_list("title", "state"))
    assert states == {"Review invoice INV-1": TaskState.COMPLETING,
                      "Review invoice INV-2": TaskState.COMPLETING,
                      "Review invoice INV-3": TaskState.REJECTING}
    answers = dict(Task.objects.values_list("title", "answer"))
    assert answers["Review invoice INV-1"] == {"decision": "reject",
                                               "comment": "Duplicate of INV-0."}
    assert answers["Review invoice INV-2"] == {"decision": "approve", "comment": None}


def test_reject_without_a_comment_is_stopped_in_the_browser_with_the_servers_words(
    page, screenshot, problems, make_task, make_worker
):
    """The comment a Reject needs is asked for before anything is sent, once, at the field."""
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-5")
    sign_in(page, "ana@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-5")
    posted: list[str] = []
    page.on("request", lambda request: posted.append(request.url)
            if request.method == "POST" else None)
    comment = page.get_by_role("textbox", name="Comment")
    assert comment.get_attribute("required") is None  # Approve needs none
    page.keyboard.press("2")  # Reject, and no comment
    assert comment.get_attribute("required") is not None
    page.keyboard.press("Control+Enter")
    page.wait_for_function("document.activeElement.id === 'field-comment'")
    assert comment.evaluate("el => el.validationMessage") == "Required when decision is reject"
    assert posted == []
    assert Task.objects.get().state == TaskState.IN_PROGRESS
    page.keyboard.press("Escape")
    page.keyboard.press("1")  # Approve: the comment is optional again
    assert comment.get_attribute("required") is None
    assert comment.evaluate("el => el.validity.valid")
    page.keyboard.press("2")
    page.get_by_role("textbox", name="Comment").focus()
    page.keyboard.type("Wrong supplier.")
    page.keyboard.press("Control+Enter")
    at_home(page)
    assert Task.objects.get().answer == {"decision": "reject", "comment": "Wrong supplier."}


def test_a_bad_answer_the_server_refuses_puts_focus_on_the_field_and_says_why_once(
    page, screenshot, problems, make_task, make_worker
):
    """The server keeps its own check: a form posted without the browser's check (here made
    novalidate) comes back with the error at its field, not repeated at the top."""
    make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-5")
    sign_in(page, "ana@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-5")
    page.keyboard.press("2")
    page.evaluate("document.getElementById('answer-form').noValidate = true")
    page.keyboard.press("Control+Enter")
    page.locator("#field-comment-error").wait_for()
    page.wait_for_function("document.activeElement.id === 'field-comment'")  # autofocus
    comment = page.get_by_role("textbox", name="Comment")
    assert comment.get_attribute("aria-invalid") == "true"
    status = page.get_by_role("status").inner_text()
    assert status == "The answer needs another look: see Comment."
    assert page.get_by_text("Required when decision is reject").count() == 1
    screenshot(page, "reviewer-answer-error")
    page.keyboard.type("Wrong supplier.")
    page.keyboard.press("Control+Enter")
    at_home(page)
    assert Task.objects.get().answer == {"decision": "reject", "comment": "Wrong supplier."}


def test_help_overlay_lists_the_shortcuts_and_lists_move_with_j_and_k(
    page, screenshot, problems, make_task, make_worker
):
    ana = make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    make_task(title="Review invoice INV-8")
    make_task(title="Review invoice INV-9")
    task_take_next(worker=ana)
    sign_in(page, "ana@example.com")
    screenshot(page, "reviewer-home")

    page.keyboard.press("?")
    help_dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    help_dialog.wait_for()
    screenshot(page, "reviewer-help")
    for key in ["n", "j", "k", "/", "r", "u", "a", "d", "?", "Esc"]:
        assert help_dialog.locator("kbd", has_text=re.compile(f"^{re.escape(key)}$")).count()
    page.keyboard.press("Escape")
    help_dialog.wait_for(state="hidden")

    # / focuses the filter; typing there is not a shortcut; Esc leaves it.
    page.keyboard.press("/")
    assert focused(page) == "filter"
    page.keyboard.type("?INV-8")
    assert not help_dialog.is_visible()
    page.get_by_role("searchbox", name="Filter").fill("INV-8")
    assert page.get_by_text("1 of 2 rows match").is_visible()
    page.get_by_role("searchbox", name="Filter").fill("")
    page.keyboard.press("Escape")
    assert focused(page) != "filter"

    # j selects the first row, j the next, k back; Enter opens the task.
    page.keyboard.press("j")
    assert page.get_by_role("link", name="Review invoice INV-8").evaluate(
        "el => el === document.activeElement")
    page.keyboard.press("j")
    assert page.get_by_role("button", name="Take next from Invoice review").evaluate(
        "el => el === document.activeElement")
    page.keyboard.press("k")
    page.keyboard.press("Enter")
    open_task_titled(page, "Review invoice INV-8")


def test_an_offer_is_accepted_with_a_and_another_declined_with_d(
    page, screenshot, problems, make_task, make_worker, check_skill
):
    cleo = make_worker({"document-check": 3}, email="cleo@example.com", password=PASSWORD)
    cleo.capacity = 2
    cleo.save(update_fields=["capacity"])
    first = make_task(skill="document-check", stage="check", title="Check passport P-1",
                      form="acknowledge")
    second = make_task(skill="document-check", stage="check", title="Check passport P-2",
                       form="acknowledge")
    for task in (first, second):
        assert task_dispatch(task_id=task.pk).assignee == cleo
    sign_in(page, "cleo@example.com")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    open_task_titled(page, "Check passport P-1")
    offer = page.locator('[data-clock="offer"] time[data-deadline]')
    before = offer.inner_text()
    assert before.endswith("left")
    page.wait_for_function("([el, text]) => el.textContent !== text",
                           arg=[offer.element_handle(), before])
    screenshot(page, "reviewer-offer")

    page.keyboard.press("a")
    page.locator("#answer-form").wait_for()
    assert "Accepted." in page.get_by_role("status").inner_text()
    assert page.locator('[data-clock="work"] time[data-deadline]').inner_text().endswith("left")
    first.refresh_from_db()
    assert (first.state, first.assignee) == (TaskState.IN_PROGRESS, cleo)

    page.goto(f"/tasks/{second.pk}/")
    open_task_titled(page, "Check passport P-2")
    page.keyboard.press("d")
    page.get_by_role("textbox", name="Why do you decline it?").wait_for()
    page.keyboard.type("I know the applicant")
    page.keyboard.press("Enter")
    at_home(page)
    second.refresh_from_db()
    assert second.state in (TaskState.QUEUED, TaskState.OFFERED)
    assert second.assignee != cleo


def test_the_admin_runs_under_the_strict_policy(page, problems, make_user, make_task):
    """Django 5.2's admin uses no inline script or style: no CSP violation on its pages."""
    make_user(roles=(Role.ADMIN,), email="root@example.com")
    task = make_task()
    sign_in(page, "root@example.com")
    for path in ["/admin/", "/admin/inbox/task/", f"/admin/inbox/task/{task.pk}/change/",
                 "/admin/accounts/user/add/", "/admin/accounts/skill/add/"]:
        response = page.goto(path)
        assert response.status == 200, path
        assert "script-src 'self'" in response.headers["content-security-policy"]
        page.locator("#content").wait_for()


def test_complete_goes_home_holding_nothing_and_ctrl_enter_completes_and_opens_the_next(
    page, problems, make_task, make_worker
):
    ana = make_worker({"invoice-review": 4}, email="ana@example.com", password=PASSWORD)
    for number in (1, 2, 3):
        make_task(title=f"Review invoice INV-{number}", priority=50 - number)
    sign_in(page, "ana@example.com")
    page.keyboard.press("n")
    open_task_titled(page, "Review invoice INV-1")
    page.keyboard.press("1")
    page.keyboard.press("Control+Enter")  # the keyboard's default: complete and next
    open_task_titled(page, "Review invoice INV-2")
    assert page.get_by_role("status").inner_text() == "Completed: Review invoice INV-1."

    # Plain Complete: back to My queues, no new task taken, INV-3 still waits.
    page.keyboard.press("1")
    page.get_by_role("button", name="Complete", exact=True).focus()
    page.keyboard.press("Enter")
    at_home(page)
    assert page.get_by_role("status").inner_text() == "Completed: Review invoice INV-2."
    assert page.get_by_text("You hold no task and have no offer waiting.").is_visible()
    assert not Task.objects.filter(assignee=ana, state__in=[TaskState.OFFERED,
                                                            TaskState.IN_PROGRESS]).exists()
    assert Task.objects.get(title="Review invoice INV-3").state == TaskState.QUEUED
