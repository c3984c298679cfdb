import datetime
import re

import pytest
from django.conf import settings
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.roles import Role
from inbox.models import Task, TaskState
from inbox.services.clock import deadlines_sweep
from inbox.services.worker import task_claim, task_take_next
from inbox.tokens import token_decrypt
from tests.inbox.test_pages import InlineCode


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def board_ids(response) -> list[str]:
    return [str(task.pk) for task in response.context["tasks"]]


def escalated_task(make_task) -> Task:
    """Bring in a task that escalates, and let its overall clock run out."""
    task = make_task(onTimeout="escalate",
                     timeouts={"offer": 60, "work": 60, "overall": 60, "escalation": 600})
    deadlines_sweep(now=timezone.now() + datetime.timedelta(seconds=120))
    task.refresh_from_db()
    assert task.state == TaskState.ESCALATED
    return task


# Who sees what --------------------------------------------------------------------------------


def test_board_counts_each_supervised_skill_by_state(make_task, supervisor, worker,
                                                     approval_skill, browser_for):
    for _ in range(3):
        make_task()
    make_task(skill="finance-approval")
    task_take_next(worker=worker)
    escalated_task(make_task)
    page = browser_for(supervisor).get("/supervisor/")
    assert page.status_code == 200
    [row] = page.context["counts"]  # finance-approval is no skill of this supervisor
    assert row["skill"].slug == "invoice-review"
    assert (row["queued"], row["offered"], row["in_progress"], row["escalated"]) == (2, 0, 1, 1)
    assert row["oldest"] is not None
    # The escalated one first, apart from the others.
    assert len(page.context["attention"]) == 1 and len(page.context["tasks"]) == 3
    html = page.content.decode()
    assert "updated <time" in html and "data-refresh-seconds=\"15\"" in html


def test_an_admin_sees_every_skill(make_task, make_user, approval_skill, check_skill,
                                   browser_for):
    make_task(skill="finance-approval")
    page = browser_for(make_user(roles=(Role.ADMIN,))).get("/supervisor/")
    assert page.status_code == 200
    assert [row["skill"].slug for row in page.context["counts"]] == [
        "document-check", "finance-approval", "invoice-review"]
    assert [row["queued"] for row in page.context["counts"]] == [0, 1, 0]


def test_workers_get_403_on_the_board_and_404_on_supervisor_actions(make_task, worker,
                                                                   browser_for):
    task = make_task()
    client = browser_for(worker)
    assert client.get("/supervisor/").status_code == 403
    assert client.post("/supervisor/bulk/", {"action": "return", "task": [task.pk],
                                             "reason": "x"}).status_code == 403
    for action in ["reassign", "return", "extend", "abort"]:
        response = client.post(f"/tasks/{task.pk}/{action}/",
                               {"reason": "x", "worker": worker.pk, "clock": "overall",
                                "minutes": 5})
        assert response.status_code == 404, action
    page = client.get(f"/tasks/{task.pk}/")
    assert page.context["supervise"] is None and "Supervise" not in page.content.decode()
    assert Task.objects.get().state == TaskState.QUEUED


def test_a_supervisor_of_another_skill_cannot_see_or_act_on_the_task(
    make_task, make_worker, approval_skill, browser_for
):
    task = make_task()
    other = browser_for(make_worker({"finance-approval": 5}, roles=(Role.SUPERVISOR,)))
    assert other.get(f"/tasks/{task.pk}/").status_code == 404
    assert other.post(f"/tasks/{task.pk}/return/", {"reason": "x"}).status_code == 404
    assert board_ids(other.get("/supervisor/")) == []


# Filters, order and pages --------------------------------------------------------------------


def test_the_list_filters_by_skill_state_process_assignee_and_age(
    make_task, make_worker, worker, approval_skill, browser_for
):
    admin = browser_for(make_worker({}, roles=(Role.ADMIN,)))
    queued = make_task()
    held = make_task(process={"name": "invoice-check", "version": 2})
    other_skill = make_task(skill="finance-approval")
    task_claim(worker=worker, task_id=held.pk)
    assert set(board_ids(admin.get("/supervisor/?skill=invoice-review"))) == {
        str(queued.pk), str(held.pk)}
    assert board_ids(admin.get("/supervisor/?state=in_progress")) == [str(held.pk)]
    assert board_ids(admin.get("/supervisor/?process=invoice-check")) == [str(held.pk)]
    assert board_ids(admin.get(f"/supervisor/?assignee={worker.email.upper()}")) == [
        str(held.pk)]
    assert set(board_ids(admin.get("/supervisor/?assignee=none"))) == {
        str(queued.pk), str(other_skill.pk)}
    assert board_ids(admin.get("/supervisor/?age=1h")) == []
    Task.objects.filter(pk=queued.pk).update(
        created_at=timezone.now() - datetime.timedelta(hours=2))
    assert board_ids(admin.get("/supervisor/?age=1h")) == [str(queued.pk)]
    page = admin.get("/supervisor/?state=nonsense&sort=sideways&after=junk")
    assert page.status_code == 400 and len(page.context["tasks"]) == 3
    assert len(page.context["filters"].problems) == 3


def test_the_list_sorts_by_deadline_created_and_priority(make_task, supervisor, browser_for):
    low = make_task(priority=10, timeouts={"offer": 300, "work": 1800, "overall": 600})
    high = make_task(priority=90, timeouts={"offer": 300, "work": 1800, "overall": 7200})
    middle = make_task(priority=50, timeouts={"offer": 300, "work": 1800, "overall": 3600})
    client = browser_for(supervisor)
    ids = [str(t.pk) for t in (low, high, middle)]
    assert board_ids(client.get("/supervisor/")) == [ids[0], ids[2], ids[1]]
    assert board_ids(client.get("/supervisor/?sort=-deadline")) == [ids[1], ids[2], ids[0]]
    assert board_ids(client.get("/supervisor/?sort=created")) == ids
    assert board_ids(client.get("/supervisor/?sort=priority")) == [ids[1], ids[2], ids[0]]


@pytest.mark.parametrize("sort", ["deadline", "-deadline", "created", "-created", "priority",
                                  "-priority"])
def test_keyset_pages_return_every_task_exactly_once(make_task, supervisor, browser_for, sort):
    for number in range(120):
        make_task(priority=[10, 50, 90][number % 3])  # many ties: the id breaks them
    client = browser_for(supervisor)
    seen: list[str] = []
    path = f"/supervisor/?sort={sort}"
    pages = 0
    while path:
        with CaptureQueriesContext(connection) as queries:
            page = client.get(path)
        assert page.status_code == 200
        assert not [q for q in queries if " offset " in q["sql"].lower()]
        assert len(page.context["tasks"]) <= 50
        seen += board_ids(page)
        pages += 1
        path = f"/supervisor/?{page.context['next_query']}" if page.context["next_query"] \
            else None
    assert pages == 3
    assert len(seen) == 120 and set(seen) == {str(pk) for pk in
                                               Task.objects.values_list("pk", flat=True)}


def test_the_board_uses_the_same_bounded_number_of_queries_for_5_and_200_tasks(
    make_task, make_worker, supervisor, approval_skill, browser_for,
    django_assert_max_num_queries
):
    worker = make_worker({"invoice-review": 3, "finance-approval": 3})
    worker.capacity = 100
    worker.save(update_fields=["capacity"])
    client = browser_for(supervisor)
    for _ in range(5):
        make_task()
    task_take_next(worker=worker)
    with CaptureQueriesContext(connection) as small:
        assert client.get("/supervisor/?sort=priority").status_code == 200
    with CaptureQueriesContext(connection) as small_default:
        assert client.get("/supervisor/").status_code == 200
    for number in range(195):
        make_task(skill=["invoice-review", "finance-approval"][number % 2],
                  process={"name": f"process-{number % 7}", "version": 1})
    for _ in range(30):
        task_take_next(worker=worker)
    assert Task.objects.count() == 200
    # 11: the session, the user, roles, the live cursor, skills, the attention list, the
    # page, the counts, the bulk picker and its proficiencies, who is online.
    with django_assert_max_num_queries(11):
        with CaptureQueriesContext(connection) as large:
            page = client.get("/supervisor/?sort=priority")
            assert page.status_code == 200 and len(page.context["tasks"]) == 50
    assert len(large) == len(small)
    with django_assert_max_num_queries(11):
        assert client.get(f"/supervisor/?{page.context['next_query']}").status_code == 200
    escalated_task(make_task)  # the default order shows it first, apart
    with django_assert_max_num_queries(11):
        with CaptureQueriesContext(connection) as large_default:
            page = client.get("/supervisor/")
            assert page.status_code == 200 and len(page.context["attention"]) == 1
    assert len(large_default) == len(small_default)


# Actions on the task page ----------------------------------------------------------------------


def test_task_page_offers_the_supervisor_actions_with_eligible_workers_only(
    make_task, make_worker, supervisor, worker, browser_for
):
    task = make_task(minProficiency=3)
    novice = make_worker({"invoice-review": 2})
    not_a_worker = make_worker({"invoice-review": 5}, roles=(Role.SUPERVISOR,))
    page = browser_for(supervisor).get(f"/tasks/{task.pk}/")
    html = page.content.decode()
    assert [w.email for w in page.context["supervise"]["workers"]] == [worker.email]
    picker = html[html.index('<select id="reassign-worker"'):]
    picker = picker[:picker.index("</select>")]
    assert worker.email in picker
    assert novice.email not in picker and not_a_worker.email not in picker
    # Who may take it says why not, one reason each (inbox.eligibility).
    assert f'data-eligibility-worker="{novice.email}" data-reason="proficiency"' in html
    assert f'data-eligibility-worker="{not_a_worker.email}" data-reason="not_worker"' in html
    for action in ["reassign", "extend", "abort"]:
        assert f'action="/tasks/{task.pk}/{action}/"' in html
    assert f'action="/tasks/{task.pk}/return/"' not in html  # queued already


def test_reassign_gives_the_task_to_the_chosen_worker(make_task, supervisor, worker,
                                                      browser_for):
    task = escalated_task(make_task)
    client = browser_for(supervisor)
    response = client.post(f"/tasks/{task.pk}/reassign/",
                           {"worker": worker.pk, "reason": "ana knows this supplier",
                            "version": task.version}, follow=True)
    assert f"Reassigned to {worker.email}" in messages_of(response)[0]
    task.refresh_from_db()
    assert (task.state, task.assignee) == (TaskState.IN_PROGRESS, worker)
    assert task.events.last().reason == "ana knows this supplier"


def test_return_extend_and_abort_through_the_task_page(make_task, supervisor, worker,
                                                      browser_for):
    task = make_task()
    task_claim(worker=worker, task_id=task.pk)
    client = browser_for(supervisor)
    task.refresh_from_db()
    before = task.work_deadline
    response = client.post(f"/tasks/{task.pk}/extend/",
                           {"clock": "work", "minutes": "30", "reason": "big invoice"},
                           follow=True)
    assert messages_of(response) == [f"Extended the work clock: {task.title}."]
    task.refresh_from_db()
    assert task.work_deadline >= before + datetime.timedelta(minutes=30)

    response = client.post(f"/tasks/{task.pk}/return/", {"reason": "ana is away",
                                                          "confirmed": "1"}, follow=True)
    assert messages_of(response) == [f"Returned to the queue: {task.title}."]
    task.refresh_from_db()
    assert (task.state, task.assignee) == (TaskState.QUEUED, None)

    response = client.post(f"/tasks/{task.pk}/abort/", {"reason": "duplicate invoice",
                                                         "confirmed": "1"}, follow=True)
    assert messages_of(response) == [f"Aborted: {task.title}."]
    task.refresh_from_db()
    assert task.state == TaskState.ABORTING and task.reason == "duplicate invoice"


def test_an_action_without_a_reason_or_on_a_stale_page_is_refused_with_a_message(
    make_task, supervisor, worker, browser_for
):
    task = make_task()
    client = browser_for(supervisor)
    response = client.post(f"/tasks/{task.pk}/abort/", {"reason": "  "}, follow=True)
    assert "Say why" in messages_of(response)[0]
    response = client.post(f"/tasks/{task.pk}/reassign/", {"reason": "x"}, follow=True)
    assert messages_of(response) == ["Choose a worker to give the task to."]
    response = client.post(f"/tasks/{task.pk}/extend/",
                           {"clock": "work", "minutes": "5", "reason": "x"}, follow=True)
    assert "not running" in messages_of(response)[0]
    response = client.post(f"/tasks/{task.pk}/return/",
                           {"reason": "x", "version": task.version + 5, "confirmed": "1"},
                           follow=True)
    assert response.status_code == 200 and messages_of(response)
    task.refresh_from_db()
    assert (task.state, task.version) == (TaskState.QUEUED, 1)


# Bulk --------------------------------------------------------------------------------------------


def test_bulk_shows_each_tasks_outcome(make_task, supervisor, worker, browser_for):
    held = make_task(title="Held one")
    queued = make_task(title="Queued one")
    task_claim(worker=worker, task_id=held.pk)
    client = browser_for(supervisor)
    response = client.post("/supervisor/bulk/", {
        "action": "extend", "task": [held.pk, queued.pk], "clock": "work", "minutes": "10",
        "reason": "month end", "filters": "sort=priority", "confirmed": "1",
    })
    assert response["Location"] == "/supervisor/?sort=priority"
    said = messages_of(client.get(response["Location"]))
    assert said[0] == "Extended 1 of 2: Held one."
    assert said[1].startswith("Queued one: The work clock of this task is not running")
    assert Task.objects.get(pk=held.pk).version == 3


def test_bulk_reassign_and_return(make_task, supervisor, worker, browser_for):
    tasks = [make_task(title=f"T{n}") for n in range(3)]
    client = browser_for(supervisor)
    response = client.post("/supervisor/bulk/", {
        "action": "reassign", "task": [t.pk for t in tasks[:2]], "worker": worker.pk,
        "reason": "ana takes these", "confirmed": "1"}, follow=True)
    assert messages_of(response) == ["Reassigned 2 of 2: T0, T1."]
    assert set(Task.objects.filter(assignee=worker).values_list("title", flat=True)) == {
        "T0", "T1"}
    response = client.post("/supervisor/bulk/", {
        "action": "return", "task": [t.pk for t in tasks], "reason": "ana is away",
        "confirmed": "1"}, follow=True)
    assert messages_of(response)[0] == "Returned to the queue 3 of 3: T0, T1, T2."
    assert not Task.objects.filter(assignee__isnull=False).exists()


def test_bulk_needs_an_action_and_checked_tasks(make_task, supervisor, browser_for):
    task = make_task()
    client = browser_for(supervisor)
    said = messages_of(client.post("/supervisor/bulk/", {"task": [task.pk], "reason": "x"},
                                   follow=True))
    assert said == ["Choose what to do with the checked tasks."]
    said = messages_of(client.post("/supervisor/bulk/", {"action": "abort", "reason": "x"},
                                   follow=True))
    assert said == ["Check at least one task."]
    said = messages_of(client.post("/supervisor/bulk/", {
        "action": "abort", "reason": "x", "task": ["not-a-uuid"], "confirmed": "1"},
        follow=True))
    assert said == ["not-a-uuid: No such task."]
    assert Task.objects.get().state == TaskState.QUEUED


# Security ---------------------------------------------------------------------------------------


def test_every_supervisor_post_needs_the_csrf_token(make_task, supervisor, worker,
                                                    browser_for):
    task = make_task()
    client = browser_for(supervisor, enforce_csrf_checks=True)
    data = {"reason": "x", "worker": worker.pk, "clock": "overall", "minutes": "5",
            "confirmed": "1"}
    for action in ["reassign", "return", "extend", "abort"]:
        assert client.post(f"/tasks/{task.pk}/{action}/", data).status_code == 403, action
    assert client.post("/supervisor/bulk/", {**data, "action": "abort",
                                             "task": [task.pk]}).status_code == 403
    assert Task.objects.get().version == 1
    board = client.get("/supervisor/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', board).group(1)
    response = client.post("/supervisor/bulk/", {**data, "action": "abort", "task": [task.pk],
                                                 "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Task.objects.get().state == TaskState.ABORTING


def test_no_supervisor_page_shows_a_task_token(make_task, make_user, supervisor, worker,
                                               browser_for):
    admin = make_user(roles=(Role.ADMIN,))
    make_task(input={"taskToken": "hidden", "invoice_id": "INV-1"})
    held = make_task()
    task_claim(worker=worker, task_id=held.pk)
    escalated_task(make_task)
    pages = []
    for user in (supervisor, admin):
        client = browser_for(user)
        pages.append(client.get("/supervisor/"))
        pages += [client.get(f"/tasks/{task.pk}/") for task in Task.objects.all()]
    pages.append(browser_for(supervisor).post(
        "/supervisor/bulk/", {"action": "return", "reason": "x",
                              "task": list(Task.objects.values_list("pk", flat=True))},
        follow=True))
    tokens = [token_decrypt(t.token_ciphertext) for t in Task.objects.all()]
    assert len(tokens) == 3 and all(len(token) > 20 for token in tokens)
    assert {p.status_code for p in pages} == {200}
    for page in pages:
        html = page.content.decode()
        assert not [token for token in tokens if token in html]


def test_supervisor_pages_have_no_inline_script_or_style(make_task, supervisor, worker,
                                                        browser_for):
    task = make_task()
    client = browser_for(supervisor)
    for page in [client.get("/supervisor/"), client.get(f"/tasks/{task.pk}/")]:
        assert page.status_code == 200
        assert page["Content-Security-Policy"] == settings.INBOX_CSP
        parser = InlineCode()
        parser.feed(page.content.decode())
        assert parser.found == []
