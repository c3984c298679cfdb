import re
from html.parser import HTMLParser

from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.models import PeerVisibility, Skill
from accounts.roles import Role
from inbox.models import Outbox, Task, TaskState
from inbox.services.dispatcher import task_dispatch
from inbox.services.worker import task_accept, task_claim, task_release, task_take_next
from inbox.tokens import token_decrypt


def held(worker) -> Task:
    return Task.objects.get(assignee=worker, state=TaskState.IN_PROGRESS)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


# Who sees what --------------------------------------------------------------------------------


def test_home_shows_queues_with_counts_the_oldest_wait_and_held_tasks(
    make_task, worker, browser_for
):
    make_task(title="Review invoice INV-1")
    make_task(title="Review invoice INV-2")
    taken = task_take_next(worker=worker)
    page = browser_for(worker).get("/")
    assert page.status_code == 200
    html = page.content.decode()
    assert page.context["queues"][0]["waiting"] == 1
    assert "data-since" in html  # the oldest waiting task's age, kept live by inbox.js
    assert f'href="/tasks/{taken.pk}/"' in html
    assert 'data-shortcut="n"' in html


def test_signed_out_visitors_are_sent_to_sign_in(client, make_task):
    task = make_task()
    for path in ["/", f"/tasks/{task.pk}/"]:
        response = client.get(path)
        assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    response = client.post("/tasks/next/")
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert Task.objects.get().state == TaskState.QUEUED


def test_task_page_lays_out_input_form_clocks_and_history(make_task, worker, browser_for):
    make_task(input={
        "invoice_id": "INV-7",
        "supplierName": "ACME <b>Ltd</b>",
        "address": {"city": "Graz", "lines": ["Hauptplatz 1", "8010"]},
        "paid": False,
    })
    task = task_take_next(worker=worker)
    page = browser_for(worker).get(f"/tasks/{task.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "<dt>Invoice id</dt><dd>INV-7</dd>" in html
    assert "<dt>Supplier name</dt><dd>ACME &lt;b&gt;Ltd&lt;/b&gt;</dd>" in html  # escaped
    assert '<dt>Address</dt><dd><dl class="kv"><dt>City</dt><dd>Graz</dd>' in html  # nested
    assert "<li>Hauptplatz 1</li>" in html and "<dt>Paid</dt><dd>no</dd>" in html
    assert "invoice-approval" in html and "review" in html
    # The form: a radio per choice with its digit, the comment with its help.
    assert html.count('type="radio" name="decision"') == 2
    assert 'aria-describedby="field-comment-help"' in html
    # Work and overall clocks run; the offer clock does not (the task was taken).
    assert re.search(r'data-clock="work">.*?data-deadline', html, re.S)
    assert re.search(r'data-clock="overall">.*?data-deadline', html, re.S)
    assert re.search(r'data-clock="offer">\s*<span class="clock-label">Offer</span>\s*'
                     r'<span class="clock-time">not running', html)
    assert [e.action for e in page.context["history"]] == ["receive", "take_next"]
    assert 'data-shortcut="r"' in html and 'data-shortcut="u"' in html


def test_a_token_named_key_in_the_input_is_never_shown(make_task, worker, browser_for):
    make_task(input={"invoice_id": "INV-8", "taskToken": "a-secret-in-the-input"})
    task = task_take_next(worker=worker)
    html = browser_for(worker).get(f"/tasks/{task.pk}/").content.decode()
    assert "a-secret-in-the-input" not in html
    assert "(hidden)" in html


def test_a_task_you_may_not_see_is_404_for_every_page(make_task, make_worker, approval_skill,
                                                      browser_for):
    task = make_task()
    outsider = browser_for(make_worker({"finance-approval": 5}))
    assert outsider.get(f"/tasks/{task.pk}/").status_code == 404
    for action in ["complete", "reject", "release", "claim", "accept", "decline"]:
        response = outsider.post(f"/tasks/{task.pk}/{action}/", {"reason": "x"})
        assert response.status_code == 404, action
    assert outsider.get("/tasks/00000000-0000-0000-0000-000000000000/").status_code == 404
    assert outsider.get("/tasks/not-a-uuid/").status_code == 404
    assert Task.objects.get().state == TaskState.QUEUED


def test_others_see_a_held_task_read_only(make_task, worker, make_worker, make_user,
                                          browser_for):
    """A colleague, where the skill opens its tasks to its team, and an admin."""
    Skill.objects.filter(slug="invoice-review").update(peer_visibility=PeerVisibility.TEAM)
    make_task()
    task = task_take_next(worker=worker)
    colleague = make_worker({"invoice-review": 5})
    admin = make_user(roles=(Role.ADMIN,))
    for viewer in (colleague, admin):
        page = browser_for(viewer).get(f"/tasks/{task.pk}/")
        assert page.status_code == 200
        html = page.content.decode()
        assert "Someone else holds this task." in html
        assert 'id="answer-form"' not in html and 'data-shortcut="r"' not in html


# Actions -----------------------------------------------------------------------------------


def test_take_next_opens_the_task(make_task, worker, browser_for):
    make_task()
    response = browser_for(worker).post("/tasks/next/")
    task = held(worker)
    assert response.status_code == 302 and response["Location"] == f"/tasks/{task.pk}/"


def test_take_next_from_one_queue_takes_from_that_queue(make_task, make_worker, approval_skill,
                                                       browser_for):
    worker = make_worker({"invoice-review": 3, "finance-approval": 3})
    make_task(title="review first", priority=90)
    make_task(title="approve", skill="finance-approval", stage="approval")
    browser_for(worker).post("/tasks/next/", {"skill": "finance-approval"})
    assert held(worker).title == "approve"


def test_take_next_from_an_empty_queue_goes_home_with_a_message(worker, browser_for):
    response = browser_for(worker).post("/tasks/next/", follow=True)
    assert response.redirect_chain == [("/", 302)]
    assert messages_of(response) == ["Nothing is waiting in your queues."]


def test_a_fresh_task_page_shows_the_empty_form_and_focuses_the_title(
    make_task, worker, browser_for
):
    make_task()
    task = task_take_next(worker=worker)
    html = browser_for(worker).get(f"/tasks/{task.pk}/").content.decode()
    assert 'id="task-title" tabindex="-1" autofocus>' in html
    assert "aria-invalid" not in html and 'class="field-error"' not in html
    assert " checked" not in html and re.search(r"<textarea[^>]*></textarea>", html)
    assert 'aria-describedby="field-comment-help"' in html
    assert '<kbd aria-hidden="true">1</kbd> Approve' in html
    # The comment is required only for a Reject: the script reads when, and what to say.
    textarea = re.search(r"<textarea[^>]*>", html).group(0)
    assert " required" not in textarea
    assert 'data-required-if="{&quot;decision&quot;: [&quot;reject&quot;]}"' in textarea
    assert 'data-required-message="Required when decision is reject"' in textarea
    assert ">Reject without answering… <kbd" in html  # not to be taken for the answer


def test_a_bad_answer_shows_the_error_at_the_field_and_changes_nothing(
    make_task, worker, browser_for
):
    make_task()
    task = task_take_next(worker=worker)
    response = browser_for(worker).post(f"/tasks/{task.pk}/complete/",
                                        {"decision": "reject", "comment": "  ",
                                         "version": task.version})
    assert response.status_code == 400
    html = response.content.decode()
    textarea = re.search(r"<textarea[^>]*>", html).group(0)
    assert 'aria-invalid="true"' in textarea
    assert 'aria-describedby="field-comment-error field-comment-help"' in textarea
    assert "autofocus" in textarea  # focus lands on the first invalid field
    assert '<p class="field-error" id="field-comment-error">Required when decision is reject<' \
        in html
    assert 'data-required-message="Required when decision is reject"' in textarea  # the same
    assert re.search(r'value="reject" checked', html)  # the answer given is kept
    assert 'id="task-title" tabindex="-1">' in html  # the title gives up autofocus
    assert messages_of(response) == ["The answer needs another look: see Comment."]
    task.refresh_from_db()
    assert (task.state, task.answer) == (TaskState.IN_PROGRESS, None)
    assert not Outbox.objects.exists()


def test_a_checkbox_left_unticked_is_not_posted_and_is_refused_when_required(
    make_task, worker, browser_for
):
    make_task(form="acknowledge")
    task = task_take_next(worker=worker)
    client = browser_for(worker)
    response = client.post(f"/tasks/{task.pk}/complete/",
                           {"note": "  seen ", "version": task.version})
    assert response.status_code == 400
    html = response.content.decode()
    checkbox = re.search(r'<input type="checkbox"[^>]*>', html).group(0)
    assert 'aria-invalid="true"' in checkbox and "autofocus" in checkbox
    assert " checked" not in checkbox
    assert '<p class="field-error" id="field-done-error">Required</p>' in html
    assert re.search(r'<textarea[^>]*>  seen </textarea>', html)  # kept as typed
    assert messages_of(response) == ["The answer needs another look: see Done."]
    response = client.post(f"/tasks/{task.pk}/complete/",
                           {"done": "true", "note": "  seen ", "version": task.version})
    assert response.status_code == 302
    task.refresh_from_db()
    assert task.answer == {"done": True, "note": "  seen "}


def test_the_answer_form_offers_complete_and_complete_and_next_as_plain_submit_buttons(
    make_task, worker, browser_for
):
    """Both work without the script; the first (Enter's default) is Complete and next."""
    make_task()
    task = task_take_next(worker=worker)
    html = browser_for(worker).get(f"/tasks/{task.pk}/").content.decode()
    form = re.search(r'<form [^>]*id="answer-form".*?</form>', html, re.S).group(0)
    buttons = re.findall(r"<button [^>]*>.*?</button>", form, re.S)
    assert len(buttons) == 2
    assert re.match(r'<button type="submit" name="then" value="next" class="primary"[^>]*>'
                    r'Complete and next <kbd aria-hidden="true">Ctrl\+Enter</kbd></button>',
                    buttons[0])
    assert re.match(r'<button type="submit" class="secondary"[^>]*>Complete</button>',
                    buttons[1])


def test_plain_complete_goes_home_and_takes_no_new_task(make_task, worker, browser_for):
    """The last task of a day leaves the reviewer holding nothing, no work clock running."""
    make_task(title="first")
    make_task(title="second")
    first = task_take_next(worker=worker)
    response = browser_for(worker).post(f"/tasks/{first.pk}/complete/",
                                        {"decision": "approve", "version": first.version},
                                        follow=True)
    assert response.redirect_chain == [("/", 302)]
    assert messages_of(response) == ["Completed: first."]
    assert not Task.objects.filter(assignee=worker, state__in=[
        TaskState.OFFERED, TaskState.IN_PROGRESS]).exists()
    assert Task.objects.get(title="second").state == TaskState.QUEUED


def test_complete_and_next_opens_the_next_task(make_task, worker, browser_for):
    make_task(title="first")
    make_task(title="second")
    first = task_take_next(worker=worker)
    response = browser_for(worker).post(f"/tasks/{first.pk}/complete/",
                                        {"decision": "approve", "version": first.version,
                                         "then": "next"},
                                        follow=True)
    second = held(worker)
    assert second.title == "second"
    assert response.redirect_chain == [(f"/tasks/{second.pk}/", 302)]
    assert messages_of(response) == ["Completed: first."]
    first.refresh_from_db()
    assert first.state == TaskState.COMPLETING
    assert first.answer == {"decision": "approve", "comment": None}


def test_a_double_clicked_complete_and_next_takes_one_next_task(make_task, worker,
                                                                browser_for):
    """The second post (a double click, a lost response) is the same decision: it opens
    the task the first one took, and takes no other."""
    make_task(title="first", priority=90), make_task(title="second", priority=80)
    make_task(title="third", priority=70)
    first = task_take_next(worker=worker)
    posted = {"decision": "approve", "version": first.version, "then": "next"}
    browser = browser_for(worker)
    once = browser.post(f"/tasks/{first.pk}/complete/", posted)
    twice = browser.post(f"/tasks/{first.pk}/complete/", posted)
    second = held(worker)  # the one task held: held() fails on two
    assert second.title == "second"
    assert once["Location"] == twice["Location"] == f"/tasks/{second.pk}/"
    assert Task.objects.get(title="third").state == TaskState.QUEUED


def test_complete_and_next_of_the_last_task_goes_home_with_a_message(make_task, worker,
                                                                     browser_for):
    make_task()
    task = task_take_next(worker=worker)
    response = browser_for(worker).post(f"/tasks/{task.pk}/complete/",
                                        {"decision": "approve", "version": task.version,
                                         "then": "next"},
                                        follow=True)
    assert response.redirect_chain == [("/", 302)]
    assert messages_of(response) == [f"Completed: {task.title}.",
                                     "Nothing is waiting in your queues."]


def test_reject_with_a_reason_opens_the_next_task(make_task, worker, browser_for):
    make_task(title="first")
    make_task(title="second")
    first = task_take_next(worker=worker)
    response = browser_for(worker).post(f"/tasks/{first.pk}/reject/",
                                        {"reason": "Not an invoice", "version": first.version})
    second = held(worker)
    assert response["Location"] == f"/tasks/{second.pk}/"
    first.refresh_from_db()
    assert (first.state, first.reason) == (TaskState.REJECTING, "Not an invoice")


def test_reject_without_a_reason_is_refused_with_a_message(make_task, worker, browser_for):
    make_task()
    task = task_take_next(worker=worker)
    response = browser_for(worker).post(f"/tasks/{task.pk}/reject/",
                                        {"reason": " ", "version": task.version}, follow=True)
    assert response.redirect_chain == [(f"/tasks/{task.pk}/", 302)]
    assert messages_of(response) == ["Say why you reject the task."]
    task.refresh_from_db()
    assert task.state == TaskState.IN_PROGRESS


def test_release_puts_the_task_back_and_goes_home(make_task, worker, browser_for):
    make_task()
    task = task_take_next(worker=worker)
    response = browser_for(worker).post(f"/tasks/{task.pk}/release/",
                                        {"version": task.version}, follow=True)
    assert response.redirect_chain == [("/", 302)]
    task.refresh_from_db()
    assert (task.state, task.assignee) == (TaskState.QUEUED, None)
    assert response.context["queues"][0]["waiting"] == 1


def test_claim_takes_a_queued_task_from_its_page(make_task, worker, browser_for):
    task = make_task()
    client = browser_for(worker)
    assert "Take this task" in client.get(f"/tasks/{task.pk}/").content.decode()
    response = client.post(f"/tasks/{task.pk}/claim/", {"version": task.version})
    assert response["Location"] == f"/tasks/{task.pk}/"
    assert held(worker) == task


def test_a_stale_page_is_refused_and_changes_nothing(make_task, worker, browser_for):
    make_task()
    task = task_take_next(worker=worker)
    client = browser_for(worker)
    client.post(f"/tasks/{task.pk}/release/", {"version": task.version})
    task_claim(worker=worker, task_id=task.pk)
    response = client.post(f"/tasks/{task.pk}/complete/",
                           {"decision": "approve", "version": task.version}, follow=True)
    assert response.redirect_chain == [(f"/tasks/{task.pk}/", 302)]
    assert "changed since you loaded it" in messages_of(response)[-1]
    task.refresh_from_db()
    assert task.state == TaskState.IN_PROGRESS


def test_accept_an_offer_opens_it_to_work_on(make_task, make_worker, check_skill, browser_for):
    checker = make_worker({"document-check": 3})
    task = make_task(skill="document-check", stage="check")
    offered = task_dispatch(task_id=task.pk)
    assert offered.assignee == checker
    client = browser_for(checker)
    html = client.get(f"/tasks/{task.pk}/").content.decode()
    assert 'data-shortcut="a"' in html and 'data-shortcut="d"' in html
    assert re.search(r'data-clock="offer">.*?data-deadline', html, re.S)
    response = client.post(f"/tasks/{task.pk}/accept/", {"version": offered.version},
                           follow=True)
    assert response.redirect_chain == [(f"/tasks/{task.pk}/", 302)]
    assert held(checker) == task
    assert 'id="answer-form"' in response.content.decode()


def test_decline_an_offer_with_a_reason_goes_home(make_task, make_worker, check_skill,
                                                   browser_for):
    checker = make_worker({"document-check": 3})
    task = make_task(skill="document-check", stage="check")
    offered = task_dispatch(task_id=task.pk)
    response = browser_for(checker).post(f"/tasks/{task.pk}/decline/",
                                         {"reason": "Conflict of interest",
                                          "version": offered.version}, follow=True)
    assert response.redirect_chain == [("/", 302)]
    task.refresh_from_db()
    assert (task.state, task.assignee) == (TaskState.QUEUED, None)
    assert task.passes.get().reason == "Conflict of interest"


def test_complete_and_next_of_a_push_task_opens_the_next_offer(make_task, make_worker, check_skill,
                                                    browser_for):
    """A worker of push queues only has no queue to take from: the next offer opens."""
    checker = make_worker({"document-check": 3})
    first = make_task(skill="document-check", stage="check", form="acknowledge")
    second = make_task(skill="document-check", stage="check", form="acknowledge")
    for task in (first, second):
        task_dispatch(task_id=task.pk)
    first = task_accept(worker=checker, task_id=first.pk)
    response = browser_for(checker).post(f"/tasks/{first.pk}/complete/",
                                         {"done": "true", "version": first.version,
                                          "then": "next"})
    assert response["Location"] == f"/tasks/{second.pk}/"


# Security ------------------------------------------------------------------------------------


def test_every_post_needs_the_csrf_token(make_task, worker, browser_for):
    make_task()
    make_task()
    client = browser_for(worker, enforce_csrf_checks=True)
    assert client.post("/tasks/next/").status_code == 403
    home = client.get("/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', home).group(1)
    assert client.post("/tasks/next/", {"csrfmiddlewaretoken": token}).status_code == 302
    task = held(worker)
    for action in ["complete", "reject", "release", "claim", "accept", "decline"]:
        response = client.post(f"/tasks/{task.pk}/{action}/",
                               {"decision": "approve", "reason": "x", "version": task.version})
        assert response.status_code == 403, action
    task.refresh_from_db()
    assert task.state == TaskState.IN_PROGRESS and task.version == 2


def test_no_page_shows_a_task_token(make_task, make_worker, make_user, check_skill,
                                    browser_for):
    """Every page of every state, for each kind of user, searched for every token."""
    worker = make_worker({"invoice-review": 3, "document-check": 3})
    admin = make_user(roles=(Role.ADMIN,))
    for _ in range(4):
        make_task()
    offer = make_task(skill="document-check", stage="check")
    task_dispatch(task_id=offer.pk)
    client = browser_for(worker)
    pages = [client.post("/tasks/next/", follow=True)]
    for action, data in [("complete", {"decision": "approve", "then": "next"}),
                         ("reject", {"reason": "no"}),
                         ("complete", {"decision": "reject"})]:  # the last one is a bad answer
        task = held(worker)
        pages.append(client.post(f"/tasks/{task.pk}/{action}/", data, follow=True))
    pages.append(client.get("/"))
    for task in Task.objects.all():
        pages.append(client.get(f"/tasks/{task.pk}/"))
        pages.append(browser_for(admin).get(f"/tasks/{task.pk}/"))
    tokens = [token_decrypt(t.token_ciphertext) for t in Task.objects.all()]
    assert len(tokens) == 5 and all(len(token) > 20 for token in tokens)
    assert {p.status_code for p in pages} == {200, 400}
    for page in pages:
        html = page.content.decode()
        assert not [token for token in tokens if token in html]


class InlineCode(HTMLParser):
    """Collect what the Content-Security-Policy would block: inline script, style, handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = {name for name, _value in attrs}
        if tag == "script" and "src" not in names and dict(attrs).get("type") != \
                "application/json":
            self.found.append("inline <script>")
        if tag == "style":
            self.found.append("<style>")
        self.found += [f"{tag} {name}=" for name in names
                       if name == "style" or name.startswith("on")]
        if dict(attrs).get("href", "").lower().startswith("javascript:"):
            self.found.append(f"{tag} href=javascript:")


def test_pages_have_no_inline_script_or_style_and_send_the_csp(
    client, make_task, make_worker, check_skill, browser_for
):
    worker = make_worker({"invoice-review": 3, "document-check": 3})
    queued = make_task(input={"nested": {"list": [1, {"a": None}]}})
    make_task()
    offer = make_task(skill="document-check", stage="check")
    task_dispatch(task_id=offer.pk)
    held_task = task_take_next(worker=worker)
    signed_in = browser_for(worker)
    pages = {
        "sign-in": client.get("/accounts/login/"),
        "home": signed_in.get("/"),
        "held task": signed_in.get(f"/tasks/{held_task.pk}/"),
        "bad answer": signed_in.post(f"/tasks/{held_task.pk}/complete/", {"decision": "x"}),
        "offered task": signed_in.get(f"/tasks/{offer.pk}/"),
        "queued task": signed_in.get(f"/tasks/{Task.objects.get(state='queued').pk}/"),
    }
    signed_in.post(f"/tasks/{held_task.pk}/complete/", {"decision": "approve"})
    pages["closed task"] = signed_in.get(f"/tasks/{held_task.pk}/")
    assert queued.pk
    for name, page in pages.items():
        assert page.status_code in (200, 400), name
        assert page["Content-Security-Policy"] == settings.INBOX_CSP, name
        parser = InlineCode()
        parser.feed(page.content.decode())
        assert parser.found == [], name
    assert "script-src 'self';" in settings.INBOX_CSP and "'unsafe-inline'" not in \
        settings.INBOX_CSP


def test_the_admin_gets_the_same_policy_and_needs_no_inline_code(make_user, make_task,
                                                                 browser_for):
    """Django 5.2's admin has no inline script or style: the strict policy fits it too."""
    admin = browser_for(make_user(roles=(Role.ADMIN,)))
    task = make_task()
    for path in ["/admin/", "/admin/inbox/task/", f"/admin/inbox/task/{task.pk}/change/",
                 "/admin/accounts/user/add/"]:
        page = admin.get(path)
        assert page.status_code == 200, path
        assert page["Content-Security-Policy"] == settings.INBOX_CSP
        parser = InlineCode()
        parser.feed(page.content.decode())
        assert parser.found == [], path


# Queries --------------------------------------------------------------------------------------


def queries_of(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path).status_code == 200
    return len(queries)


def test_pages_use_a_bounded_number_of_queries_whatever_the_data(
    make_task, make_worker, approval_skill, check_skill, browser_for,
    django_assert_max_num_queries
):
    worker = make_worker({"invoice-review": 3, "finance-approval": 3, "document-check": 3})
    worker.capacity = 100
    worker.save(update_fields=["capacity"])
    client = browser_for(worker)
    make_task()
    first = task_take_next(worker=worker)
    home_small = queries_of(client, "/")
    task_small = queries_of(client, f"/tasks/{first.pk}/")

    for number in range(50):
        make_task(skill=["invoice-review", "finance-approval"][number % 2])
    for _ in range(20):
        task_take_next(worker=worker)
    for _ in range(10):  # a long history: released and taken again
        task_release(worker=worker, task_id=first.pk)
        task_claim(worker=worker, task_id=first.pk)
    assert Task.objects.count() == 51 and first.events.count() == 22

    with django_assert_max_num_queries(8):
        home_large = queries_of(client, "/")
    # The task page reads its process version twice: the stage's form and its input display.
    with django_assert_max_num_queries(9):
        task_large = queries_of(client, f"/tasks/{first.pk}/")
    assert (home_large, task_large) == (home_small, task_small)


def test_every_field_type_renders_with_its_constraints_and_label():
    from django.http import QueryDict
    from django.template.loader import render_to_string

    from inbox.answer_form import answer_fields
    from processes.forms import Field, Form, answer_form_class

    form = Form(name="all", title="All", fields=(
        Field(name="amount", type="number", label="Amount", required=True, min=0, max=10),
        Field(name="due", type="date", label="Due date"),
        Field(name="ref", type="text", label="Reference", max_length=20),
        Field(name="ok", type="checkbox", label="Checked"),
        Field(name="country", type="choice", label="Country",
              choices=tuple((f"c{n}", f"Country {n}") for n in range(12))),
    ))
    posted = answer_form_class(form)(
        data=QueryDict("amount=11&ok=true&country=c3&csrfmiddlewaretoken=x"))
    assert posted.answer() == {"amount": "11", "due": None, "ref": None, "ok": "true",
                               "country": "c3"}  # the form's fields only, as posted
    assert posted.problems() == {"amount": "must be at most 10"}
    fields = answer_fields(posted)
    html = {bf.field.name: render_to_string("inbox/_field.html", {"bf": bf}) for bf in fields}
    assert re.search(r'<label for="field-amount">Amount <span class="req"', html["amount"])
    assert all(part in html["amount"] for part in [
        'type="number"', 'min="0', 'max="10', "required", 'aria-invalid="true"', "autofocus",
        'aria-describedby="field-amount-error"', "Must be at most 10", 'value="11"'])
    assert 'type="date"' in html["due"] and "autofocus" not in html["due"]
    assert 'maxlength="20"' in html["ref"]
    assert 'type="checkbox"' in html["ok"] and "checked" in html["ok"]
    assert html["country"].count("<option") == 13  # more than nine choices: a select
    assert '<option value="c3" selected>' in html["country"]
