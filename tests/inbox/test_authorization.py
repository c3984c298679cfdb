"""Authorization against current access: who sees which task, and who may still act on it.

Every read goes through one policy (inbox.selectors.Visibility): a worker sees what they
may take, what they hold and what they decided; a skill may open its tasks to its workers
read-only ("team"); supervisors see the skills they hold. Every worker action re-checks,
under the row lock, that the worker may still hold the task; a worker who loses the
access loses the tasks they hold, at once when an admin changes it, else at their next
action.
"""

import datetime

import pytest
from rest_framework.test import APIClient

from accounts.models import PeerVisibility, Skill, WorkerSkill
from accounts.roles import Role
from accounts.services import user_set_roles
from config.errors import Conflict, NotFound
from inbox import live
from inbox.lifecycle import AccessLost
from inbox.live import signals_after
from inbox.models import Outbox, Task, TaskEvent, TaskState
from inbox.selectors import _filtered, access_task, visibility_for, visible_tasks
from inbox.services.access import worker_access_recheck
from inbox.services.dispatcher import task_dispatch
from inbox.services.worker import task_accept, task_claim, task_complete, task_release

APPROVE = {"decision": "approve"}


@pytest.fixture
def ana(make_worker, review_skill):
    return make_worker({"invoice-review": 3}, email="ana@example.com")


@pytest.fixture
def bea(make_worker, review_skill):
    """Ana's peer: the same skill at the same proficiency."""
    return make_worker({"invoice-review": 3}, email="bea@example.com")


@pytest.fixture
def held(make_task, ana):
    """A task ana claimed and works on."""
    task = make_task(input={"invoice_id": "INV-SECRET"})
    return task_claim(worker=ana, task_id=task.pk)


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_login(user)
    return client


def team_skill(slug: str = "invoice-review") -> None:
    Skill.objects.filter(slug=slug).update(peer_visibility=PeerVisibility.TEAM)


def _fresh(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


def _last_event(task: Task) -> TaskEvent:
    return TaskEvent.objects.filter(task=task).order_by("-version").first()


def _assert_returned(task: Task, *, because: str, actor) -> None:
    fresh = _fresh(task)
    assert (fresh.state, fresh.assignee_id, fresh.work_deadline, fresh.offer_deadline) == (
        TaskState.QUEUED, None, None, None)
    event = _last_event(task)
    assert (event.action, event.to_state, event.actor) == ("revoke", TaskState.QUEUED, actor)
    assert because in event.reason and event.reason.startswith("returned: ana@example.com")


# Visibility: own (the default) -------------------------------------------------------------


def test_a_peer_does_not_see_anothers_held_task_on_the_page_the_api_or_any_list(
    held, bea, browser_for
):
    assert browser_for(bea).get(f"/tasks/{held.pk}/").status_code == 404
    client = api_for(bea)
    response = client.get(f"/api/inbox/tasks/{held.pk}/")
    assert response.status_code == 404
    assert "ana@example.com" not in response.content.decode()
    assert client.get("/api/inbox/tasks/mine/").json() == []
    assert not visible_tasks(user=bea).filter(pk=held.pk).exists()
    home = browser_for(bea).get("/").content.decode()
    assert "INV-SECRET" not in home and "ana@example.com" not in home


def test_a_peer_does_not_see_anothers_decided_task(held, ana, bea, browser_for):
    task_complete(worker=ana, task_id=held.pk, answer=APPROVE)
    assert browser_for(bea).get(f"/tasks/{held.pk}/").status_code == 404
    assert api_for(bea).get(f"/api/inbox/tasks/{held.pk}/").status_code == 404


def test_a_worker_keeps_seeing_the_task_they_completed(held, ana, browser_for):
    task_complete(worker=ana, task_id=held.pk, answer=APPROVE)
    page = browser_for(ana).get(f"/tasks/{held.pk}/")
    assert page.status_code == 200
    assert "Completing" in page.content.decode()
    detail = api_for(ana).get(f"/api/inbox/tasks/{held.pk}/").json()
    assert (detail["state"], detail["answer"]["decision"]) == (TaskState.COMPLETING, "approve")


def test_a_worker_sees_the_queued_tasks_they_may_take_and_not_those_above_them(
    make_task, ana, browser_for
):
    mine = make_task(minProficiency=3)
    above = make_task(minProficiency=4)
    assert browser_for(ana).get(f"/tasks/{mine.pk}/").status_code == 200
    assert browser_for(ana).get(f"/tasks/{above.pk}/").status_code == 404
    with pytest.raises(NotFound):
        task_claim(worker=ana, task_id=above.pk)


def test_a_released_task_taken_by_a_peer_is_no_longer_the_first_holders(
    held, ana, bea, browser_for
):
    task_release(worker=ana, task_id=held.pk)
    task_claim(worker=bea, task_id=held.pk)
    assert browser_for(ana).get(f"/tasks/{held.pk}/").status_code == 404


def test_supervisors_see_and_manage_only_the_skills_they_hold(
    held, make_worker, approval_skill, supervisor
):
    elsewhere = make_worker({"finance-approval": 5}, roles=(Role.SUPERVISOR,))
    assert access_task(user=supervisor, task_id=held.pk, action="manage") == held
    for action in ("view", "manage"):
        with pytest.raises(NotFound):
            access_task(user=elsewhere, task_id=held.pk, action=action)


def test_a_user_without_a_role_or_deactivated_sees_nothing(held, ana, make_user):
    nobody = make_user(roles=())
    WorkerSkill.objects.create(worker=nobody, skill=held.skill, proficiency=5)
    assert not visible_tasks(user=nobody).exists()
    ana.is_active = False
    ana.save(update_fields=["is_active"])
    assert not visible_tasks(user=ana).exists()


def test_the_sql_policy_and_the_live_streams_agree_on_every_user_and_task(
    make_task, make_worker, make_user, approval_skill, check_skill, admin
):
    """visible_tasks (SQL), access_task and Visibility.sees (the live audience) are the
    same policy."""
    Skill.objects.filter(slug="finance-approval").update(peer_visibility=PeerVisibility.TEAM)
    ana = make_worker({"invoice-review": 3, "finance-approval": 2}, email="ana@example.com")
    bea = make_worker({"invoice-review": 5}, email="bea@example.com")
    boss = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    both = make_worker({"finance-approval": 1}, roles=(Role.SUPERVISOR, Role.WORKER))
    nobody = make_user(roles=())
    gone = make_worker({"invoice-review": 5})
    gone.is_active = False
    gone.save(update_fields=["is_active"])
    tasks = [make_task(minProficiency=level) for level in (1, 3, 4)]
    tasks += [make_task(skill="finance-approval", minProficiency=level) for level in (1, 3)]
    tasks.append(make_task(skill="document-check"))
    task_claim(worker=ana, task_id=tasks[0].pk)
    task_claim(worker=bea, task_id=tasks[2].pk)
    task_complete(worker=bea, task_id=task_claim(worker=bea, task_id=tasks[1].pk).pk,
                  answer=APPROVE)
    task_claim(worker=ana, task_id=tasks[3].pk)
    held_elsewhere = make_task(skill="finance-approval")
    task_claim(worker=ana, task_id=held_elsewhere.pk)
    Skill.objects.filter(slug="finance-approval").update(peer_visibility=PeerVisibility.OWN)
    WorkerSkill.objects.filter(worker=ana, skill__slug="finance-approval").delete()
    Skill.objects.filter(slug="finance-approval").update(peer_visibility=PeerVisibility.TEAM)

    seen_by_someone = set()
    for user in (ana, bea, boss, both, nobody, gone, admin):
        user = type(user).objects.get(pk=user.pk)
        visible = set(visible_tasks(user=user).values_list("pk", flat=True))
        visibility = live.audience_for(user=user).visibility
        for task in Task.objects.all():
            sees = visibility.sees(skill_id=task.skill_id, min_proficiency=task.min_proficiency,
                                   state=task.state, assignee_id=task.assignee_id)
            assert sees == (task.pk in visible), (user.email, task.state, task.skill_id)
        # access_task (its SQL compiled once per shape of the policy) agrees with both.
        managed = set(_filtered(visibility_for(user=user), view=False)
                      .values_list("pk", flat=True))
        for task in Task.objects.all():
            for action, allowed in (("view", visible), ("manage", managed)):
                try:
                    read = access_task(user=user, task_id=task.pk, action=action)
                except NotFound:
                    read = None
                assert (read is not None) == (task.pk in allowed), (user.email, action)
                if read is not None:
                    assert (read.pk, read.version, read.assignee_id) == (
                        task.pk, task.version, task.assignee_id)
        seen_by_someone |= visible
        if user in (nobody, gone):
            assert visible == set()
    assert seen_by_someone == set(Task.objects.values_list("pk", flat=True))


# Visibility: team ---------------------------------------------------------------------------


def test_under_team_a_peer_sees_the_held_task_read_only(held, bea, browser_for):
    team_skill()
    page = browser_for(bea).get(f"/tasks/{held.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "INV-SECRET" in html and "Someone else holds this task." in html
    for action in ("complete", "reject", "release", "claim", "accept", "decline"):
        assert f"/tasks/{held.pk}/{action}/" not in html, action
    assert page.context["working"] is False and page.context["claimable"] is False
    detail = api_for(bea).get(f"/api/inbox/tasks/{held.pk}/").json()
    assert detail["assignee"] == "ana@example.com"
    with pytest.raises(Conflict):  # seeing is not holding
        task_complete(worker=bea, task_id=held.pk, answer=APPROVE)
    assert _fresh(held).state == TaskState.IN_PROGRESS


def test_under_team_a_queued_task_above_the_peers_proficiency_offers_no_claim(
    make_task, make_worker, browser_for
):
    team_skill()
    novice = make_worker({"invoice-review": 1})
    task = make_task(minProficiency=3)
    page = browser_for(novice).get(f"/tasks/{task.pk}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert f"/tasks/{task.pk}/claim/" not in html
    assert "you cannot take it" in html


# The live stream follows the same policy ------------------------------------------------------


def test_a_peer_hears_of_anothers_held_task_only_under_team(held, ana, bea):
    since = live.latest_event_id()
    task_complete(worker=ana, task_id=held.pk, answer=APPROVE)
    [signal] = signals_after(since)

    assert live.audience_for(user=ana).wants(signal)
    assert not live.audience_for(user=bea).wants(signal)
    team_skill()
    assert live.audience_for(user=bea).wants(signal)


def test_the_holder_hears_that_a_task_was_taken_away_after_losing_the_skill(
    held, ana, admin
):
    since = live.latest_event_id()
    WorkerSkill.objects.filter(worker=ana).delete()
    worker_access_recheck(worker=ana, actor=admin)
    [signal] = signals_after(since)

    assert (signal.action, signal.state) == ("revoke", TaskState.QUEUED)
    assert live.audience_for(user=ana).wants(signal)


# Losing access returns held tasks ------------------------------------------------------------


def test_removing_the_skill_on_the_team_page_returns_the_held_task_and_complete_is_refused(
    held, ana, admin, browser_for
):
    response = browser_for(admin).post(
        f"/team/skills/{ana.pk}/",
        {"skill-invoice-review": "", "availability": "available", "capacity": "3"},
        follow=True)
    assert response.status_code == 200
    assert any("1 held task" in str(m) for m in response.context["messages"])
    _assert_returned(held, because="no longer holds invoice-review", actor=admin)
    version = _fresh(held).version

    refused = api_for(ana).post(f"/api/inbox/tasks/{held.pk}/complete/",
                                {"answer": APPROVE}, format="json")
    assert refused.status_code == 404
    fresh = _fresh(held)
    assert (fresh.state, fresh.version, fresh.answer) == (TaskState.QUEUED, version, None)
    assert not Outbox.objects.filter(task=held).exists()


def test_lowering_the_proficiency_below_the_tasks_returns_it(make_task, ana, admin,
                                                              browser_for):
    task = task_claim(worker=ana, task_id=make_task(minProficiency=3).pk)
    browser_for(admin).post(
        f"/team/skills/{ana.pk}/",
        {"skill-invoice-review": "2", "availability": "available", "capacity": "3"})
    _assert_returned(task, because="holds invoice-review at 2, the task needs 3", actor=admin)
    with pytest.raises(NotFound):
        task_complete(worker=ana, task_id=task.pk, answer=APPROVE)


def test_a_proficiency_still_enough_keeps_the_task(make_task, ana, admin, browser_for):
    task = task_claim(worker=ana, task_id=make_task(minProficiency=2).pk)
    browser_for(admin).post(
        f"/team/skills/{ana.pk}/",
        {"skill-invoice-review": "2", "availability": "available", "capacity": "3"})
    fresh = _fresh(task)
    assert (fresh.state, fresh.assignee) == (TaskState.IN_PROGRESS, ana)


def test_removing_the_worker_role_returns_the_held_task(held, ana, admin):
    user_set_roles(user=ana, roles=(), actor=admin)
    assert worker_access_recheck(worker=ana, actor=admin) == [held.pk]
    _assert_returned(held, because="no longer has the worker role", actor=admin)


def test_deactivating_the_worker_returns_the_held_task(held, ana, admin):
    ana.is_active = False
    ana.save(update_fields=["is_active"])
    assert worker_access_recheck(worker=ana, actor=admin) == [held.pk]
    _assert_returned(held, because="is deactivated", actor=admin)


def test_the_recheck_leaves_a_worker_who_may_still_hold_their_tasks_alone(held, ana, admin):
    assert worker_access_recheck(worker=ana, actor=admin) == []
    assert _fresh(held).state == TaskState.IN_PROGRESS


def test_completing_through_the_api_after_the_skill_went_unnoticed_is_refused_and_returns_it(
    held, ana
):
    """The skill is deleted in the database directly: no recheck ran; the action finds it."""
    WorkerSkill.objects.filter(worker=ana).delete()
    version = held.version

    response = api_for(ana).post(f"/api/inbox/tasks/{held.pk}/complete/",
                                 {"answer": APPROVE, "version": version}, format="json")

    assert response.status_code == 409
    assert response.json()["code"] == "access_lost"
    assert response.json()["detail"] == (
        "You may no longer work on this task: ana@example.com no longer holds invoice-review. "
        "It went back to its queue.")
    _assert_returned(held, because="no longer holds invoice-review", actor=None)
    assert _last_event(held).actor_label == "access"
    assert _fresh(held).answer is None
    assert not Outbox.objects.filter(task=held).exists()


def test_completing_on_the_page_after_the_skill_went_unnoticed_says_why_and_goes_home(
    held, ana, browser_for
):
    WorkerSkill.objects.filter(worker=ana).delete()
    response = browser_for(ana).post(f"/tasks/{held.pk}/complete/",
                                     {"decision": "approve", "version": held.version},
                                     follow=True)
    assert response.redirect_chain[-1][0] == "/"
    assert any("no longer holds invoice-review" in str(m)
               for m in response.context["messages"])
    assert _fresh(held).state == TaskState.QUEUED


def test_the_held_task_page_offers_only_release_once_the_skill_is_gone(
    held, ana, browser_for
):
    WorkerSkill.objects.filter(worker=ana).delete()
    html = browser_for(ana).get(f"/tasks/{held.pk}/").content.decode()
    assert "You may no longer work on this task" in html
    assert f"/tasks/{held.pk}/complete/" not in html
    assert f"/tasks/{held.pk}/release/" in html
    task_release(worker=ana, task_id=held.pk)
    assert _fresh(held).state == TaskState.QUEUED


def test_accepting_an_offer_after_the_skill_went_is_refused_and_returns_it(
    make_task, make_worker, check_skill
):
    cleo = make_worker({"document-check": 3}, email="ana@example.com")
    task = task_dispatch(task_id=make_task(skill="document-check").pk)
    assert (task.state, task.assignee) == (TaskState.OFFERED, cleo)
    WorkerSkill.objects.filter(worker=cleo).delete()
    with pytest.raises(AccessLost):
        task_accept(worker=cleo, task_id=task.pk)
    _assert_returned(task, because="no longer holds document-check", actor=None)


# The Django admin changes skills through the audited services, then rechecks -----------------


def test_deleting_a_skill_in_the_worker_skill_admin_is_audited_and_returns_the_held_task(
    held, ana, admin, browser_for
):
    from accounts.models import AuditEvent

    link = WorkerSkill.objects.get(worker=ana)
    client = browser_for(admin)
    page = client.get(f"/admin/accounts/workerskill/{link.pk}/delete/")
    assert page.status_code == 200
    response = client.post(f"/admin/accounts/workerskill/{link.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not WorkerSkill.objects.filter(worker=ana).exists()
    assert AuditEvent.objects.filter(action="skill_removed", subject=ana.email,
                                     actor_id=admin.pk).exists()
    _assert_returned(held, because="no longer holds invoice-review", actor=admin)


def test_lowering_a_proficiency_in_the_admin_list_is_audited_and_returns_the_held_task(
    make_task, ana, admin, browser_for
):
    from accounts.models import AuditEvent

    task = task_claim(worker=ana, task_id=make_task(minProficiency=3).pk)
    link = WorkerSkill.objects.get(worker=ana)
    response = browser_for(admin).post("/admin/accounts/workerskill/", {
        "form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-MIN_NUM_FORMS": "0",
        "form-MAX_NUM_FORMS": "1000", "form-0-id": str(link.pk),
        "form-0-proficiency": "1", "_save": "Save"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert WorkerSkill.objects.get(pk=link.pk).proficiency == 1
    assert AuditEvent.objects.filter(action="skill_changed", subject=ana.email,
                                     actor_id=admin.pk).exists()
    _assert_returned(task, because="holds invoice-review at 1, the task needs 3", actor=admin)


def test_removing_a_skill_in_the_skill_admins_inline_returns_the_held_task(
    held, ana, admin, browser_for
):
    skill = held.skill
    link = WorkerSkill.objects.get(worker=ana)
    client = browser_for(admin)
    form = client.get(f"/admin/accounts/skill/{skill.pk}/change/").context["adminform"].form
    data = {name: form[name].value() or "" for name in form.fields}
    data.update({
        "worker_skills-TOTAL_FORMS": "1", "worker_skills-INITIAL_FORMS": "1",
        "worker_skills-MIN_NUM_FORMS": "0", "worker_skills-MAX_NUM_FORMS": "1000",
        "worker_skills-0-id": str(link.pk), "worker_skills-0-skill": str(skill.pk),
        "worker_skills-0-worker": str(ana.pk), "worker_skills-0-proficiency": "3",
        "worker_skills-0-DELETE": "on", "_save": "Save"})
    response = client.post(f"/admin/accounts/skill/{skill.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert not WorkerSkill.objects.filter(worker=ana).exists()
    _assert_returned(held, because="no longer holds invoice-review", actor=admin)


def test_the_skill_admin_edits_peer_visibility(review_skill, admin, browser_for):
    client = browser_for(admin)
    form = client.get(f"/admin/accounts/skill/{review_skill.pk}/change/").context[
        "adminform"].form
    assert "peer_visibility" in form.fields
    data = {name: form[name].value() or "" for name in form.fields}
    data.update({"peer_visibility": "team", "worker_skills-TOTAL_FORMS": "0",
                 "worker_skills-INITIAL_FORMS": "0", "worker_skills-MIN_NUM_FORMS": "0",
                 "worker_skills-MAX_NUM_FORMS": "1000", "_save": "Save"})
    response = client.post(f"/admin/accounts/skill/{review_skill.pk}/change/", data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert Skill.objects.get(pk=review_skill.pk).peer_visibility == PeerVisibility.TEAM


def _admin_form_data(client, url: str) -> dict:
    """Return the admin change form's fields as the page would post them back unchanged."""
    form = client.get(url).context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        if field.disabled:
            continue
        value = form[name].value()
        if isinstance(value, datetime.datetime):
            data[f"{name}_0"], data[f"{name}_1"] = f"{value:%Y-%m-%d}", f"{value:%H:%M:%S}"
        elif isinstance(value, bool):
            if value:
                data[name] = "on"
        elif value is not None:
            data[name] = value
    return data


def test_removing_a_skill_in_the_user_admins_inline_is_audited_and_returns_the_held_task(
    held, ana, admin, browser_for
):
    from accounts.models import AuditEvent

    link = WorkerSkill.objects.get(worker=ana)
    client = browser_for(admin)
    url = f"/admin/accounts/user/{ana.pk}/change/"
    data = _admin_form_data(client, url)
    data.update({
        "worker_skills-TOTAL_FORMS": "1", "worker_skills-INITIAL_FORMS": "1",
        "worker_skills-MIN_NUM_FORMS": "0", "worker_skills-MAX_NUM_FORMS": "1000",
        "worker_skills-0-id": str(link.pk), "worker_skills-0-worker": str(ana.pk),
        "worker_skills-0-skill": str(held.skill_id), "worker_skills-0-proficiency": "3",
        "worker_skills-0-DELETE": "on", "_save": "Save"})
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert not WorkerSkill.objects.filter(worker=ana).exists()
    assert AuditEvent.objects.filter(action="skill_removed", subject=ana.email,
                                     actor_id=admin.pk).exists()
    _assert_returned(held, because="no longer holds invoice-review", actor=admin)


def test_deactivating_a_worker_in_the_user_admin_returns_the_held_task(
    held, ana, admin, browser_for
):
    link = WorkerSkill.objects.get(worker=ana)
    client = browser_for(admin)
    url = f"/admin/accounts/user/{ana.pk}/change/"
    data = _admin_form_data(client, url)
    data.pop("is_active", None)
    data.update({
        "worker_skills-TOTAL_FORMS": "1", "worker_skills-INITIAL_FORMS": "1",
        "worker_skills-MIN_NUM_FORMS": "0", "worker_skills-MAX_NUM_FORMS": "1000",
        "worker_skills-0-id": str(link.pk), "worker_skills-0-worker": str(ana.pk),
        "worker_skills-0-skill": str(held.skill_id), "worker_skills-0-proficiency": "3",
        "_save": "Save"})
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:3000]
    assert WorkerSkill.objects.filter(worker=ana).exists()
    _assert_returned(held, because="is deactivated", actor=admin)

