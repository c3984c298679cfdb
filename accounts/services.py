"""Writes for users, roles and skills. Views, admin and commands call these."""

from collections.abc import Iterable

from django.contrib.auth.models import Group
from django.db import transaction
from django.http import HttpRequest

from accounts.audit import audit_record
from accounts.models import (
    PROFICIENCY_MAX,
    PROFICIENCY_MIN,
    AuditAction,
    Availability,
    Dispatch,
    Skill,
    User,
    WorkerSkill,
)
from accounts.roles import Role
from accounts.selectors import ROLES_CACHE
from config.errors import InboxError


def user_create(
    *,
    email: str,
    password: str | None,
    roles: Iterable[Role] = (),
    first_name: str = "",
    last_name: str = "",
    actor: User | None = None,
    request: HttpRequest | None = None,
) -> User:
    """Create a user with the given roles; no password means they must be invited."""
    with transaction.atomic():
        user = User.objects.create_user(
            email=email, password=password, first_name=first_name, last_name=last_name
        )
        audit_record(action=AuditAction.USER_CREATED, actor=actor, subject=user.email,
                     request=request)
        user_set_roles(user=user, roles=roles, actor=actor, request=request)
    return user


def user_set_roles(*, user: User, roles: Iterable[Role], actor: User | None = None,
                   request: HttpRequest | None = None) -> None:
    """Make the user's role groups exactly roles (audited); admins get the admin site."""
    wanted = {Role(role) for role in roles}
    before = set(
        user.groups.filter(name__in=Role.values).values_list("name", flat=True)
    ) if user.pk else set()
    groups = list(Group.objects.filter(name__in=[role.value for role in wanted]))
    if len(groups) != len(wanted):
        missing = sorted({role.value for role in wanted} - {group.name for group in groups})
        raise InboxError(f"Role groups {missing} do not exist; run migrate.")
    with transaction.atomic():
        user.groups.remove(*Group.objects.filter(name__in=Role.values))
        user.groups.add(*groups)
        user.__dict__.pop(ROLES_CACHE, None)  # user_roles must read the new groups
        is_staff = Role.ADMIN in wanted or user.is_superuser
        if user.is_staff != is_staff:
            user.is_staff = is_staff
            user.save(update_fields=["is_staff"])
        after = {role.value for role in wanted}
        if after != before:
            audit_record(action=AuditAction.ROLES_CHANGED, actor=actor, subject=user.email,
                         request=request, before=before, after=after)


def skill_ensure(*, slug: str, name: str, description: str = "",
                 dispatch: Dispatch = Dispatch.PULL) -> Skill:
    """Return the skill with this slug, creating it (with its dispatch mode) if needed."""
    skill, _ = Skill.objects.get_or_create(
        slug=slug, defaults={"name": name, "description": description, "dispatch": dispatch}
    )
    return skill


def worker_skill_set(*, worker: User, skill: Skill, proficiency: int,
                     actor: User | None = None,
                     request: HttpRequest | None = None) -> WorkerSkill:
    """Grant the skill to the worker at this proficiency, or change it (audited)."""
    if not PROFICIENCY_MIN <= proficiency <= PROFICIENCY_MAX:
        raise InboxError(
            f"Proficiency must be from {PROFICIENCY_MIN} to {PROFICIENCY_MAX}, not {proficiency}."
        )
    # update_or_create locks the existing row, and on a concurrent first insert
    # the unique constraint makes the loser re-read instead of adding a second row.
    with transaction.atomic():
        before = (WorkerSkill.objects.filter(worker=worker, skill=skill)
                  .values_list("proficiency", flat=True).first())
        link, _ = WorkerSkill.objects.update_or_create(
            worker=worker, skill=skill, defaults={"proficiency": proficiency}
        )
        if before != proficiency:
            audit_record(
                action=AuditAction.SKILL_GRANTED if before is None else AuditAction.SKILL_CHANGED,
                actor=actor, subject=worker.email, request=request, skill=skill.slug,
                before=before, after=proficiency,
            )
    return link


def worker_skill_remove(*, worker: User, skill: Skill, actor: User | None = None,
                        request: HttpRequest | None = None) -> bool:
    """Take the skill away from the worker (audited); return whether they held it."""
    with transaction.atomic():
        deleted, _ = WorkerSkill.objects.filter(worker=worker, skill=skill).delete()
        if deleted:
            audit_record(action=AuditAction.SKILL_REMOVED, actor=actor, subject=worker.email,
                         request=request, skill=skill.slug)
    return deleted > 0


def worker_set_availability(*, worker: User, availability: Availability,
                            actor: User | None = None,
                            request: HttpRequest | None = None) -> int:
    """Mark the worker available for new offers and assignments, or away (audited).

    Going away gives back the offers they hold: each goes to its queue and on to the next
    worker (inbox.services.presence); work in progress stays theirs. Coming back, the
    queued push tasks are offered again after commit. Return how many offers went back.
    A change to the state already held changes nothing and is not audited.
    """
    # Inbox builds on accounts: its presence service is imported when used, not at load.
    from inbox.services.presence import offers_withdraw, presence_after_commit

    availability = Availability(availability)
    with transaction.atomic():
        # The worker's row lock, which dispatch and a reassign take before giving them a
        # task: an offer made before this commits is given back here; after, they are away.
        locked = User.objects.select_for_update().get(pk=worker.pk)
        before = locked.availability
        worker.availability = availability
        if before == availability:
            return 0
        locked.availability = availability
        locked.save(update_fields=["availability"])
        audit_record(action=AuditAction.AVAILABILITY_CHANGED, actor=actor,
                     subject=locked.email, request=request, before=before, after=availability)
        withdrawn = 0
        if availability == Availability.AWAY:
            withdrawn = offers_withdraw(worker=locked, actor=actor)
        presence_after_commit(availability=availability)
    return withdrawn


def worker_set_capacity(*, worker: User, capacity: int) -> None:
    """Set the most tasks the worker may hold at once."""
    if not 0 <= capacity <= 100:
        raise InboxError(f"Capacity must be from 0 to 100, not {capacity}.")
    worker.capacity = capacity
    worker.save(update_fields=["capacity"])
