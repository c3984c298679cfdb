"""Reads for users, roles and skills."""

from collections.abc import Iterable

from django.db.models import Q, QuerySet

from accounts.models import AuditEvent, Skill, User, WorkerSkill
from accounts.roles import Role


def user_roles(*, user: User) -> set[Role]:
    """Return the roles the user holds (a superuser holds all of them).

    Remembered on the user object: a request asks several times (navigation, the view,
    access checks) and roles change only through user_set_roles, which forgets them.
    """
    if not user.is_authenticated:
        return set()
    if user.is_superuser:
        return set(Role)
    cached = getattr(user, ROLES_CACHE, None)
    if cached is None:
        names = user.groups.filter(name__in=Role.values).values_list("name", flat=True)
        cached = frozenset(Role(name) for name in names)
        setattr(user, ROLES_CACHE, cached)
    return set(cached)


ROLES_CACHE = "_inbox_roles"


def roles_remember(*, user: User, roles: Iterable[Role]) -> None:
    """Remember on user the roles a hot path read with the user (an API token's sign-in
    reads them in the token's query), so user_roles asks no query of its own."""
    setattr(user, ROLES_CACHE, frozenset(roles))


def user_has_role(*, user: User, role: Role) -> bool:
    """Return whether the user holds the role."""
    return role in user_roles(user=user)


def worker_skills(*, worker: User) -> QuerySet[WorkerSkill]:
    """Return the worker's skills with their proficiency, by skill slug."""
    return WorkerSkill.objects.filter(worker=worker).select_related("skill").order_by("skill__slug")


def skill_workers(*, skill: Skill, min_proficiency: int = 1) -> QuerySet[User]:
    """Return active workers holding the skill at min_proficiency or better."""
    return User.objects.filter(
        is_active=True,
        worker_skills__skill=skill,
        worker_skills__proficiency__gte=min_proficiency,
    ).order_by("email")


def team_members() -> QuerySet[User]:
    """Return the active workers and supervisors: the people of the skills matrix."""
    return User.objects.filter(
        is_active=True, groups__name__in=[Role.WORKER.value, Role.SUPERVISOR.value]
    ).distinct()


def team_workers(*, after: str = "", limit: int = 100, query: str = "") -> list[User]:
    """Return up to limit active workers and supervisors by email, after the given email;
    with a query, only those whose e-mail or name contains it (case-insensitive).

    Keyset pagination: a page costs the same however many workers come before it.
    """
    workers = team_members()
    if query:
        workers = workers.filter(Q(email__icontains=query) | Q(first_name__icontains=query)
                                 | Q(last_name__icontains=query))
    if after:
        workers = workers.filter(email__gt=after)
    return list(workers.order_by("email")[:limit])


def team_proficiencies(*, workers: list[User]) -> dict[tuple[int, int], int]:
    """Return {(worker id, skill id): proficiency} for the given workers, in one query."""
    links = WorkerSkill.objects.filter(worker__in=workers).values_list(
        "worker_id", "skill_id", "proficiency"
    )
    return {(worker_id, skill_id): proficiency for worker_id, skill_id, proficiency in links}


def audit_entries(*, action: str = "", email: str = "", before: int | None = None,
                  limit: int = 50) -> list[AuditEvent]:
    """Return up to limit audit entries, newest first, older than the entry id before.

    action: only that action; email: only entries where that user acted or was acted on
    (case-insensitive). Keyset pagination by id: a page costs the same however deep.
    """
    entries = AuditEvent.objects.all()
    if action:
        entries = entries.filter(action=action)
    if email:
        entries = entries.filter(Q(actor_email__iexact=email) | Q(subject__iexact=email))
    if before is not None:
        entries = entries.filter(pk__lt=before)
    return list(entries.order_by("-pk")[:limit])
