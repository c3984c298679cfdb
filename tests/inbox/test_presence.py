"""Presence: a worker sets themselves available or away (audited, offers given back, told
to the board live); who is online; what each holds, on the supervisor board."""

import datetime
import html
import re

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import AuditAction, AuditEvent, Availability, User
from accounts.roles import Role
from accounts.services import worker_set_availability
from inbox import effects, live
from inbox.lifecycle import transition
from inbox.models import Task, TaskEvent, TaskState
from inbox.services.dispatcher import offer_candidates
from inbox.services.worker import task_claim

TIMEOUTS = {"offer": 60, "work": 600, "overall": 86400}


def _text(fragment: str) -> str:
    """Return a fragment's text as a reader sees it: tags dropped, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _rows(page: str, marker: str) -> dict[str, tuple[str, list[str]]]:
    """Return the table rows marked data-<marker>="...": {value: (attributes, cells)}."""
    found = {}
    for value, attributes, body in re.findall(
            rf'<tr data-{marker}="([^"]+)"([^>]*)>(.*?)</tr>', page, re.S):
        found[html.unescape(value)] = (attributes, [_text(cell) for cell in re.findall(
            r"<td[^>]*>(.*?)</td>", body, re.S)])
    return found


def _presence_control(page: str) -> str:
    match = re.search(r'<form class="presence".*?</form>', page, re.S)
    return match.group(0) if match else ""


@pytest.fixture
def enqueued(monkeypatch) -> list[tuple]:
    """Record what is enqueued after commit, by Celery task name, instead of sending it."""
    sent: list[tuple] = []
    monkeypatch.setattr(effects, "enqueue", lambda name, *args: sent.append((name, args)))
    return sent


@pytest.fixture
def ana(make_worker, check_skill, review_skill):
    return make_worker({"document-check": 3, "invoice-review": 3}, email="ana@example.com")


@pytest.fixture
def ben(make_worker, check_skill):
    return make_worker({"document-check": 3}, email="ben@example.com")


def test_going_away_gives_offers_back_keeps_work_and_is_audited(
    ana, ben, make_task, enqueued, django_capture_on_commit_callbacks
):
    offered = make_task(skill="document-check", timeouts=TIMEOUTS)
    transition(task_id=offered.pk, action="offer", worker=ana)
    working = task_claim(worker=ana, task_id=make_task().pk)

    with django_capture_on_commit_callbacks(execute=True):
        withdrawn = worker_set_availability(worker=ana, availability=Availability.AWAY,
                                            actor=ana)

    assert withdrawn == 1
    offered.refresh_from_db()
    working.refresh_from_db()
    assert (offered.state, offered.assignee) == (TaskState.QUEUED, None)
    assert (working.state, working.assignee) == (TaskState.IN_PROGRESS, ana)
    event = TaskEvent.objects.filter(task=offered).order_by("-version").first()
    assert (event.action, event.actor, event.reason, event.data["worker"]) == (
        "withdraw", ana, "ana@example.com went away.", "ana@example.com")
    # Offered on at once, and never to her while she is away.
    assert ("inbox.tasks.dispatch_task", (str(offered.pk),)) in enqueued
    assert offer_candidates(task=offered) == [ben]
    entry = AuditEvent.objects.get(action=AuditAction.AVAILABILITY_CHANGED)
    assert (entry.actor_email, entry.subject, entry.detail) == (
        "ana@example.com", "ana@example.com", {"before": "available", "after": "away"})


def test_coming_back_offers_the_waiting_push_tasks_after_commit(
    ana, enqueued, django_capture_on_commit_callbacks
):
    worker_set_availability(worker=ana, availability=Availability.AWAY)
    enqueued.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert worker_set_availability(worker=ana, availability=Availability.AVAILABLE) == 0
    assert enqueued == [("inbox.tasks.dispatch_pending_task", ())]
    assert User.objects.get(pk=ana.pk).availability == Availability.AVAILABLE


def test_setting_the_state_already_held_changes_nothing_and_is_not_audited(ana):
    assert worker_set_availability(worker=ana, availability=Availability.AVAILABLE) == 0
    assert not AuditEvent.objects.filter(action=AuditAction.AVAILABILITY_CHANGED).exists()


# The header control --------------------------------------------------------------------


def test_the_header_shows_a_worker_their_state_and_the_control_to_change_it(ana, browser_for):
    page = browser_for(ana).get(reverse("inbox:home")).content.decode()
    control = _presence_control(page)
    assert f'action="{reverse("team:presence")}"' in control
    assert re.search(r'id="presence-state"[^>]*>Available<', control)
    assert re.search(r'value="away" [^>]*aria-keyshortcuts="Shift\+A"', control)
    assert "<kbd>Shift</kbd>+<kbd>A</kbd>" in page


def test_a_worker_goes_away_and_comes_back_through_the_control(ana, browser_for):
    client = browser_for(ana)
    back_to = reverse("inbox:home") + "?q=1"
    response = client.post(reverse("team:presence"), {"availability": "away",
                                                      "next": back_to}, follow=True)
    assert response.redirect_chain[-1] == (back_to, 302)
    page = response.content.decode()
    control = _presence_control(page)
    assert re.search(r'id="presence-state"[^>]*>Away<', control)
    assert 'value="available"' in control
    assert "You are away: nobody offers or assigns you new tasks" in page
    assert User.objects.get(pk=ana.pk).availability == Availability.AWAY

    client.post(reverse("team:presence"), {"availability": "available"})
    assert User.objects.get(pk=ana.pk).availability == Availability.AVAILABLE


@pytest.mark.parametrize("value", ["", "asleep", "AWAY"])
def test_an_unknown_availability_is_refused_and_changes_nothing(ana, browser_for, value):
    response = browser_for(ana).post(reverse("team:presence"), {"availability": value})
    assert response.status_code == 400
    assert "Choose availability 'available' or 'away'" in response.content.decode()
    assert User.objects.get(pk=ana.pk).availability == Availability.AVAILABLE


def test_a_next_elsewhere_goes_home_instead(ana, browser_for):
    response = browser_for(ana).post(reverse("team:presence"), {
        "availability": "away", "next": "https://evil.example.com/"})
    assert response["Location"] == reverse("inbox:home")


def test_only_workers_have_the_control(make_worker, review_skill, browser_for):
    boss = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    client = browser_for(boss)
    assert _presence_control(client.get(reverse("inbox:supervisor")).content.decode()) == ""
    assert client.post(reverse("team:presence"), {"availability": "away"}).status_code == 403


# Online, and the board ---------------------------------------------------------------


def test_signing_in_makes_a_worker_online_and_signing_out_ends_it(ana, browser_for):
    client = browser_for(ana)
    assert User.objects.get(pk=ana.pk).last_seen is not None
    client.post(reverse("account_logout"))
    assert User.objects.get(pk=ana.pk).last_seen is None


def test_the_board_shows_who_is_online_away_and_what_each_holds(
    ana, ben, make_worker, make_task, browser_for
):
    boss = make_worker({"document-check": 1}, roles=(Role.SUPERVISOR,),
                       email="boss@example.com")
    browser_for(ana)  # signed in now: online
    User.objects.filter(pk=ben.pk).update(
        last_seen=timezone.now() - datetime.timedelta(minutes=30))
    transition(task_id=make_task(skill="document-check", timeouts=TIMEOUTS).pk,
               action="offer", worker=ben)
    task_claim(worker=ana, task_id=make_task().pk)
    worker_set_availability(worker=ben, availability=Availability.AWAY)  # gives the offer back
    transition(task_id=make_task(skill="document-check", timeouts=TIMEOUTS).pk,
               action="offer", worker=ana)

    page = browser_for(boss).get(reverse("inbox:supervisor")).content.decode()
    rows = {email: cells for email, (_, cells) in _rows(page, "presence-worker").items()}
    assert list(rows) == ["ana@example.com", "ben@example.com"]  # online first
    assert rows["ana@example.com"] == ["Available", "Online", "1", "1", "2 of 3"]
    assert rows["ben@example.com"][0] == "Away"
    assert rows["ben@example.com"][1].startswith("Seen ")
    assert rows["ben@example.com"][2:] == ["0", "0", "0 of 3"]
    # The supervisor holds the skill without the worker role: not on the team.
    assert "boss@example.com" not in rows


def test_the_explainer_on_the_task_page_shows_one_reason_per_worker(
    ana, ben, make_worker, make_task, browser_for
):
    boss = make_worker({"document-check": 1}, roles=(Role.SUPERVISOR,),
                       email="boss@example.com")
    worker_set_availability(worker=ben, availability=Availability.AWAY)
    task = make_task(skill="document-check", timeouts=TIMEOUTS)
    page = browser_for(boss).get(reverse("inbox:task", args=[task.pk])).content.decode()
    rows = {email: (re.search(r'data-reason="([^"]*)"', attributes).group(1), cells[1])
            for email, (attributes, cells) in _rows(page, "eligibility-worker").items()}
    assert rows == {
        "ana@example.com": ("", "\N{EN DASH}"),
        "ben@example.com": ("away", "Away: takes no new offers or assignments."),
        "boss@example.com": ("not_worker",
                             "Not a worker: holds the skill without the worker role."),
    }
    picker = re.search(r'<select id="reassign-worker".*?</select>', page, re.S).group(0)
    assert re.findall(r'<option value="\d+">([^ ]+) ·', picker) == ["ana@example.com"]


# Live --------------------------------------------------------------------------------


def test_a_change_of_availability_is_told_to_the_supervisors_of_the_workers_skills(
    ana, make_worker, approval_skill
):
    checks_boss = make_worker({"document-check": 1}, roles=(Role.SUPERVISOR,))
    other_boss = make_worker({"finance-approval": 1}, roles=(Role.SUPERVISOR,))
    admin = make_worker(roles=(Role.ADMIN,))
    peer = make_worker({"document-check": 3})
    before = timezone.now() - live.PRESENCE_WINDOW
    worker_set_availability(worker=ana, availability=Availability.AWAY, actor=ana)

    [signal] = live.presence_since(before)
    assert signal.as_json() == {"worker": ana.pk, "availability": "away"}
    told = {user.pk: live.audience_for(user=user).wants_presence(signal)
            for user in (checks_boss, other_boss, admin, peer)}
    assert told == {checks_boss.pk: True, other_boss.pk: False, admin.pk: True,
                    peer.pk: False}
    assert live.presence_since(timezone.now() + datetime.timedelta(seconds=1)) == []


def test_the_withdrawn_offer_is_a_task_signal_too(ana, make_task):
    task = make_task(skill="document-check", timeouts=TIMEOUTS)
    transition(task_id=task.pk, action="offer", worker=ana)
    after = live.latest_event_id()
    worker_set_availability(worker=ana, availability=Availability.AWAY)
    [signal] = live.signals_after(after)
    assert (signal.action, signal.state, signal.holder_before) == (
        "withdraw", TaskState.QUEUED, ana.pk)
    assert Task.objects.get(pk=task.pk).state == TaskState.QUEUED


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_away_worker_holds_no_offer_however_dispatch_and_going_away_race(
    make_task, make_worker, check_skill
):
    """Dispatch offering twenty tasks while their only worker goes away: each offer either
    committed first and was given back, or was never made (both take the worker's lock)."""
    from inbox.services.dispatcher import dispatch_pending
    from tests.concurrency import race

    tasks = [make_task(skill="document-check", timeouts=TIMEOUTS) for _ in range(20)]
    ana = make_worker({"document-check": 3}, email="ana@example.com")
    ana.capacity = 100
    ana.save()

    def act(which: str) -> object:
        if which == "dispatch":
            return dispatch_pending()
        return worker_set_availability(worker=ana, availability=Availability.AWAY)

    _, errors = race(act, ["dispatch", "away"])
    assert errors == []
    assert User.objects.get(pk=ana.pk).availability == Availability.AWAY
    assert not Task.objects.filter(assignee=ana).exists()
    offered = TaskEvent.objects.filter(action="offer").count()
    assert TaskEvent.objects.filter(action="withdraw").count() == offered
    assert Task.objects.filter(pk__in=[t.pk for t in tasks],
                               state=TaskState.QUEUED).count() == 20


def test_my_queues_says_what_of_their_capacity_a_worker_uses(ana, make_task, browser_for):
    from accounts.models import Skill

    Skill.objects.filter(slug="invoice-review").update(weight=2)
    make_task(skill="invoice-review")
    task_claim(worker=ana, task_id=Task.objects.get().pk)
    page = html.unescape(browser_for(ana).get("/").content.decode())
    assert re.search(r"Using 2 of your capacity of 3\.", page)
    User.objects.filter(pk=ana.pk).update(capacity=2)
    page = html.unescape(browser_for(ana).get("/").content.decode())
    assert "Using 2 of your capacity of 2: full, so nothing new is offered" in page
