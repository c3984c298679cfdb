"""Issue 14, the supervisor's triage without JavaScript: a confirm step before return, abort
and every bulk action; extend presets; each action's form on a page of its own; why and
since when on the board; the bulk picker's availability and proficiency."""

import datetime
import html as html_lib
import re

from django.utils import timezone

from accounts.models import Availability
from accounts.services import worker_set_availability, worker_set_capacity
from inbox.models import Task, TaskState
from inbox.services.worker import task_claim, task_take_next
from tests.inbox.test_board_triage import overdue, text_of
from tests.inbox.test_supervisor_pages import escalated_task, messages_of


def confirm_form(response) -> tuple[str, list[tuple[str, str]]]:
    """Return the confirm page's form: where it posts and its hidden fields, in order."""
    html = response.content.decode()
    [form] = re.findall(r'<form method="post" action="([^"]+)">(.*?)</form>', html, re.S)
    fields = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form[1])
    return form[0], [(name, html_lib.unescape(value)) for name, value in fields]


def post_fields(client, url: str, fields: list[tuple[str, str]]):
    data: dict[str, list[str]] = {}
    for name, value in fields:
        data.setdefault(name, []).append(value)
    return client.post(url, data, follow=True)


# The confirm step ---------------------------------------------------------------------------


def test_abort_first_says_what_will_happen_and_only_the_confirm_aborts(
    make_task, supervisor, browser_for
):
    task = make_task(title="Review invoice INV-7")
    client = browser_for(supervisor)
    page = client.post(f"/tasks/{task.pk}/abort/", {"reason": "duplicate invoice",
                                                    "version": task.version})
    assert page.status_code == 200
    text = text_of(page)
    assert ("Abort 'Review invoice INV-7': Step Functions hears TimedOut "
            "(HumanTask.TimedOut) with your reason.") in text
    assert "Your reason: duplicate invoice" in text
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED
    url, fields = confirm_form(page)
    assert url == f"/tasks/{task.pk}/abort/"
    assert ("confirmed", "1") in fields and ("reason", "duplicate invoice") in fields
    assert not [name for name, _ in fields if name == "csrfmiddlewaretoken"][1:]
    response = post_fields(client, url, fields)
    assert messages_of(response) == ["Aborted: Review invoice INV-7."]
    task.refresh_from_db()
    assert (task.state, task.reason) == (TaskState.ABORTING, "duplicate invoice")


def test_return_names_who_loses_the_task_and_waits_for_the_confirm(
    make_task, supervisor, worker, browser_for
):
    task = make_task(title="Review invoice INV-8")
    task_claim(worker=worker, task_id=task.pk)
    client = browser_for(supervisor)
    page = client.post(f"/tasks/{task.pk}/return/", {"reason": "ana is away"})
    assert (f"Return 'Review invoice INV-8' to the invoice-review queue: {worker.email} no "
            "longer holds it; anyone eligible may take it.") in text_of(page)
    assert Task.objects.get(pk=task.pk).assignee == worker
    response = post_fields(client, *confirm_form(page))
    assert messages_of(response) == ["Returned to the queue: Review invoice INV-8."]
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED


def test_the_task_pages_forms_carry_the_same_confirm_words_for_the_dialog(
    make_task, supervisor, worker, browser_for
):
    task = make_task(title="Review invoice INV-9")
    task_claim(worker=worker, task_id=task.pk)
    html = browser_for(supervisor).get(f"/tasks/{task.pk}/").content.decode()
    assert ('data-confirm="Abort &#x27;Review invoice INV-9&#x27;: Step Functions hears '
            'TimedOut') in html
    assert f"to the invoice-review queue: {worker.email} no longer holds it" in html
    # The reason's Enter picks the form's first button: "Abort task…", the confirm step.
    assert re.search(r'data-supervise-form="abort".*?<button type="submit" class="danger" '
                     r'data-confirm-button="Abort task">Abort task…</button>', html, re.S)


def test_a_blank_reason_is_refused_before_any_confirm_step(make_task, supervisor,
                                                          browser_for):
    task = make_task()
    client = browser_for(supervisor)
    for action in ["abort", "return"]:
        response = client.post(f"/tasks/{task.pk}/{action}/", {"reason": "  "}, follow=True)
        assert "Say why" in messages_of(response)[0], action
        assert "confirmed" not in response.content.decode()
    response = client.post("/supervisor/bulk/", {"action": "abort", "task": [task.pk],
                                                 "reason": ""}, follow=True)
    assert "Say why" in messages_of(response)[0]
    assert Task.objects.get().state == TaskState.QUEUED


def test_a_confirm_step_of_a_task_the_user_may_not_manage_is_404(make_task, worker,
                                                                 browser_for):
    task = make_task()
    for action in ["abort", "return"]:
        assert browser_for(worker).post(f"/tasks/{task.pk}/{action}/",
                                        {"reason": "x"}).status_code == 404


def test_bulk_return_names_the_count_and_the_tasks_and_waits_for_the_confirm(
    make_task, supervisor, worker, browser_for
):
    tasks = [make_task(title=f"T{n}") for n in range(12)]
    for task in tasks[:2]:
        task_claim(worker=worker, task_id=task.pk)
    client = browser_for(supervisor)
    page = client.post("/supervisor/bulk/", {"action": "return", "task": [t.pk for t in tasks],
                                             "reason": "month end", "filters": "sort=priority"})
    assert page.status_code == 200
    text = text_of(page)
    assert "Return to queue: 12 tasks?" in text
    assert "Return 12 tasks to their queues: whoever holds them now no longer does." in text
    assert all(f"T{n}" in text for n in range(12))
    assert Task.objects.filter(assignee=worker).count() == 2
    url, fields = confirm_form(page)
    assert url == "/supervisor/bulk/"
    assert [value for name, value in fields if name == "task"] == [str(t.pk) for t in tasks]
    response = post_fields(client, url, fields)
    assert response.redirect_chain[-1][0] == "/supervisor/?sort=priority"
    assert messages_of(response)[0].startswith("Returned to the queue 12 of 12: T0, T1,")
    assert not Task.objects.filter(assignee=worker).exists()


def test_every_bulk_action_says_what_it_will_do_before_doing_it(make_task, supervisor, worker,
                                                               browser_for):
    task = make_task()
    task = task_claim(worker=worker, task_id=task.pk)
    client = browser_for(supervisor)
    said = {
        "reassign": f"Reassign 1 task to {worker.email}:",
        "extend": "Extend the work clock of 1 task by 15 min.",
        "abort": "Abort 1 task: Step Functions hears TimedOut (HumanTask.TimedOut) for each",
        "return": "Return 1 task to their queues",
    }
    for action, words in said.items():
        page = client.post("/supervisor/bulk/", {
            "action": action, "task": [task.pk], "reason": "x", "worker": worker.pk,
            "clock": "work", "minutes": "15"})
        assert page.status_code == 200 and words in text_of(page), action
    assert Task.objects.get().version == task.version


# Extend presets -----------------------------------------------------------------------------


def test_an_extend_preset_moves_the_clock_by_its_own_minutes(make_task, supervisor, worker,
                                                             browser_for):
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    task.refresh_from_db()
    client = browser_for(supervisor)
    html = client.get(f"/tasks/{task.pk}/").content.decode()
    for minutes, label in [("15", "+15 min"), ("60", "+1 h"), ("1440", "+1 day")]:
        assert f'name="preset" value="{minutes}" class="secondary">{label}</button>' in html
    before = task.work_deadline
    response = client.post(f"/tasks/{task.pk}/extend/", {
        "clock": "work", "minutes": "30", "preset": "1440", "reason": "month end",
        "version": task.version}, follow=True)
    assert messages_of(response) == [f"Extended the work clock: {task.title}."]
    task.refresh_from_db()
    assert task.work_deadline - before >= datetime.timedelta(days=1)
    assert task.work_deadline - before < datetime.timedelta(days=1, minutes=1)


def test_a_preset_needs_a_reason_and_an_unknown_one_is_refused(make_task, supervisor, worker,
                                                               browser_for):
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    client = browser_for(supervisor)
    said = messages_of(client.post(f"/tasks/{task.pk}/extend/", {
        "clock": "work", "preset": "15", "reason": ""}, follow=True))
    assert "Say why" in said[0]
    said = messages_of(client.post(f"/tasks/{task.pk}/extend/", {
        "clock": "work", "preset": "99999", "reason": "x"}, follow=True))
    assert said == ["Unknown preset '99999': choose +15 min, +1 h, +1 day, or type the "
                    "minutes."]
    assert Task.objects.get().version == 2  # claimed, nothing more


def test_the_bulk_extend_suggests_the_same_presets_as_a_task(make_task, supervisor, browser_for):
    make_task()
    page = browser_for(supervisor).get("/supervisor/").content.decode()
    field = re.search(r'<input type="number" id="bulk-minutes"[^>]*>', page).group(0)
    assert 'list="bulk-minute-presets"' in field
    presets = re.search(r'<datalist id="bulk-minute-presets">(.*?)</datalist>', page).group(1)
    assert re.findall(r'value="(\d+)" label="([^"]+)"', presets) == [
        ("15", "+15 min"), ("60", "+1 h"), ("1440", "+1 day")]


# Each action on a page of its own (what the board's dialogs fetch) ---------------------------


def test_each_action_has_a_page_of_its_own_with_its_form(make_task, supervisor, worker,
                                                         browser_for):
    task = make_task(title="Review invoice INV-3")
    task_claim(worker=worker, task_id=task.pk)
    client = browser_for(supervisor)
    for action in ["reassign", "return", "extend", "abort"]:
        page = client.get(f"/tasks/{task.pk}/{action}/")
        assert page.status_code == 200, action
        html = page.content.decode()
        assert f'data-supervise-form="{action}"' in html, action
        assert html.count("data-supervise-form=") == 1
        assert f'<h1 id="{action}-title">' in html
    assert browser_for(worker).get(f"/tasks/{task.pk}/abort/").status_code == 404
    queued = make_task()
    assert "nothing to return" in text_of(client.get(f"/tasks/{queued.pk}/return/"))


def test_an_action_posted_from_the_boards_dialog_goes_back_to_the_board(
    make_task, supervisor, worker, browser_for
):
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    response = browser_for(supervisor).post(f"/tasks/{task.pk}/extend/", {
        "clock": "work", "preset": "15", "reason": "x", "from": "board",
        "filters": "state=in_progress"})
    assert response["Location"] == "/supervisor/?state=in_progress"


# Why and since when ----------------------------------------------------------------------------


def test_an_overdue_row_names_every_clock_that_ran_out_since_the_first(make_task, supervisor,
                                                                     make_worker, browser_for):
    task = make_task()
    offered_to = make_worker({"invoice-review": 3})
    Task.objects.filter(pk=task.pk).update(state=TaskState.OFFERED, assignee=offered_to)
    first = timezone.now() - datetime.timedelta(minutes=30)
    overdue(task, offer_deadline=timezone.now() - datetime.timedelta(minutes=5),
            overall_deadline=first)
    [row] = browser_for(supervisor).get("/supervisor/").context["attention"]
    assert row.why == "Overdue: the overall and offer clocks ran out"
    assert abs(row.since - first) < datetime.timedelta(seconds=1)


def test_an_escalated_row_whose_escalation_clock_ran_out_says_so(make_task, supervisor,
                                                                 browser_for):
    task = escalated_task(make_task)
    overdue(task, overall_deadline=timezone.now() - datetime.timedelta(minutes=1))
    [row] = browser_for(supervisor).get("/supervisor/").context["attention"]
    assert row.why.startswith("Escalated: The overall clock ran out;")
    assert row.why.endswith(" The escalation clock ran out too.")
    assert row.since == task.events.get(to_state=TaskState.ESCALATED).at


# The bulk picker -------------------------------------------------------------------------------


def test_the_bulk_picker_lists_available_workers_first_with_proficiency_and_free_capacity(
    make_task, make_worker, supervisor, approval_skill, browser_for
):
    away = make_worker({"invoice-review": 5}, email="aaa-away@example.com")
    worker_set_availability(worker=away, availability=Availability.AWAY)
    busy = make_worker({"invoice-review": 2, "finance-approval": 4}, email="busy@example.com")
    worker_set_capacity(worker=busy, capacity=2)
    make_task()
    task_take_next(worker=busy)
    make_task()
    html = browser_for(supervisor).get("/supervisor/").content.decode()
    options = re.findall(r'data-email="([^"]+)">([^<]+)</option>', html)
    emails = [email for email, _ in options]
    assert emails.index("busy@example.com") < emails.index("aaa-away@example.com")
    texts = dict(options)
    assert texts["busy@example.com"] == ("busy@example.com · available · invoice-review 2 · "
                                         "1 of 2 free")
    assert texts["aaa-away@example.com"] == ("aaa-away@example.com · away · invoice-review 5 "
                                             "· 3 of 3 free")
