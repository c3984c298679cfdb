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
    PeerVisibility,
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


# The settings of a skill an admin may change after creating it (the slug stays: process
# specs and envelopes in flight name the skill by it).
SKILL_SETTINGS = ("name", "description", "dispatch", "peer_visibility", "weight")


def skill_create(*, slug: str, name: str, description: str = "",
                 dispatch: Dispatch = Dispatch.PULL,
                 peer_visibility: PeerVisibility = PeerVisibility.OWN, weight: int = 1,
                 actor: User | None = None, request: HttpRequest | None = None) -> Skill:
    """Create a skill (audited); refuse a slug another skill has."""
    with transaction.atomic():
        if Skill.objects.filter(slug=slug).exists():
            raise InboxError(f"A skill with the slug {slug!r} exists already.")
        skill = Skill.objects.create(slug=slug, name=name, description=description,
                                     dispatch=Dispatch(dispatch),
                                     peer_visibility=PeerVisibility(peer_visibility),
                                     weight=weight)
        audit_record(action=AuditAction.SKILL_CREATED, actor=actor, subject=skill.slug,
                     request=request, name=name, dispatch=skill.dispatch,
                     peer_visibility=skill.peer_visibility, weight=weight)
    return skill


def skill_update(*, skill: Skill, actor: User | None = None,
                 request: HttpRequest | None = None, **settings: str) -> list[str]:
    """Change the skill's settings (SKILL_SETTINGS) to the values given; return the names of
    those that changed, each audited with its value before and after in one entry."""
    unknown = sorted(set(settings) - set(SKILL_SETTINGS))
    if unknown:
        raise InboxError(f"Not a setting of a skill: {', '.join(unknown)}.")
    if "dispatch" in settings:
        settings["dispatch"] = Dispatch(settings["dispatch"])
    if "peer_visibility" in settings:
        settings["peer_visibility"] = PeerVisibility(settings["peer_visibility"])
    with transaction.atomic():
        # Locked: two admins saving the same skill at once each record what they changed
        # from the value the other left, not from the same stale one.
        current = Skill.objects.select_for_update().get(pk=skill.pk)
        changed = [name for name, value in settings.items() if getattr(current, name) != value]
        if not changed:
            return []
        before = {name: getattr(current, name) for name in changed}
        for name in changed:
            setattr(current, name, settings[name])
            setattr(skill, name, settings[name])
        current.save(update_fields=changed)
        audit_record(action=AuditAction.SKILL_EDITED, actor=actor, subject=skill.slug,
                     request=request, changed=changed,
                     **{f"{name}_before": before[name] for name in changed},
                     **{name: settings[name] for name in changed})
    return changed


def worker_skill_set(*, worker: User, skill: Skill, proficiency: int,
                     actor: User | None = None, request: HttpRequest | None = None,
                     bulk: bool = False) -> WorkerSkill:
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
                before=before, after=proficiency, **({"bulk": True} if bulk else {}),
            )
    return link


def worker_skills_grant(*, workers: Iterable[User], skill: Skill, proficiency: int,
                         actor: User | None = None,
                         request: HttpRequest | None = None) -> dict[User, int | None]:
    """Grant the skill at this proficiency to every worker, all or none (one transaction).

    Each worker's grant is worker_skill_set's (one audit entry per worker whose proficiency
    changes, marked bulk). Return {worker: proficiency before (None: not held)}.
    """
    if not PROFICIENCY_MIN <= proficiency <= PROFICIENCY_MAX:
        raise InboxError(
            f"Proficiency must be from {PROFICIENCY_MIN} to {PROFICIENCY_MAX}, not {proficiency}."
        )
    workers = list(workers)
    if not workers:
        raise InboxError("Select at least one worker to grant the skill to.")
    with transaction.atomic():
        before = dict(WorkerSkill.objects.filter(worker__in=workers, skill=skill)
                      .values_list("worker_id", "proficiency"))
        for worker in workers:
            worker_skill_set(worker=worker, skill=skill, proficiency=proficiency,
                             actor=actor, request=request, bulk=True)
    return {worker: before.get(worker.pk) for worker in workers}


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


def worker_set_capacity(*, worker: User, capacity: int, actor: User | None = None,
                        request: HttpRequest | None = None) -> None:
    """Set the most tasks the worker may hold at once (audited when it changes)."""
    if not 0 <= capacity <= 100:
        raise InboxError(f"Capacity must be from 0 to 100, not {capacity}.")
    before = worker.capacity
    with transaction.atomic():
        worker.capacity = capacity
        worker.save(update_fields=["capacity"])
        if before != capacity:
            audit_record(action=AuditAction.CAPACITY_CHANGED, actor=actor,
                         subject=worker.email, request=request, before=before,
                         after=capacity)
