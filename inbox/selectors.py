"""Reads of tasks, and the one selector that decides who may see or act on a task."""

from typing import Literal

from django.core.exceptions import ValidationError
from django.db.models import Count, Min, Q, QuerySet

from accounts.models import User, WorkerSkill
from accounts.roles import Role
from accounts.selectors import user_roles
from config.errors import Conflict, InboxError, NotFound
from inbox.models import HELD_STATES, OPEN_STATES, Task, TaskEvent, TaskState
from processes.forms import Form
from processes.selectors import form_for

Action = Literal["view", "manage"]


def visible_tasks(*, user: User) -> QuerySet[Task]:
    """Return the tasks the user may see: admins all, others those of skills they hold."""
    roles = user_roles(user=user)
    if Role.ADMIN in roles:
        return Task.objects.all()
    if not roles:
        return Task.objects.none()
    held_skills = WorkerSkill.objects.filter(worker=user).values("skill_id")
    return Task.objects.filter(Q(skill_id__in=held_skills) | Q(assignee=user))


def access_task(*, user: User, task_id: object, action: Action = "view") -> Task:
    """Return the task if the user may see it (view) or supervise it (manage); else NotFound.

    Permission only: a task the user may not see is NotFound (404), never a hint that it
    exists. Whether they may act on it now (hold it, its state) is the transition's rule
    (inbox.lifecycle: a Conflict, 409).
    """
    try:
        task = visible_tasks(user=user).select_related("skill", "assignee").get(pk=task_id)
    except (Task.DoesNotExist, ValidationError, ValueError, TypeError):
        # A malformed id is as unknown as a missing one.
        raise NotFound("No such task.") from None
    if action == "view":
        return task
    if action == "manage":
        roles = user_roles(user=user)
        if Role.ADMIN in roles or Role.SUPERVISOR in roles:
            return task
        raise NotFound("No such task.")
    raise ValueError(f"unknown action {action!r}")


def eligibility_problem(*, user: User, task: Task) -> str | None:
    """Return why the user may not take the task, or None when they may."""
    if Role.WORKER not in user_roles(user=user):
        return "Only workers take tasks (a supervisor who also works needs the worker role)."
    proficiency = (
        WorkerSkill.objects.filter(worker=user, skill_id=task.skill_id)
        .values_list("proficiency", flat=True).first()
    )
    if proficiency is None:
        return f"You do not hold the skill {task.skill.slug}."
    if proficiency < task.min_proficiency:
        return (f"This task needs {task.skill.slug} at proficiency {task.min_proficiency}; "
                f"you hold {proficiency}.")
    if excluded_by_separation(user=user, task=task):
        return ("Separation of duties: you worked on an earlier stage of this process "
                f"({', '.join(task.exclude_workers_of)}).")
    return None


def excluded_by_separation(*, user: User, task: Task) -> bool:
    """Return whether the user worked a stage of this execution the task excludes."""
    if not task.exclude_workers_of:
        return False
    return Task.objects.filter(
        execution_arn=task.execution_arn, stage__in=task.exclude_workers_of, assignee=user
    ).exists()


def worker_load(*, user: User) -> int:
    """Return how many tasks the worker holds (offered or in progress)."""
    return Task.objects.filter(assignee=user, state__in=HELD_STATES).count()


def worker_lock(*, user: User) -> User:
    """Lock the worker's row in the open transaction and return it fresh.

    The lock queues up everything that may add to one worker's load (their own takes, an
    offer, a reassign to them), so a capacity checked after it still holds at commit.
    """
    return User.objects.select_for_update().get(pk=user.pk)


def capacity_check(*, user: User) -> None:
    """Raise Conflict if the worker holds as many tasks as their capacity allows."""
    held = worker_load(user=user)
    if held >= user.capacity:
        raise Conflict(
            f"You hold {held} task(s), your capacity is {user.capacity}: finish or release "
            "one first."
        )


class UnknownForm(InboxError):
    status = 500
    code = "unknown_form"


def task_form(*, task: Task) -> Form:
    """Return the form of the task's stage; raise if the process no longer defines it."""
    form = form_for(process_name=task.process_name, process_version=task.process_version,
                    form_name=task.form)
    if form is None:
        raise UnknownForm(
            f"The form {task.form!r} of {task.process_name} v{task.process_version} is not "
            "known here; deploy that process version."
        )
    return form


def my_tasks(*, user: User) -> QuerySet[Task]:
    """Return the tasks the user holds or is offered, oldest deadline first."""
    return (
        Task.objects.filter(assignee=user, state__in=HELD_STATES)
        .select_related("skill").order_by("work_deadline", "offer_deadline", "created_at")
    )


def my_queues(*, user: User) -> list[dict]:
    """Return the user's skills with their queued count and oldest waiting task."""
    links = list(WorkerSkill.objects.filter(worker=user).select_related("skill")
                 .order_by("skill__slug"))
    stats = {
        row["skill_id"]: row
        for row in Task.objects.filter(state=TaskState.QUEUED,
                                       skill_id__in=[link.skill_id for link in links])
        .values("skill_id").annotate(waiting=Count("id"), oldest=Min("created_at"))
    }
    return [
        {
            "skill": link.skill.slug,
            "name": link.skill.name,
            "dispatch": link.skill.dispatch,
            "proficiency": link.proficiency,
            "waiting": stats.get(link.skill_id, {}).get("waiting", 0),
            "oldest": stats.get(link.skill_id, {}).get("oldest"),
        }
        for link in links
    ]


def task_history(*, task: Task) -> QuerySet[TaskEvent]:
    return task.events.order_by("version")


def open_tasks_of_execution(*, execution_arn: str) -> QuerySet[Task]:
    return Task.objects.filter(execution_arn=execution_arn, state__in=OPEN_STATES)

