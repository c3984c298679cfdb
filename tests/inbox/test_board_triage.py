"""Issue 14, the supervisor's triage: what an escalated task says, one set of clock names,
a reassign picker of workers who may take the task, and overdue and escalated tasks first."""

import datetime
import html as html_lib
import re
from pathlib import Path

from django.utils import timezone

from accounts.models import Availability
from accounts.services import worker_set_availability, worker_set_capacity
from inbox import board
from inbox.models import Task, TaskState
from inbox.selectors import eligibility_problem, worker_load
from inbox.services import supervisor as supervisor_service
from inbox.services.worker import task_claim
from tests.inbox.test_supervisor_pages import escalated_task, messages_of

DOCS = Path(__file__).resolve().parents[2] / "docs"


def text_of(response) -> str:
    """Return the page's text: tags dropped, entities and whitespace folded."""
    body = re.sub(r"<[^>]+>", " ", response.content.decode())
    return re.sub(r"\s+", " ", html_lib.unescape(body))


def overdue(task: Task, **deadlines: datetime.datetime) -> None:
    """Let the task's deadlines pass without a sweep, as between two rounds of the clock
    process (no clock process runs in these tests)."""
    Task.objects.filter(pk=task.pk).update(**deadlines)


# 1. An escalated task nobody holds ------------------------------------------------------------


def test_an_escalated_task_says_it_is_escalated_since_when_and_why(make_task, supervisor,
                                                                   browser_for):
    task = escalated_task(make_task)
    escalation = task.events.get(to_state=TaskState.ESCALATED)
    page = browser_for(supervisor).get(f"/tasks/{task.pk}/")
    text = text_of(page)
    assert "Someone else holds this task" not in text
    assert "nobody holds this task" in text
    assert f"Escalated {escalation.at:%-d %b, %H:%M} UTC" in text
    assert f"Why: {escalation.reason}" in text


def test_an_escalated_task_offers_a_supervisor_the_actions_not_take_next(
    make_task, supervisor, browser_for
):
    task = escalated_task(make_task)
    html = browser_for(supervisor).get(f"/tasks/{task.pk}/").content.decode()
    assert 'action="/tasks/next/"' not in html
    assert 'href="#supervise"' in html and 'id="supervise"' in html
    for action in ["reassign", "return", "extend", "abort"]:
        assert f'action="/tasks/{task.pk}/{action}/"' in html


def test_a_supervisor_reads_who_holds_a_task_and_a_worker_reads_someone_else(
    make_task, make_worker, supervisor, worker, browser_for
):
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    other = make_worker({"invoice-review": 3})
    assert f"Someone else holds this task. Held by {worker.email}." in text_of(
        browser_for(supervisor).get(f"/tasks/{task.pk}/"))
    page = browser_for(other).get(f"/tasks/{task.pk}/")
    if page.status_code == 200:  # a worker may see tasks of their skill
        assert "Someone else holds this task." in text_of(page)
        assert worker.email not in text_of(page)


# 2. One set of clock names --------------------------------------------------------------------


def test_an_escalated_tasks_clock_is_called_escalation_on_the_card_the_extend_and_the_board(
    make_task, supervisor, browser_for
):
    task = escalated_task(make_task)
    client = browser_for(supervisor)
    page = client.get(f"/tasks/{task.pk}/")
    html = page.content.decode()
    [card] = re.findall(r'data-clock="overall">\s*<span class="clock-label">([^<]+)<', html)
    assert card == "Escalation"
    assert re.search(r'<option value="overall">Escalation</option>', html)
    assert page.context["supervise"]["clocks"] == [("overall", "Escalation")]

    board_html = client.get("/supervisor/").content.decode()
    assert "Overall deadline" not in board_html
    assert re.search(r'<span class="clock-name">Escalation</span> <time', board_html)

    response = client.post(f"/tasks/{task.pk}/extend/",
                           {"clock": "overall", "minutes": "15", "reason": "waiting on ana",
                            "version": task.version}, follow=True)
    assert messages_of(response) == [f"Extended the escalation clock: {task.title}."]


def test_a_task_reassigned_after_its_escalation_still_calls_its_clock_escalation(
    make_task, make_worker, supervisor, browser_for
):
    task = escalated_task(make_task)
    worker = make_worker({"invoice-review": 3})
    supervisor_service.task_reassign(supervisor=supervisor, task_id=task.pk, worker=worker,
                                     reason="ana is back")
    task.refresh_from_db()
    assert task.state == TaskState.IN_PROGRESS
    client = browser_for(supervisor)
    html = client.get(f"/tasks/{task.pk}/").content.decode()
    [card] = re.findall(r'data-clock="overall">\s*<span class="clock-label">([^<]+)<', html)
    assert card == "Escalation"
    assert re.search(r'<option value="overall">Escalation</option>', html)
    board_html = client.get("/supervisor/").content.decode()
    assert re.search(r'<span class="clock-name">Escalation</span> <time', board_html)
    # A task that never escalated keeps "Overall", asking nothing of its history.
    plain = make_task()
    assert board.clock_label(task=Task.objects.get(pk=plain.pk), clock="overall") == "Overall"


def test_a_held_tasks_clocks_have_the_same_names_on_the_card_and_the_extend(
    make_task, supervisor, worker, browser_for
):
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    page = browser_for(supervisor).get(f"/tasks/{task.pk}/")
    html = page.content.decode()
    cards = dict(re.findall(
        r'data-clock="(\w+)">\s*<span class="clock-label">([^<]+)<', html))
    assert page.context["supervise"]["clocks"] == [("work", "Work"), ("overall", "Overall")]
    for clock, label in page.context["supervise"]["clocks"]:
        assert cards[clock] == label
        assert f'<option value="{clock}">{label}</option>' in html
    assert re.search(r'<span class="clock-name">Overall</span> <time',
                     browser_for(supervisor).get("/supervisor/").content.decode())


def test_the_clock_docs_name_every_clock_as_the_pages_and_the_api_do():
    clocks = (DOCS / "CLOCKS.md").read_text()
    for clock in supervisor_service.CLOCKS:
        label = board.CLOCK_LABELS[clock]
        assert f"| {label} (`{clock}`" in clocks, clock
    assert f"{board.ESCALATION_LABEL} (`overall`" in clocks


# 3. The reassign picker -----------------------------------------------------------------------


def test_reassign_lists_only_workers_who_may_take_the_task_most_free_capacity_first(
    make_task, make_worker, supervisor, browser_for
):
    roomy = make_worker({"invoice-review": 4}, email="roomy@example.com")
    busy = make_worker({"invoice-review": 3}, email="busy@example.com")
    full = make_worker({"invoice-review": 5}, email="full@example.com")
    away = make_worker({"invoice-review": 5}, email="away@example.com")
    make_worker({"invoice-review": 1}, email="novice@example.com")
    reviewer = make_worker({"invoice-review": 5}, email="reviewer@example.com")
    worker_set_capacity(worker=roomy, capacity=5)
    worker_set_capacity(worker=full, capacity=1)
    worker_set_availability(worker=away, availability=Availability.AWAY)
    task_claim(worker=busy, task_id=make_task().pk)
    task_claim(worker=full, task_id=make_task().pk)
    review = make_task(stage="review")
    task_claim(worker=reviewer, task_id=review.pk)
    task = make_task(execution=review.execution_arn, stage="approval", minProficiency=2,
                     excludeWorkersOf=["review"])

    page = browser_for(supervisor).get(f"/tasks/{task.pk}/")
    listed = page.context["supervise"]["workers"]
    assert [w.email for w in listed] == ["roomy@example.com", "busy@example.com"]
    html = page.content.decode()
    picker = html[html.index('<select id="reassign-worker"'):]
    picker = picker[:picker.index("</select>")]
    for absent in ["full@", "away@", "novice@", "reviewer@"]:
        assert absent not in picker
    assert "roomy@example.com · available · proficiency 4 · 5 of 5 free" in picker
    assert "busy@example.com · available · proficiency 3 · 2 of 3 free" in picker
    # The explainer says why each of the others may not (one reason each).
    for email, reason in [("full", "capacity"), ("away", "away"), ("novice", "proficiency"),
                          ("reviewer", "separation")]:
        assert (f'data-eligibility-worker="{email}@example.com" data-reason="{reason}"'
                in html)
    # The same conditions as the reassign itself: each one listed may take it.
    for worker in listed:
        assert eligibility_problem(user=worker, task=task) is None
        assert worker_load(user=worker) < worker.capacity


def test_every_listed_worker_can_be_given_the_task(make_task, make_worker, supervisor,
                                                   browser_for):
    """The first one listed too: a worker at capacity, first by e-mail, is not listed."""
    task = escalated_task(make_task)
    make_worker({"invoice-review": 3}, email="one@example.com")
    full = make_worker({"invoice-review": 5}, email="aaa-full@example.com")
    worker_set_capacity(worker=full, capacity=0)
    client = browser_for(supervisor)
    [first, *_] = client.get(f"/tasks/{task.pk}/").context["supervise"]["workers"]
    response = client.post(f"/tasks/{task.pk}/reassign/",
                           {"worker": first.pk, "reason": "free", "version": task.version},
                           follow=True)
    assert messages_of(response)[0].startswith(f"Reassigned to {first.email}")


# 4. Counts that link, an overdue filter, escalated and overdue first ------------------------


def test_every_count_links_to_the_board_filtered_by_it(make_task, supervisor, worker,
                                                       browser_for):
    escalated_task(make_task)  # first: its sweep would end the overdue one
    make_task()
    overdue(make_task(), overall_deadline=timezone.now() - datetime.timedelta(minutes=5))
    task_claim(worker=worker, task_id=make_task().pk)
    html = browser_for(supervisor).get("/supervisor/").content.decode()
    for query in ["state=queued", "state=in_progress", "overdue=1", "state=escalated"]:
        assert f'href="?skill=invoice-review&amp;{query}"' in html, query


def test_the_overdue_filter_selects_the_tasks_whose_running_clock_has_passed(
    make_task, supervisor, worker, browser_for
):
    past = timezone.now() - datetime.timedelta(minutes=5)
    on_time = make_task()
    late_overall = make_task()
    overdue(late_overall, overall_deadline=past)
    late_work = make_task()
    task_claim(worker=worker, task_id=late_work.pk)
    overdue(late_work, work_deadline=past)
    page = browser_for(supervisor).get("/supervisor/?overdue=1")
    assert page.status_code == 200
    assert {t.pk for t in page.context["tasks"]} == {late_overall.pk, late_work.pk}
    assert on_time.pk not in {t.pk for t in page.context["attention"]}
    [counts] = page.context["counts"]
    assert counts["overdue"] == 2


def test_a_bad_overdue_value_answers_400_naming_it(make_task, supervisor, browser_for):
    make_task()
    page = browser_for(supervisor).get("/supervisor/?overdue=maybe")
    assert page.status_code == 400
    assert "Unknown overdue 'maybe'" in text_of(page)
    assert len(page.context["tasks"]) + len(page.context["attention"]) == 1


def test_escalated_and_overdue_tasks_come_first_with_why_and_since(
    make_task, supervisor, worker, browser_for
):
    escalated = escalated_task(make_task)  # first: its sweep would end the overdue one
    queued = make_task()
    late_work = make_task()
    task_claim(worker=worker, task_id=late_work.pk)
    since = timezone.now() - datetime.timedelta(minutes=5)
    overdue(late_work, work_deadline=since)
    page = browser_for(supervisor).get("/supervisor/")
    attention = page.context["attention"]
    assert {t.pk for t in attention} == {late_work.pk, escalated.pk}
    assert [t.pk for t in page.context["tasks"]] == [queued.pk]
    html = page.content.decode()
    assert html.index('id="board-attention"') < html.index(str(queued.pk))
    notes = {t.pk: (t.why, t.since) for t in attention}
    event = escalated.events.get(to_state=TaskState.ESCALATED)
    assert notes[escalated.pk] == (f"Escalated: {event.reason}", event.at)
    assert notes[late_work.pk][0] == "Overdue: the work clock ran out"
    assert abs(notes[late_work.pk][1] - since) < datetime.timedelta(seconds=1)
    assert re.search(r"Overdue: the work clock ran out \(since \d+ \w+, \d\d:\d\d UTC ?, "
                     r"5 min \d\d s ago\)", text_of(page))


def test_other_orders_and_later_pages_show_no_separate_attention_list(
    make_task, supervisor, browser_for
):
    escalated = escalated_task(make_task)
    reason = escalated.events.get(to_state=TaskState.ESCALATED).reason
    make_task()
    client = browser_for(supervisor)
    for query in ["sort=priority", "sort=-deadline", "state=escalated", "overdue=1"]:
        page = client.get(f"/supervisor/?{query}")
        assert page.context["attention"] == [], query
    page = client.get("/supervisor/?sort=priority")
    assert escalated.pk in {t.pk for t in page.context["tasks"]}
    # Its why still shows in the row.
    assert f"Escalated: {reason} (since" in text_of(page)


def test_the_default_orders_two_lists_hold_every_task_once(make_task, supervisor,
                                                           browser_for):
    """The default order splits the tasks in two lists: together they hold each one once."""
    tasks = [make_task() for _ in range(3)]
    overdue(tasks[0], overall_deadline=timezone.now() - datetime.timedelta(minutes=1))
    page = browser_for(supervisor).get("/supervisor/")
    ids = [t.pk for t in page.context["attention"]] + [t.pk for t in page.context["tasks"]]
    assert sorted(ids) == sorted(t.pk for t in tasks)
