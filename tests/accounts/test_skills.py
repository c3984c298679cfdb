import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.db import IntegrityError, transaction

from accounts.models import Availability, User, WorkerSkill
from accounts.roles import Role, roles_sync
from accounts.selectors import skill_workers, user_has_role, user_roles, worker_skills
from accounts.services import (
    skill_ensure,
    user_set_roles,
    worker_set_availability,
    worker_set_capacity,
    worker_skill_remove,
    worker_skill_set,
)
from config.errors import InboxError
from tests.concurrency import race


@pytest.fixture
def review(db):
    return skill_ensure(slug="invoice-review", name="Invoice review")


@pytest.fixture
def approval(db):
    return skill_ensure(slug="finance-approval", name="Finance approval")


def test_skills_and_proficiency_are_assigned_and_read_back(make_user, review, approval):
    ana = make_user()
    worker_skill_set(worker=ana, skill=review, proficiency=4)
    worker_skill_set(worker=ana, skill=approval, proficiency=2)
    assert [(link.skill.slug, link.proficiency) for link in worker_skills(worker=ana)] == [
        ("finance-approval", 2),
        ("invoice-review", 4),
    ]


def test_setting_a_skill_again_changes_the_proficiency_without_a_second_row(make_user, review):
    ana = make_user()
    worker_skill_set(worker=ana, skill=review, proficiency=1)
    worker_skill_set(worker=ana, skill=review, proficiency=5)
    assert WorkerSkill.objects.get(worker=ana, skill=review).proficiency == 5
    assert WorkerSkill.objects.filter(worker=ana).count() == 1


@pytest.mark.parametrize("proficiency", [0, 6, -1])
def test_proficiency_outside_1_to_5_is_refused(make_user, review, proficiency):
    with pytest.raises(InboxError, match=f"from 1 to 5, not {proficiency}"):
        worker_skill_set(worker=make_user(), skill=review, proficiency=proficiency)


def test_the_database_refuses_proficiency_outside_1_to_5(make_user, review):
    link = worker_skill_set(worker=make_user(), skill=review, proficiency=3)
    with pytest.raises(IntegrityError), transaction.atomic():
        WorkerSkill.objects.filter(pk=link.pk).update(proficiency=6)


def test_skill_workers_filters_by_minimum_proficiency(make_user, review):
    novice, expert = make_user(), make_user()
    worker_skill_set(worker=novice, skill=review, proficiency=2)
    worker_skill_set(worker=expert, skill=review, proficiency=5)
    assert list(skill_workers(skill=review, min_proficiency=3)) == [expert]
    assert set(skill_workers(skill=review)) == {novice, expert}


def test_removing_a_skill(make_user, review):
    ana = make_user()
    worker_skill_set(worker=ana, skill=review, proficiency=3)
    assert worker_skill_remove(worker=ana, skill=review) is True
    assert worker_skill_remove(worker=ana, skill=review) is False
    assert not worker_skills(worker=ana).exists()


def test_availability_and_capacity(make_user):
    ana = make_user()
    assert (ana.availability, ana.capacity) == (Availability.AVAILABLE, 3)
    worker_set_availability(worker=ana, availability=Availability.AWAY)
    worker_set_capacity(worker=ana, capacity=7)
    ana.refresh_from_db()
    assert (ana.availability, ana.capacity) == (Availability.AWAY, 7)
    with pytest.raises(InboxError, match="Capacity must be from 0 to 100, not 101"):
        worker_set_capacity(worker=ana, capacity=101)


def test_roles_are_groups_with_their_permissions(db):
    roles_sync()
    assert set(Group.objects.values_list("name", flat=True)) >= {"worker", "supervisor", "admin"}
    worker = Group.objects.get(name="worker").permissions.values_list("codename", flat=True)
    admin = Group.objects.get(name="admin").permissions.values_list("codename", flat=True)
    assert "work_tasks" in worker and "change_workerskill" not in worker
    assert {"change_workerskill", "add_skill", "change_user"} <= set(admin)


def test_roles_decide_staff_access(make_user):
    user = make_user(roles=(Role.WORKER,))
    assert user_roles(user=user) == {Role.WORKER} and not user.is_staff
    user_set_roles(user=user, roles=[Role.ADMIN, Role.SUPERVISOR])
    user.refresh_from_db()
    assert user_roles(user=user) == {Role.ADMIN, Role.SUPERVISOR}
    assert user.is_staff and user.has_perm("accounts.change_workerskill")
    user_set_roles(user=user, roles=[Role.SUPERVISOR])
    user = User.objects.get(pk=user.pk)
    assert not user.is_staff and user_has_role(user=user, role=Role.SUPERVISOR)
    assert not user.has_perm("accounts.change_workerskill")


def test_admin_grants_a_skill_through_the_admin_pages(client, make_user, review):
    admin, ben = make_user(roles=(Role.ADMIN,)), make_user()
    client.force_login(admin)
    response = client.post(
        "/admin/accounts/workerskill/add/",
        {"worker": ben.pk, "skill": review.pk, "proficiency": 4},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    assert WorkerSkill.objects.get(worker=ben, skill=review).proficiency == 4


def test_admin_page_refuses_proficiency_outside_1_to_5(client, make_user, review):
    admin, ben = make_user(roles=(Role.ADMIN,)), make_user()
    client.force_login(admin)
    response = client.post(
        "/admin/accounts/workerskill/add/",
        {"worker": ben.pk, "skill": review.pk, "proficiency": 9},
    )
    assert response.status_code == 200
    assert "less than or equal to 5" in response.content.decode()
    assert not WorkerSkill.objects.exists()


def test_admin_invites_a_user_by_email(client, make_user):
    admin = make_user(roles=(Role.ADMIN,))
    invited = User.objects.create_user(email="new@example.com", password=None)
    client.force_login(admin)
    client.post(
        "/admin/accounts/user/",
        {"action": "send_invitation", "_selected_action": [invited.pk]},
    )
    assert [message.to for message in mail.outbox] == [["new@example.com"]]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_concurrent_grants_of_one_skill_leave_one_row(make_user, review):
    """Eight threads grant the same skill at once; exactly one row remains, no errors."""
    ana = make_user()

    def grant(level: int) -> None:
        worker_skill_set(worker=ana, skill=review, proficiency=level)

    _, errors = race(grant, [1 + i % 5 for i in range(8)])
    assert errors == []
    assert WorkerSkill.objects.filter(worker=ana, skill=review).count() == 1
