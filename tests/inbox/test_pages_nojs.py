"""The pages without JavaScript: every dialog also has a page of its own, every control that
only works with the script is shown only with it, and the help lists each page's shortcuts.

A browser without JavaScript follows links and posts forms, nothing more: these tests do
the same with Django's test client, reading the links and forms out of the rendered HTML.
"""

import re
from html.parser import HTMLParser

import pytest
from django.test import Client

from accounts.models import PeerVisibility, Skill
from accounts.roles import Role
from inbox.models import Task, TaskState
from inbox.services.dispatcher import task_dispatch
from inbox.services.worker import task_claim, task_release, task_take_next
from inbox.tokens import token_decrypt


class Controls(HTMLParser):
    """Collect a page's links, forms (with their fields) and buttons, as a browser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []
        self.buttons: list[dict[str, str | None]] = []
        self.forms: list[dict] = []
        self.labels: dict[str, str] = {}
        self._label_for: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "a":
            self.links.append(attributes)
        elif tag == "button":
            self.buttons.append(attributes)
        elif tag == "form":
            self.forms.append({**attributes, "fields": {}})
        elif tag == "input" and self.forms and attributes.get("name"):
            self.forms[-1]["fields"][attributes["name"]] = attributes
        elif tag == "label":
            self._label_for = attributes.get("for")

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self._label_for = None

    def handle_data(self, data: str) -> None:
        if self._label_for:
            self.labels[self._label_for] = self.labels.get(self._label_for, "") + data


def controls(response) -> Controls:
    assert response.status_code == 200
    parser = Controls()
    parser.feed(response.content.decode())
    return parser


def link_to_dialog(page: Controls, dialog: str) -> str:
    """Return the href of the one control that opens the dialog: it must be a link."""
    [opener] = [c for c in page.links + page.buttons if c.get("data-opens") == dialog]
    assert opener in page.links, f"{dialog} is opened by a button that needs JavaScript"
    assert opener["href"]
    return opener["href"]


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def csrf_client(user) -> Client:
    """A client that checks CSRF like a real browser session does."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


@pytest.fixture
def checker(make_worker, check_skill):
    return make_worker({"document-check": 3})


def offered_to(checker, make_task) -> Task:
    task = make_task(skill="document-check", stage="check", title="Check passport P-1")
    offered = task_dispatch(task_id=task.pk)
    assert offered.assignee == checker and offered.state == TaskState.OFFERED
    return offered


# Reject and decline, page by page -------------------------------------------------------------


def test_reject_link_opens_a_reason_page_whose_form_rejects_the_task(make_task, worker):
    make_task(title="first")
    make_task(title="second")
    first = task_take_next(worker=worker)
    client = csrf_client(worker)

    href = link_to_dialog(controls(client.get(f"/tasks/{first.pk}/")), "reject-dialog")
    assert href == f"/tasks/{first.pk}/reject/"
    page = controls(client.get(href))
    [form] = [f for f in page.forms if f.get("action") == href]
    assert form["method"] == "post"
    fields = form["fields"]
    assert fields["version"]["value"] == str(first.version)
    assert fields["reason"]["id"] == "reject-reason" and "required" in fields["reason"]
    assert page.labels["reject-reason"] == "Why do you reject it?"
    cancel = [link for link in page.links if link["href"] == f"/tasks/{first.pk}/"]
    assert cancel, "Cancel goes back to the task"

    # What the browser posts: the form's own fields (CSRF token included) and the reason.
    posted = {name: attrs.get("value") or "" for name, attrs in fields.items()}
    response = client.post(href, {**posted, "reason": "Not an invoice"})
    second = Task.objects.get(title="second")
    assert response.status_code == 302 and response["Location"] == f"/tasks/{second.pk}/"
    first.refresh_from_db()
    assert (first.state, first.reason) == (TaskState.REJECTING, "Not an invoice")


def test_the_reject_page_refuses_a_post_without_its_csrf_token(make_task, worker):
    make_task()
    task = task_take_next(worker=worker)
    response = csrf_client(worker).post(f"/tasks/{task.pk}/reject/",
                                        {"reason": "x", "version": task.version})
    assert response.status_code == 403
    task.refresh_from_db()
    assert task.state == TaskState.IN_PROGRESS


def test_decline_link_opens_a_reason_page_whose_form_declines_the_offer(make_task, checker):
    task = offered_to(checker, make_task)
    client = csrf_client(checker)

    href = link_to_dialog(controls(client.get(f"/tasks/{task.pk}/")), "decline-dialog")
    assert href == f"/tasks/{task.pk}/decline/"
    page = controls(client.get(href))
    [form] = [f for f in page.forms if f.get("action") == href]
    assert form["fields"]["reason"]["id"] == "decline-reason"
    assert page.labels["decline-reason"] == "Why do you decline it?"
    posted = {name: attrs.get("value") or "" for name, attrs in form["fields"].items()}
    response = client.post(href, {**posted, "reason": "I know the applicant"}, follow=True)
    assert response.redirect_chain == [("/", 302)]
    task.refresh_from_db()
    assert (task.state, task.assignee) == (TaskState.QUEUED, None)
    assert task.passes.get().reason == "I know the applicant"


def test_a_stale_reason_page_is_refused_and_changes_nothing(make_task, worker):
    """The reason page carries the version it showed, like the task page's dialog."""
    make_task()
    task = task_take_next(worker=worker)
    client = csrf_client(worker)
    page = controls(client.get(f"/tasks/{task.pk}/reject/"))
    [form] = [f for f in page.forms if f.get("action") == f"/tasks/{task.pk}/reject/"]
    posted = {name: attrs.get("value") or "" for name, attrs in form["fields"].items()}
    task_release(worker=worker, task_id=task.pk)
    task_claim(worker=worker, task_id=task.pk)
    response = client.post(f"/tasks/{task.pk}/reject/", {**posted, "reason": "late"},
                           follow=True)
    assert response.redirect_chain == [(f"/tasks/{task.pk}/", 302)]
    assert "changed since you loaded it" in messages_of(response)[-1]
    task.refresh_from_db()
    assert task.state == TaskState.IN_PROGRESS


def test_reason_pages_of_a_task_you_may_not_see_are_404(make_task, make_worker,
                                                         approval_skill, browser_for):
    task = make_task()
    outsider = browser_for(make_worker({"finance-approval": 5}))
    for action in ["reject", "decline"]:
        assert outsider.get(f"/tasks/{task.pk}/{action}/").status_code == 404, action
        assert outsider.get(f"/tasks/00000000-0000-0000-0000-000000000000/{action}/") \
            .status_code == 404


def test_reason_pages_of_a_task_you_do_not_hold_send_you_to_the_task_saying_why(
    make_task, worker, make_worker, checker, browser_for
):
    """As a refused POST does: the task page as it is now, with the reason as a message.

    The colleague sees the held task because its skill opens its tasks to the team.
    """
    Skill.objects.filter(slug="invoice-review").update(peer_visibility=PeerVisibility.TEAM)
    make_task()
    held = task_take_next(worker=worker)
    colleague = browser_for(make_worker({"invoice-review": 5}))
    queued = make_task()
    offer = offered_to(checker, make_task)
    cases = [
        (colleague, held, "reject", "You do not hold this task."),
        (colleague, held, "decline", "This offer is not yours."),
        (browser_for(worker), queued, "reject", "You do not hold this task."),
        (browser_for(worker), held, "decline", "Cannot decline a task that is in progress."),
        (browser_for(checker), offer, "reject", "Cannot reject a task that is offered."),
    ]
    for client, task, action, message in cases:
        response = client.get(f"/tasks/{task.pk}/{action}/", follow=True)
        assert response.redirect_chain == [(f"/tasks/{task.pk}/", 302)], (action, message)
        assert messages_of(response) == [message]
    assert Task.objects.get(pk=held.pk).state == TaskState.IN_PROGRESS


def test_signed_out_visitors_of_a_reason_page_are_sent_to_sign_in(client, make_task):
    task = make_task()
    for action in ["reject", "decline"]:
        response = client.get(f"/tasks/{task.pk}/{action}/")
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_reason_pages_show_no_task_token(make_task, worker, checker):
    make_task()
    held = task_take_next(worker=worker)
    offer = offered_to(checker, make_task)
    pages = [csrf_client(worker).get(f"/tasks/{held.pk}/reject/"),
             csrf_client(checker).get(f"/tasks/{offer.pk}/decline/")]
    for task, page in zip([held, offer], pages, strict=True):
        assert page.status_code == 200
        token = token_decrypt(Task.objects.get(pk=task.pk).token_ciphertext)
        assert len(token) > 20 and token not in page.content.decode()


# Controls that need the script ----------------------------------------------------------------


def script_only_buttons(page: Controls) -> list[dict]:
    """Return the buttons that do nothing without JavaScript and are not marked so."""
    return [b for b in page.buttons
            if b.get("type") == "button" and "data-needs-script" not in b]


def test_no_page_shows_a_control_that_needs_javascript_unmarked(
    make_task, worker, checker, make_user, make_worker, browser_for
):
    """A type=button does nothing without the script: it carries data-needs-script, which
    inbox.css hides until inbox.js runs. Dialog openers are links."""
    supervisor = make_worker({"invoice-review": 3, "document-check": 3},
                             roles=(Role.SUPERVISOR,))
    make_task()
    make_task()
    held = task_take_next(worker=worker)
    offer = offered_to(checker, make_task)
    pages = {
        "held task": browser_for(worker).get(f"/tasks/{held.pk}/"),
        "reject page": browser_for(worker).get(f"/tasks/{held.pk}/reject/"),
        "offered task": browser_for(checker).get(f"/tasks/{offer.pk}/"),
        "decline page": browser_for(checker).get(f"/tasks/{offer.pk}/decline/"),
        "home": browser_for(worker).get("/"),
        "board": browser_for(supervisor).get("/supervisor/"),
        "supervised task": browser_for(supervisor).get(f"/tasks/{held.pk}/"),
        "admin's task": browser_for(make_user(roles=(Role.ADMIN,))).get(f"/tasks/{offer.pk}/"),
    }
    for name, response in pages.items():
        page = controls(response)
        assert script_only_buttons(page) == [], name
        openers = [c for c in page.links + page.buttons if c.get("data-opens")]
        for opener in openers:
            if opener.get("data-opens") != "help-dialog":
                assert opener in page.links and opener["href"], (name, opener)
    board = pages["board"].content.decode()
    assert re.search(r'<input type="checkbox" data-check-all data-needs-script', board)
    assert re.search(r'<div class="filter" data-needs-script>', board)


# The help lists the page's own shortcuts ------------------------------------------------------


def help_keys(response) -> set[str]:
    """Return the keys the help dialog lists."""
    html = response.content.decode()
    dialog = re.search(r'<dialog id="help-dialog".*?</dialog>', html, re.S).group(0)
    return {key for dt in re.findall(r"<dt>(.*?)</dt>", dialog, re.S)
            for key in re.findall(r"<kbd>(.*?)</kbd>", dt)}


def test_help_lists_the_shortcuts_of_the_page_it_is_on(make_task, worker, checker,
                                                       make_worker, browser_for):
    supervisor = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    make_task()
    held = task_take_next(worker=worker)
    offer = offered_to(checker, make_task)
    everywhere = {"?", "Esc"}
    # A worker also has Shift+A everywhere: away, or available again.
    workers_everywhere = everywhere | {"Shift", "A"}

    board = help_keys(browser_for(supervisor).get("/supervisor/"))
    supervising = {"g", "e", "q", "b"}
    assert board == everywhere | {"j", "k", "Enter", "x", "/", "f"} | supervising
    assert help_keys(browser_for(worker).get(f"/tasks/{held.pk}/")) == \
        workers_everywhere | {"1", "9", "Ctrl", "Enter", "r", "u"}
    assert help_keys(browser_for(checker).get(f"/tasks/{offer.pk}/")) == \
        workers_everywhere | {"a", "d"}
    # Someone else's task: taking the next one, and the supervisor's actions on this one.
    assert help_keys(browser_for(supervisor).get(f"/tasks/{held.pk}/")) == \
        everywhere | {"n"} | supervising


def test_a_reason_longer_than_the_api_allows_is_refused_on_the_page_and_changes_nothing(
    make_task, worker, browser_for
):
    """Pages are held to the API's 2,000 characters too (a 1 MB reason was kept before)."""
    make_task()
    task = task_take_next(worker=worker)
    response = browser_for(worker).post(f"/tasks/{task.pk}/reject/",
                                        {"reason": "x" * 2001, "version": task.version},
                                        follow=True)
    assert "The reason is 2,001 characters long; say it in at most 2,000." in (
        response.content.decode())
    task.refresh_from_db()
    assert (task.state, task.reason, task.version) == (TaskState.IN_PROGRESS, "", 2)
