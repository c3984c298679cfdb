"""The admin's own pages for skills: create and edit a skill, save one cell of the matrix
(JSON for the grid's script, a plain form without it), undo, search and bulk grant; each
change audited, each refusal saying what and where and keeping what was typed."""

import re
import time

import pytest

from accounts import services, sessions
from accounts.models import AuditAction, AuditEvent, Dispatch, PeerVisibility, Skill, WorkerSkill
from accounts.roles import Role
from config.errors import InboxError

JSON = {"HTTP_ACCEPT": "application/json"}


@pytest.fixture
def ana(make_worker, review_skill, approval_skill):
    return make_worker({"invoice-review": 2}, email="ana@example.com")


@pytest.fixture
def bo(make_worker, review_skill, approval_skill):
    return make_worker({"finance-approval": 5}, email="bo@example.com")


def held(worker) -> dict[str, int]:
    return dict(WorkerSkill.objects.filter(worker=worker)
                .values_list("skill__slug", "proficiency"))


def entries(action: AuditAction) -> list[AuditEvent]:
    """The entries of changes someone made (the fixtures' own grants have no actor)."""
    return list(AuditEvent.objects.filter(action=action, actor_id__isnull=False)
                .order_by("pk"))


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


NEW = {"slug": "tax-check", "name": "Tax check", "description": "VAT numbers",
       "dispatch": "pull", "peer_visibility": "own", "weight": "1"}


# Who may -----------------------------------------------------------------------------------


@pytest.mark.parametrize("role", [Role.WORKER, Role.SUPERVISOR])
def test_the_skill_pages_do_not_exist_for_workers_and_supervisors(
    role, make_user, ana, bo, browser_for
):
    client = browser_for(make_user(roles=(role,)))
    for path in ["/team/skills/settings/", "/team/skills/settings/new/",
                 "/team/skills/settings/invoice-review/edit/"]:
        assert client.get(path).status_code == 404, path
    assert client.post("/team/skills/settings/new/", NEW).status_code == 404
    assert client.post("/team/skills/settings/invoice-review/edit/",
                       {**NEW, "dispatch": "push"}).status_code == 404
    assert client.post("/team/skills/grant/", {"worker": [ana.pk, bo.pk],
                                               "skill": "finance-approval",
                                               "proficiency": "5"}).status_code == 404
    assert client.post(f"/team/skills/{ana.pk}/", {"skill-invoice-review": "5"},
                       **JSON).status_code == 404
    assert not Skill.objects.filter(slug="tax-check").exists()
    assert Skill.objects.get(slug="invoice-review").dispatch == Dispatch.PULL
    assert held(ana) == {"invoice-review": 2} and held(bo) == {"finance-approval": 5}
    assert not AuditEvent.objects.filter(actor_id__isnull=False, action__in=[
        AuditAction.SKILL_CREATED, AuditAction.SKILL_EDITED, AuditAction.SKILL_GRANTED,
        AuditAction.SKILL_CHANGED]).exists()


def test_signed_out_visitors_are_sent_to_sign_in(client, review_skill):
    for path in ["/team/skills/settings/", "/team/skills/settings/new/",
                 "/team/skills/settings/invoice-review/edit/"]:
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"].startswith("/accounts/login/")


@pytest.mark.parametrize(("path", "fields"), [
    ("/team/skills/settings/new/", NEW),
    ("/team/skills/settings/invoice-review/edit/", {**NEW, "dispatch": "push"}),
    ("/team/skills/grant/", {"skill": "invoice-review", "proficiency": "5"}),
])
def test_a_skill_change_long_after_sign_in_asks_for_the_password_first(
    path, fields, admin, ana, browser_for, settings
):
    client = browser_for(admin)
    session = client.session
    session[sessions.AUTHENTICATED_AT] = (time.time()
                                          - settings.ACCOUNT_REAUTHENTICATION_TIMEOUT - 1)
    session.save()
    response = client.post(path, {"worker": [ana.pk], **fields})
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/reauthenticate/")
    assert not Skill.objects.filter(slug="tax-check").exists()
    assert Skill.objects.get(slug="invoice-review").dispatch == Dispatch.PULL
    assert held(ana) == {"invoice-review": 2}


# Creating and editing a skill ----------------------------------------------------------------


def test_an_admin_creates_a_skill_and_it_is_listed_and_audited(admin, browser_for):
    client = browser_for(admin)
    form = client.get("/team/skills/settings/new/")
    assert form.status_code == 200
    assert 'name="slug"' in form.content.decode()
    response = client.post("/team/skills/settings/new/", {**NEW, "dispatch": "push"})
    assert response.status_code == 302
    assert response["Location"] == "/team/skills/settings/?skill=tax-check"
    skill = Skill.objects.get(slug="tax-check")
    assert (skill.name, skill.description, skill.dispatch, skill.peer_visibility) == (
        "Tax check", "VAT numbers", Dispatch.PUSH, PeerVisibility.OWN)
    entry, = entries(AuditAction.SKILL_CREATED)
    assert (entry.actor_email, entry.subject) == (admin.email, "tax-check")
    assert entry.detail == {"name": "Tax check", "dispatch": "push", "peer_visibility": "own",
                            "weight": 1}
    listing = client.get(response["Location"])
    html = listing.content.decode()
    assert messages_of(listing) == ["Created the skill Tax check (tax-check), push. Grant it "
                                    "to workers on the Skills page."]
    assert 'href="/team/skills/settings/tax-check/edit/"' in html


@pytest.mark.parametrize(("slug", "error"), [
    ("Tax Check", "Use lowercase letters, digits and hyphens"),
    ("9-tax", "Use lowercase letters, digits and hyphens"),
    ("", "Give the skill a slug"),
    ("invoice-review", "A skill with this slug exists already"),
])
def test_a_bad_slug_is_refused_at_its_field_and_what_was_typed_stays(
    slug, error, admin, review_skill, browser_for
):
    client = browser_for(admin)
    response = client.post("/team/skills/settings/new/",
                           {**NEW, "slug": slug, "name": "Tax check, typed"})
    assert response.status_code == 400
    html = response.content.decode()
    assert error in response.context["form"].errors["slug"][0]
    assert 'id="id_slug-error"' in html and 'aria-invalid="true"' in html
    assert f'value="{slug}"' in html and 'value="Tax check, typed"' in html
    assert messages_of(response)[0].startswith("Nothing saved: Slug: ")
    assert Skill.objects.count() == 1
    assert not entries(AuditAction.SKILL_CREATED)


def test_an_admin_sets_a_skill_to_push_and_edits_it_and_each_change_is_audited(
    admin, review_skill, browser_for
):
    client = browser_for(admin)
    path = "/team/skills/settings/invoice-review/edit/"
    page = client.get(path)
    assert page.status_code == 200
    assert 'name="slug"' not in page.content.decode()  # the slug stays
    fields = {"name": review_skill.name, "description": "", "dispatch": "push",
              "peer_visibility": "own", "weight": "1", "slug": "renamed"}
    response = client.post(path, fields)
    assert response.status_code == 302
    review_skill.refresh_from_db()
    assert (review_skill.slug, review_skill.dispatch) == ("invoice-review", Dispatch.PUSH)
    entry, = entries(AuditAction.SKILL_EDITED)
    assert entry.subject == "invoice-review"
    assert entry.detail == {"changed": ["dispatch"], "dispatch_before": "pull",
                            "dispatch": "push"}

    client.post(path, {**fields, "name": "Invoices", "peer_visibility": "team"})
    review_skill.refresh_from_db()
    assert (review_skill.name, review_skill.peer_visibility) == ("Invoices", "team")
    assert entries(AuditAction.SKILL_EDITED)[-1].detail["changed"] == ["name",
                                                                      "peer_visibility"]

    # The weight: what one task of the skill uses of a worker's capacity.
    client.post(path, {**fields, "name": "Invoices", "peer_visibility": "team", "weight": "2"})
    review_skill.refresh_from_db()
    assert review_skill.weight == 2
    assert entries(AuditAction.SKILL_EDITED)[-1].detail == {
        "changed": ["weight"], "weight_before": 1, "weight": 2}
    refused = client.post(path, {**fields, "weight": "0"})
    assert refused.status_code == 400
    assert refused.context["form"].errors == {"weight": ["The weight is at least 1."]}
    client.post(path, {**fields, "name": "Invoices", "peer_visibility": "team", "weight": "1"})

    same = client.post(path, {**fields, "name": "Invoices", "peer_visibility": "team"},
                       follow=True)
    assert "Nothing changed for Invoices (invoice-review)." in messages_of(same)
    assert len(entries(AuditAction.SKILL_EDITED)) == 4


def test_a_bad_setting_is_refused_and_the_other_values_typed_stay(
    admin, review_skill, browser_for
):
    client = browser_for(admin)
    response = client.post("/team/skills/settings/invoice-review/edit/",
                           {"name": "", "description": "typed text", "dispatch": "sideways",
                            "peer_visibility": "team", "weight": "1"})
    assert response.status_code == 400
    assert response.context["form"].errors == {
        "name": ["Give the skill a name, e.g. Invoice review."],
        "dispatch": ["Choose pull or push."]}
    html = response.content.decode()
    assert ">typed text</textarea>" in html
    assert 'value="team" checked' in html
    assert messages_of(response) == [
        "Nothing saved: Name: Give the skill a name, e.g. Invoice review. "
        "Dispatch: Choose pull or push."]
    review_skill.refresh_from_db()
    assert (review_skill.name, review_skill.dispatch) == ("Invoice review", Dispatch.PULL)
    assert not entries(AuditAction.SKILL_EDITED)


def test_an_unknown_skill_has_no_settings_page(admin, browser_for):
    assert browser_for(admin).get("/team/skills/settings/nope/edit/").status_code == 404


# One cell of the matrix, and undo ------------------------------------------------------------


def test_one_cell_posted_for_json_is_saved_alone_and_answers_how_to_undo_it(
    admin, ana, browser_for
):
    client = browser_for(admin)
    response = client.post(f"/team/skills/{ana.pk}/", {"skill-invoice-review": "4"}, **JSON)
    assert response.status_code == 200
    assert response.json() == {
        "message": "Saved ana@example.com: Invoice review 4.",
        "saved": {"skill-invoice-review": "4"},
        "undo": {"skill-invoice-review": "2"},
        "undo_label": "Invoice review of ana@example.com back to 2",
    }
    assert held(ana) == {"invoice-review": 4}
    ana.refresh_from_db()
    assert (ana.availability, ana.capacity) == ("available", 3)  # not posted: left alone
    undone = client.post(f"/team/skills/{ana.pk}/", response.json()["undo"], **JSON)
    assert undone.json()["undo"] == {"skill-invoice-review": "4"}
    assert held(ana) == {"invoice-review": 2}
    assert [(e.detail["before"], e.detail["after"]) for e in
            entries(AuditAction.SKILL_CHANGED)] == [(2, 4), (4, 2)]

    granted = client.post(f"/team/skills/{ana.pk}/", {"skill-finance-approval": "1"}, **JSON)
    assert granted.json()["undo"] == {"skill-finance-approval": ""}
    assert "back to not held" in granted.json()["undo_label"]
    client.post(f"/team/skills/{ana.pk}/", granted.json()["undo"], **JSON)
    assert held(ana) == {"invoice-review": 2}
    assert len(entries(AuditAction.SKILL_GRANTED)) == 1
    assert len(entries(AuditAction.SKILL_REMOVED)) == 1


def test_a_bad_cell_posted_for_json_says_what_and_where_and_changes_nothing(
    admin, ana, browser_for
):
    client = browser_for(admin)
    response = client.post(f"/team/skills/{ana.pk}/", {"capacity": "101"}, **JSON)
    assert response.status_code == 400
    assert response.json() == {
        "message": "Nothing saved for ana@example.com: Capacity must be a whole number "
                   "from 0 to 100.",
        "errors": {"capacity": "Capacity must be a whole number from 0 to 100."},
    }
    ana.refresh_from_db()
    assert ana.capacity == 3


def test_without_javascript_the_page_offers_to_undo_the_last_row_saved(
    admin, ana, browser_for
):
    client = browser_for(admin)
    client.post(f"/team/skills/{ana.pk}/", {"skill-invoice-review": "5", "capacity": "7",
                                             "availability": "available"})
    page = client.get("/team/skills/")
    html = page.content.decode()
    assert page.context["undo"] == {
        "worker": ana.pk, "fields": {"skill-invoice-review": "2", "capacity": "3"},
        "label": "Invoice review of ana@example.com back to 2; "
                 "Capacity of ana@example.com back to 3"}
    assert f'action="/team/skills/{ana.pk}/" class="undo-bar"' in html
    assert '<input type="hidden" name="skill-invoice-review" value="2">' in html
    client.post(f"/team/skills/{ana.pk}/", page.context["undo"]["fields"])
    ana.refresh_from_db()
    assert (held(ana), ana.capacity) == ({"invoice-review": 2}, 3)
    assert client.get("/team/skills/").context["undo"] == {
        "worker": ana.pk, "fields": {"skill-invoice-review": "5", "capacity": "7"},
        "label": "Invoice review of ana@example.com back to 5; "
                 "Capacity of ana@example.com back to 7"}
    assert client.get("/team/skills/").context["undo"] is None  # shown once


def test_capacity_and_availability_set_on_the_matrix_are_audited(admin, ana, browser_for):
    client = browser_for(admin)
    client.post(f"/team/skills/{ana.pk}/", {"capacity": "6"}, **JSON)
    client.post(f"/team/skills/{ana.pk}/", {"availability": "away"}, **JSON)
    client.post(f"/team/skills/{ana.pk}/", {"availability": "away", "capacity": "6"}, **JSON)
    capacity, = entries(AuditAction.CAPACITY_CHANGED)
    availability, = entries(AuditAction.AVAILABILITY_CHANGED)
    assert (capacity.actor_email, capacity.subject, capacity.detail) == (
        admin.email, ana.email, {"before": 3, "after": 6})
    assert (availability.subject, availability.detail) == (
        ana.email, {"before": "available", "after": "away"})


# Search ---------------------------------------------------------------------------------------


def test_the_search_shows_only_workers_whose_email_or_name_holds_it(
    admin, ana, bo, make_worker, browser_for
):
    carla = make_worker(email="carla@example.com")
    carla.first_name = "Bonita"
    carla.save()
    client = browser_for(admin)
    page = client.get("/team/skills/", {"q": " BO "})
    assert [row.worker.email for row in page.context["rows"]] == [
        "bo@example.com", "carla@example.com"]
    assert 'value="BO"' in page.content.decode()
    nothing = client.get("/team/skills/", {"q": "zed"})
    assert nothing.context["rows"] == []
    assert "No worker\u2019s e-mail or name holds “zed”." in nothing.content.decode()
    assert client.get("/team/skills/", {"q": "x" * 255}).status_code == 400


def test_a_row_saved_from_a_search_comes_back_to_the_same_search(admin, ana, bo, browser_for):
    response = browser_for(admin).post(f"/team/skills/{bo.pk}/",
                                       {"capacity": "5", "q": "bo", "focus": "capacity"})
    assert response["Location"] == f"/team/skills/?q=bo&worker={bo.pk}&field=capacity"


# Bulk grant -----------------------------------------------------------------------------------


def test_a_bulk_grant_gives_every_worker_selected_the_skill_each_audited(
    admin, ana, bo, browser_for
):
    client = browser_for(admin)
    response = client.post("/team/skills/grant/", {
        "worker": [ana.pk, bo.pk], "skill": "finance-approval", "proficiency": "5", "q": "o"})
    assert response.status_code == 302
    assert response["Location"] == "/team/skills/?q=o"
    assert held(ana) == {"invoice-review": 2, "finance-approval": 5}
    assert held(bo) == {"finance-approval": 5}
    page = client.get(response["Location"])
    assert messages_of(page) == ["Granted Finance approval at 5 to 1 worker(s): "
                                 "ana@example.com. 1 held it at 5 already."]
    entry, = entries(AuditAction.SKILL_GRANTED)
    assert (entry.actor_email, entry.subject) == (admin.email, ana.email)
    assert entry.detail == {"skill": "finance-approval", "before": None, "after": 5,
                            "bulk": True}

    client.post("/team/skills/grant/",
                {"worker": [ana.pk, bo.pk], "skill": "finance-approval", "proficiency": "3"})
    assert [(e.subject, e.detail["before"], e.detail["after"])
            for e in entries(AuditAction.SKILL_CHANGED)] == [
        ("ana@example.com", 5, 3), ("bo@example.com", 5, 3)]


@pytest.mark.parametrize(("fields", "where", "error"), [
    ({"skill": "finance-approval", "proficiency": "4"}, "worker",
     "Select at least one worker (the boxes in the first column)."),
    ({"worker": "ANA", "skill": "finance-approval", "proficiency": "4"}, "worker",
     "A worker selected is not one of the matrix's."),
    ({"worker": "ANA", "skill": "nope", "proficiency": "4"}, "skill",
     "That skill does not exist (any more): reload the page."),
    ({"worker": "ANA", "skill": "finance-approval", "proficiency": "9"}, "proficiency",
     "Proficiency must be from 1 to 5."),
])
def test_a_bad_bulk_grant_grants_nothing_and_keeps_the_choices(
    fields, where, error, admin, ana, bo, browser_for
):
    client = browser_for(admin)
    posted = {**fields}
    if posted.get("worker") == "ANA":
        posted["worker"] = [ana.pk, bo.pk] if where != "worker" else ["ana"]
    response = client.post("/team/skills/grant/", posted)
    assert response.status_code == 400
    assert response.context["bulk_problems"][where] == error
    assert messages_of(response) == [f"Nothing granted: {error}"]
    html = response.content.decode()
    assert f'id="bulk-{where}-error"' in html
    focused = re.findall(r'<(?:input|select) (?:[^>]* )?id="([^"]+)"[^>]* autofocus', html)
    assert focused == [f"pick-{ana.pk}" if where == "worker" else f"bulk-{where}"]
    if where != "worker":
        # The workers checked stay checked; the proficiency typed stays in its field.
        assert [row.selected for row in response.context["rows"]] == [True, True]
        assert f'<option value="{posted["proficiency"]}" selected>' in html
    assert held(ana) == {"invoice-review": 2} and held(bo) == {"finance-approval": 5}
    assert not entries(AuditAction.SKILL_GRANTED)


def test_a_bulk_grant_is_all_or_nothing(ana, bo, approval_skill, monkeypatch):
    """The second worker's grant fails (patched: no real fault makes one fail alone):
    the first worker's grant and its audit entry are rolled back with it."""
    real = services.worker_skill_set

    def second_fails(*, worker, **kwargs):
        if worker == bo:
            raise InboxError("injected")
        return real(worker=worker, **kwargs)

    monkeypatch.setattr(services, "worker_skill_set", second_fails)
    with pytest.raises(InboxError):
        services.worker_skills_grant(workers=[ana, bo], skill=approval_skill, proficiency=4)
    assert held(ana) == {"invoice-review": 2}
    assert not entries(AuditAction.SKILL_GRANTED)


def test_a_bulk_grant_lowering_a_proficiency_returns_tasks_no_longer_allowed(
    admin, make_worker, make_task, browser_for
):
    from inbox.models import TaskState
    from inbox.services.worker import task_take_next

    dee = make_worker({"invoice-review": 5}, email="dee@example.com")
    task = make_task(title="Hard one", minProficiency=4)
    task_take_next(worker=dee)
    task.refresh_from_db()
    assert task.assignee == dee
    response = browser_for(admin).post("/team/skills/grant/", {
        "worker": [dee.pk], "skill": "invoice-review", "proficiency": "2"}, follow=True)
    task.refresh_from_db()
    assert (task.state, task.assignee) == (TaskState.QUEUED, None)
    assert ("1 held task(s) of dee@example.com went back to their queues: the skills saved "
            "no longer allow them.") in messages_of(response)


# What a skill made on the page does --------------------------------------------------------


def test_a_skill_created_on_the_page_receives_tasks_and_a_push_switch_offers_them(
    admin, make_task, make_worker, browser_for
):
    """Intake takes an envelope naming the new slug; switched to push, the queued task is
    offered by the dispatcher's beat round (dispatch_pending), as DECISIONS.md says."""
    from inbox.models import TaskState
    from inbox.services.dispatcher import dispatch_pending

    client = browser_for(admin)
    client.post("/team/skills/settings/new/", NEW)
    dee = make_worker({"tax-check": 3}, email="dee@example.com")
    task = make_task(skill="tax-check", title="Check VAT")
    assert (task.skill.slug, task.state) == ("tax-check", TaskState.QUEUED)
    assert dispatch_pending() == 0  # pull: nothing is offered
    client.post("/team/skills/settings/tax-check/edit/", {**NEW, "dispatch": "push"})
    assert dispatch_pending() == 1
    task.refresh_from_db()
    assert (task.state, task.assignee) == (TaskState.OFFERED, dee)


def test_skills_saved_in_djangos_admin_go_through_the_services_and_are_audited(
    admin, browser_for
):
    client = browser_for(admin)
    inline = {"worker_skills-TOTAL_FORMS": "0", "worker_skills-INITIAL_FORMS": "0"}
    response = client.post("/admin/accounts/skill/add/",
                           {"slug": "tax", "name": "Tax", "dispatch": "pull",
                            "peer_visibility": "own", "weight": "1", **inline})
    assert response.status_code == 302
    skill = Skill.objects.get(slug="tax")
    created, = entries(AuditAction.SKILL_CREATED)
    assert (created.actor_email, created.subject) == (admin.email, "tax")
    response = client.post(f"/admin/accounts/skill/{skill.pk}/change/",
                           {"slug": "renamed", "name": "Tax", "dispatch": "push",
                            "peer_visibility": "own", "weight": "3", **inline})
    assert response.status_code == 302
    skill.refresh_from_db()
    assert (skill.slug, skill.dispatch, skill.weight) == ("tax", Dispatch.PUSH, 3)
    edited, = entries(AuditAction.SKILL_EDITED)
    assert edited.actor_email == admin.email
    assert edited.detail == {"changed": ["dispatch", "weight"], "dispatch_before": "pull",
                             "weight_before": 1, "dispatch": "push", "weight": 3}
