"""The audit log: access changes are written once each, with who did it, and never edited."""

import logging

import pytest
from django.db import DatabaseError, connection, transaction

from accounts.models import AuditAction, AuditEvent
from accounts.roles import Role
from accounts.services import skill_ensure, user_set_roles, worker_skill_remove, worker_skill_set


@pytest.fixture
def review(db):
    return skill_ensure(slug="invoice-review", name="Invoice review")


def _entries(action):
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def test_granting_changing_and_removing_a_skill_writes_one_entry_each(make_user, admin, review):
    ana = make_user(email="ana@example.com")
    worker_skill_set(worker=ana, skill=review, proficiency=2, actor=admin)
    worker_skill_set(worker=ana, skill=review, proficiency=2, actor=admin)  # no change
    worker_skill_set(worker=ana, skill=review, proficiency=4, actor=admin)
    assert worker_skill_remove(worker=ana, skill=review, actor=admin)
    assert not worker_skill_remove(worker=ana, skill=review, actor=admin)  # held none

    granted, = _entries(AuditAction.SKILL_GRANTED)
    changed, = _entries(AuditAction.SKILL_CHANGED)
    removed, = _entries(AuditAction.SKILL_REMOVED)
    assert (granted.actor_email, granted.subject, granted.detail) == (
        "root@example.com", "ana@example.com",
        {"skill": "invoice-review", "before": None, "after": 2})
    assert changed.detail == {"skill": "invoice-review", "before": 2, "after": 4}
    assert (removed.actor_id, removed.detail) == (admin.pk, {"skill": "invoice-review"})


def test_a_role_change_records_the_roles_before_and_after(make_user, admin):
    ana = make_user(email="ana@example.com", roles=(Role.WORKER,))
    user_set_roles(user=ana, roles=[Role.WORKER, Role.SUPERVISOR], actor=admin)
    user_set_roles(user=ana, roles=[Role.WORKER, Role.SUPERVISOR], actor=admin)  # no change
    entry = _entries(AuditAction.ROLES_CHANGED)[-1]
    assert entry.detail == {"before": ["worker"], "after": ["supervisor", "worker"]}
    assert entry.actor_email == "root@example.com"
    assert len([e for e in _entries(AuditAction.ROLES_CHANGED) if e.actor_id == admin.pk]) == 1


def test_every_entry_goes_to_the_audit_logger(make_user, admin, review, caplog):
    ana = make_user(email="ana@example.com")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="inbox.audit"):
        worker_skill_set(worker=ana, skill=review, proficiency=3, actor=admin)
    line, = [r.getMessage() for r in caplog.records if r.name == "inbox.audit"]
    assert line.startswith("audit skill_granted actor=root@example.com subject=ana@example.com")
    assert "skill=invoice-review" in line


def test_the_database_refuses_to_edit_or_delete_an_entry(make_user, admin, review):
    if connection.vendor != "postgresql":
        pytest.skip("the append-only trigger is PostgreSQL's (CI runs it)")
    worker_skill_set(worker=make_user(), skill=review, proficiency=3, actor=admin)
    entry = AuditEvent.objects.get(action=AuditAction.SKILL_GRANTED)
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=entry.pk).update(subject="someone else")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.objects.filter(pk=entry.pk).delete()
    assert AuditEvent.objects.get(pk=entry.pk).subject == entry.subject
