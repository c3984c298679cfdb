"""The audit log page for admins (/team/audit/), the read-only audit admin, and role changes
made in the Django admin going through the audited service."""

import re

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from accounts.audit import audit_record
from accounts.models import AuditAction, AuditEvent
from accounts.roles import Role
from accounts.views import AUDIT_PAGE_SIZE


def signed_in_as(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize("role", [Role.WORKER, Role.SUPERVISOR])
def test_the_audit_log_does_not_exist_for_workers_and_supervisors(make_user, role):
    assert signed_in_as(make_user(roles=(role,))).get("/team/audit/").status_code == 404


def test_signed_out_visitors_are_sent_to_sign_in(client, db):
    response = client.get("/team/audit/")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_log_lists_who_did_what_to_whom_from_where_newest_first(admin, make_user, rf):
    ana = make_user(email="ana@example.com")
    request = rf.get("/", REMOTE_ADDR="198.51.100.4")
    audit_record(action=AuditAction.SIGN_IN_FAILED, subject="ana@example.com",
                 request=request)
    audit_record(action=AuditAction.SKILL_GRANTED, actor=admin, subject=ana.email,
                 skill="invoice-review", before=None, after=3)
    client = signed_in_as(admin)

    page = client.get("/team/audit/").content.decode()
    rows = re.findall(r"<tr data-audit>(.*?)</tr>", page, re.S)
    assert "Signed in" in rows[0]  # the admin's own sign-in, newest
    granted = next(row for row in rows if "Skill granted" in row)
    assert "root@example.com" in granted and "ana@example.com" in granted
    assert "skill=invoice-review" in granted and "after=3" in granted and "before=none" in granted
    failed = next(row for row in rows if "Sign-in failed" in row)
    assert "ana@example.com" in failed and "198.51.100.4" in failed
    assert rows.index(granted) < rows.index(failed)


def test_the_log_filters_by_action_and_by_a_users_email(admin, make_user):
    ana = make_user(email="ana@example.com")
    make_user(email="bo@example.com")
    audit_record(action=AuditAction.SIGN_IN, actor=ana, subject=ana.email)
    client = signed_in_as(admin)

    by_action = client.get("/team/audit/", {"action": "user_created"}).content.decode()
    assert by_action.count("<tr data-audit>") == 3  # root, ana, bo
    assert "Signed in" not in re.sub(r"<select.*?</select>", "", by_action, flags=re.S)
    by_user = client.get("/team/audit/", {"email": "ANA@example.com "}).content.decode()
    assert by_user.count("<tr data-audit>") == 3  # created, roles, signed in
    assert "bo@example.com" not in by_user
    as_actor = client.get("/team/audit/", {"email": "root@example.com",
                                           "action": "sign_in"}).content.decode()
    assert as_actor.count("<tr data-audit>") == 1  # the admin's own force_login


def test_the_log_pages_by_keyset_and_refuses_a_bad_cursor_or_action(admin):
    for index in range(AUDIT_PAGE_SIZE + 3):
        audit_record(action=AuditAction.TOKEN_REFUSED, subject=f"token-{index:03}")
    client = signed_in_as(admin)

    first = client.get("/team/audit/", {"action": "token_refused"}).content.decode()
    assert first.count("<tr data-audit>") == AUDIT_PAGE_SIZE
    assert f"token-{AUDIT_PAGE_SIZE + 2:03}" in first and "token-000" not in first
    next_url = re.search(r'href="([^"]+)" rel="next"', first).group(1).replace("&amp;", "&")
    assert "action=token_refused" in next_url
    second = client.get(next_url).content.decode()
    assert second.count("<tr data-audit>") == 3 and "token-000" in second
    assert 'rel="next"' not in second

    for query in ({"before": "12abc"}, {"before": "9" * 40}, {"action": "nothing"},
                  {"email": "x" * 300}):
        response = client.get("/team/audit/", query)
        assert response.status_code == 400, query
        assert "is not" in response.content.decode()


def test_the_log_page_is_linked_for_admins_and_has_no_inline_script_or_style(admin):
    client = signed_in_as(admin)
    page = client.get("/team/audit/").content.decode()
    assert '<a href="/team/audit/" aria-current="page">Audit log</a>' in page
    assert 'href="/team/audit/"' in client.get("/team/skills/").content.decode()
    assert "<script>" not in page and "style=" not in page and "<style" not in page
    assert '<label for="audit-action">' in page and '<label for="audit-email">' in page


def test_the_audit_admin_is_read_only(admin, make_user):
    make_user(email="ana@example.com")
    client = signed_in_as(admin)
    listing = client.get("/admin/accounts/auditevent/")
    assert listing.status_code == 200 and "ana@example.com" in listing.content.decode()
    entry = AuditEvent.objects.first()
    assert client.get("/admin/accounts/auditevent/add/").status_code == 403
    before = AuditEvent.objects.count()
    client.post(f"/admin/accounts/auditevent/{entry.pk}/change/", {"subject": "someone"})
    client.post(f"/admin/accounts/auditevent/{entry.pk}/delete/", {"post": "yes"})
    assert AuditEvent.objects.count() == before
    entry.refresh_from_db()
    assert entry.subject != "someone"


def _change_form_data(response) -> dict:
    """Return what the admin's change form would post unchanged (its fields' values)."""
    data: dict = {}
    forms = [response.context["adminform"].form]
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        forms.extend(formset.forms)
        data.update({formset.management_form[name].html_name:
                     formset.management_form[name].value()
                     for name in formset.management_form.fields})
    for form in forms:
        for field in form:
            value = field.value()
            if field.widget_type.endswith("splitdatetime"):
                if value:
                    data[f"{field.html_name}_0"] = value.strftime("%Y-%m-%d")
                    data[f"{field.html_name}_1"] = value.strftime("%H:%M:%S")
            elif field.widget_type == "checkbox":
                if value:
                    data[field.html_name] = "on"
            elif value is not None:
                data[field.html_name] = value
    return data


def test_a_role_change_in_the_django_admin_goes_through_the_audited_service(
    admin, make_user
):
    ana = make_user(email="ana@example.com", roles=(Role.WORKER,))
    client = signed_in_as(admin)
    path = f"/admin/accounts/user/{ana.pk}/change/"
    data = _change_form_data(client.get(path))
    data["groups"] = [str(g.pk) for g in Group.objects.filter(
        name__in=[Role.WORKER.value, Role.SUPERVISOR.value])]

    response = client.post(path, data)
    assert response.status_code == 302, response.context["adminform"].form.errors
    entry = AuditEvent.objects.filter(action=AuditAction.ROLES_CHANGED,
                                      subject=ana.email).latest("id")
    assert (entry.actor_id, entry.detail) == (
        admin.pk, {"before": ["worker"], "after": ["supervisor", "worker"]})
    assert set(ana.groups.values_list("name", flat=True)) == {"supervisor", "worker"}

    data["groups"] = [str(Group.objects.get(name=Role.ADMIN.value).pk)]
    client.post(path, data)
    ana.refresh_from_db()
    assert ana.is_staff  # the service keeps is_staff with the admin role
    assert AuditEvent.objects.filter(action=AuditAction.ROLES_CHANGED,
                                     subject=ana.email, actor_id=admin.pk).count() == 2
