import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.models import Availability, Skill, User, WorkerSkill
from accounts.roles import Role
from accounts.services import worker_skill_set
from accounts.views import PAGE_SIZE
from tests.pages import help_keys


@pytest.fixture
def ana(make_worker, review_skill, approval_skill):
    return make_worker({"invoice-review": 2}, email="ana@example.com")


def held(worker: User) -> dict[str, int]:
    return dict(WorkerSkill.objects.filter(worker=worker)
                .values_list("skill__slug", "proficiency"))


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def row_post(**values: str) -> dict[str, str]:
    """A whole row as the page posts it: every skill, availability and capacity."""
    row = {"skill-finance-approval": "", "skill-invoice-review": "2",
           "availability": "available", "capacity": "3"}
    row.update(values)
    return row


# Who sees the pages ------------------------------------------------------------------------


@pytest.mark.parametrize("role", [Role.WORKER, Role.SUPERVISOR])
def test_the_team_pages_do_not_exist_for_workers_and_supervisors(
    role, make_user, ana, browser_for
):
    client = browser_for(make_user(roles=(role,)))
    assert client.get("/team/skills/").status_code == 404
    response = client.post(f"/team/skills/{ana.pk}/", row_post(**{"skill-invoice-review": "5"}))
    assert response.status_code == 404
    assert held(ana) == {"invoice-review": 2}


def test_signed_out_visitors_are_sent_to_sign_in(client, ana):
    response = client.get("/team/skills/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_matrix_shows_workers_by_email_and_skills_with_proficiency(
    admin, ana, make_worker, browser_for
):
    make_worker({"finance-approval": 5}, email="bo@example.com")
    page = browser_for(admin).get("/team/skills/")
    assert page.status_code == 200
    rows = page.context["rows"]
    assert [row.worker.email for row in rows] == ["ana@example.com", "bo@example.com"]
    assert [[cell.value for cell in row.cells] for row in rows] == [["", "2"], ["5", ""]]
    html = page.content.decode()
    assert 'aria-label="Invoice review of ana@example.com"' in html
    assert "accounts/team.js" in html  # the script of these pages, and only these
    assert "accounts/team.js" not in browser_for(ana).get("/").content.decode()


def test_the_team_pages_link_to_each_other(admin, browser_for):
    """The skills page and the audit log are the accounts app's; intake errors and processes
    are their apps'."""
    client = browser_for(admin)
    pages = ["/team/skills/", "/team/skills/settings/", "/team/intake/", "/team/processes/",
             "/team/audit/"]
    for path in pages:
        html = client.get(path).content.decode()
        nav = re.search(r'<nav class="team-nav".*?</nav>', html, re.S).group(0)
        assert re.findall(r'href="([^"]+)"', nav) == pages, path
        assert nav.count('aria-current="page"') == 1, path


# Edits ---------------------------------------------------------------------------------------


def test_an_admin_grants_changes_and_removes_skills_and_reads_them_back(
    admin, ana, browser_for
):
    client = browser_for(admin)
    response = client.post(f"/team/skills/{ana.pk}/", row_post(
        **{"skill-finance-approval": "4", "focus": "skill-finance-approval"}), follow=True)
    assert held(ana) == {"finance-approval": 4, "invoice-review": 2}
    assert messages_of(response) == ["Saved ana@example.com: Finance approval 4."]
    html = response.content.decode()
    assert re.search(r'id="c-\d+-skill-finance-approval"[^>]* autofocus', html)
    assert [cell.value for cell in response.context["rows"][0].cells] == ["4", "2"]

    response = client.post(f"/team/skills/{ana.pk}/", row_post(
        **{"skill-finance-approval": "4", "skill-invoice-review": "5"}), follow=True)
    assert messages_of(response) == ["Saved ana@example.com: Invoice review 5."]
    assert held(ana) == {"finance-approval": 4, "invoice-review": 5}
    response = client.post(f"/team/skills/{ana.pk}/", row_post(
        **{"skill-finance-approval": "", "skill-invoice-review": "5"}), follow=True)
    assert held(ana) == {"invoice-review": 5}
    assert messages_of(response) == ["Saved ana@example.com: Finance approval removed."]


def test_an_admin_sets_availability_and_capacity(admin, ana, browser_for):
    client = browser_for(admin)
    response = client.post(f"/team/skills/{ana.pk}/",
                           row_post(availability="away", capacity="7"), follow=True)
    ana.refresh_from_db()
    assert (ana.availability, ana.capacity) == (Availability.AWAY, 7)
    assert messages_of(response) == ["Saved ana@example.com: away, capacity 7."]
    row = response.context["rows"][0]
    assert (row.availability, row.capacity) == ("away", "7")
    response = client.post(f"/team/skills/{ana.pk}/",
                           row_post(availability="away", capacity="7"), follow=True)
    assert messages_of(response) == ["Nothing changed for ana@example.com."]


@pytest.mark.parametrize(("field", "value", "error"), [
    ("capacity", "101", "Capacity must be a whole number from 0 to 100."),
    ("capacity", "-1", "Capacity must be a whole number from 0 to 100."),
    ("capacity", "lots", "Capacity must be a whole number from 0 to 100."),
    ("availability", "asleep", "Choose available or away."),
    ("skill-invoice-review", "6", "Proficiency must be from 1 to 5."),
    ("skill-invoice-review", "0", "Proficiency must be from 1 to 5."),
])
def test_a_bad_value_is_refused_at_its_cell_and_nothing_changes(
    field, value, error, admin, ana, browser_for
):
    """The good values posted with the bad one are not saved either."""
    response = browser_for(admin).post(f"/team/skills/{ana.pk}/", row_post(
        **{"skill-finance-approval": "3", field: value}))
    assert response.status_code == 400
    html = response.content.decode()
    assert (f'<p class="field-error" id="c-{ana.pk}-{field}-error">{error}</p>') in html
    assert re.search(rf'id="c-{ana.pk}-{field}"[^>]* aria-invalid="true" '
                     rf'aria-describedby="c-{ana.pk}-{field}-error"[^>]* autofocus', html)
    assert messages_of(response) == [f"Nothing saved for ana@example.com: {error}"]
    ana.refresh_from_db()
    assert held(ana) == {"invoice-review": 2}
    assert (ana.availability, ana.capacity) == (Availability.AVAILABLE, 3)


@pytest.mark.parametrize(("field", "value", "error"), [
    ("skill-invoice-review", "03", "Proficiency must be from 1 to 5."),
    ("skill-invoice-review", "3.0", "Proficiency must be from 1 to 5."),
    ("capacity", "7.0", "Capacity must be a whole number from 0 to 100."),
    ("capacity", "", "Capacity must be a whole number from 0 to 100."),
    ("availability", "", "Choose available or away."),
    ("availability", " away", "Choose available or away."),
])
def test_only_the_values_the_page_offers_are_taken(field, value, error, admin, ana, browser_for):
    """A hand-made post is read as strictly as the page's own (spaces around aside)."""
    response = browser_for(admin).post(f"/team/skills/{ana.pk}/", row_post(**{field: value}))
    assert response.status_code == 400
    assert messages_of(response) == [f"Nothing saved for ana@example.com: {error}"]
    assert held(ana) == {"invoice-review": 2}


def test_spaces_around_a_value_are_ignored_and_fields_not_posted_are_left_alone(
    admin, ana, browser_for
):
    client = browser_for(admin)
    response = client.post(f"/team/skills/{ana.pk}/", {"skill-finance-approval": " 4 ",
                                                       "capacity": " 7 "}, follow=True)
    assert messages_of(response) == ["Saved ana@example.com: Finance approval 4, capacity 7."]
    ana.refresh_from_db()
    assert held(ana) == {"finance-approval": 4, "invoice-review": 2}
    assert (ana.availability, ana.capacity) == (Availability.AVAILABLE, 7)


def test_every_bad_value_of_a_row_is_named_in_the_order_of_the_row(admin, ana, browser_for):
    response = browser_for(admin).post(f"/team/skills/{ana.pk}/", row_post(**{
        "skill-finance-approval": " 9 ", "skill-invoice-review": "3",
        "availability": "asleep", "capacity": "lots"}))
    assert response.status_code == 400
    assert messages_of(response) == [
        "Nothing saved for ana@example.com: Proficiency must be from 1 to 5.; "
        "Choose available or away.; Capacity must be a whole number from 0 to 100."]
    row = response.context["rows"][0]
    assert [(cell.value, cell.error) for cell in row.cells] == [
        ("9", "Proficiency must be from 1 to 5."), ("3", "")]  # as posted, spaces aside
    assert (row.availability, row.capacity, row.focus) == (
        "asleep", "lots", "skill-finance-approval")
    assert held(ana) == {"invoice-review": 2}


def test_every_post_needs_the_csrf_token(admin, ana, browser_for):
    client = browser_for(admin, enforce_csrf_checks=True)
    data = row_post(**{"skill-invoice-review": "5"}, capacity="9")
    assert client.post(f"/team/skills/{ana.pk}/", data).status_code == 403
    assert held(ana) == {"invoice-review": 2}
    page = client.get("/team/skills/").content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    response = client.post(f"/team/skills/{ana.pk}/", {**data, "csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert held(ana) == {"invoice-review": 5}


# Pages and queries --------------------------------------------------------------------------


def queries_of(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert client.get(path).status_code == 200
    return len(queries)


def make_workers(make_worker, count: int, start: int = 0) -> None:
    skills = list(Skill.objects.order_by("slug"))
    for number in range(start, start + count):
        worker = make_worker(email=f"w{number:04d}@example.com")
        worker_skill_set(worker=worker, skill=skills[number % len(skills)],
                         proficiency=1 + number % 5)


def test_the_skills_page_uses_the_same_queries_for_5_and_50_workers(
    admin, make_worker, review_skill, approval_skill, browser_for,
    django_assert_max_num_queries
):
    client = browser_for(admin)
    make_workers(make_worker, 5)
    small = queries_of(client, "/team/skills/")
    make_workers(make_worker, 45, start=5)
    with django_assert_max_num_queries(8):
        large = queries_of(client, "/team/skills/")
    assert large == small


def test_more_than_a_page_of_workers_goes_on_by_keyset(
    admin, make_worker, review_skill, browser_for
):
    make_workers(make_worker, PAGE_SIZE + 3)
    client = browser_for(admin)
    first = client.get("/team/skills/")
    emails = [row.worker.email for row in first.context["rows"]]
    assert len(emails) == PAGE_SIZE and emails[0] == "w0000@example.com"
    assert first.context["next_after"] == emails[-1]
    second = client.get("/team/skills/", {"after": emails[-1]})
    assert [row.worker.email for row in second.context["rows"]] == [
        f"w{number:04d}@example.com" for number in range(PAGE_SIZE, PAGE_SIZE + 3)]
    assert second.context["next_after"] == ""


# The help overlay ---------------------------------------------------------------------------


def test_the_help_lists_only_the_team_pages_own_shortcuts(admin, browser_for):
    client = browser_for(admin)
    everywhere = {"?", "Esc"}
    assert help_keys(client.get("/team/skills/").content.decode()) == everywhere | {
        "←", "→", "↑", "↓", "Home", "End", "Enter", "z", "Ctrl", "Z", "Space", "/", "Tab"}
