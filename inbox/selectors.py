"""Reads of tasks, and the one selector that decides who may see or act on a task."""

import datetime
import functools
import operator
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Count, Exists, Min, OuterRef, Q, QuerySet, Sum, TextField
from django.db.models.expressions import RawSQL
from django.utils import timezone

from accounts.models import PeerVisibility, User, WorkerSkill
from accounts.roles import Role
from accounts.selectors import user_roles
from config.compiled import CompiledRead
from config.errors import Conflict, InboxError, NotFound
from inbox.eligibility import ACCESS, Reason, over_capacity, worker_verdict
from inbox.history import HistoryText, history_json_sql
from inbox.models import (
    HELD_STATES,
    OPEN_STATES,
    Outbox,
    OutboxKind,
    OutboxStatus,
    Task,
    TaskEvent,
    TaskState,
)
from processes.forms import Form
from processes.selectors import form_for

Action = Literal["view", "manage"]


@dataclass(frozen=True)
class Visibility:
    """Which tasks one user may see, by their current roles and skills.

    The one description of the policy, in two forms side by side: ``tasks`` is the SQL
    condition every read filters by (visible_tasks, access_task; the skills as subqueries,
    so a read costs one query), ``sees`` the same rules asked of one task in Python, over
    the skills read once (``loaded``), for the live stream's audience. A test walks users
    and tasks of every kind and checks that both agree.

    - an admin sees every task;
    - a supervisor sees every task of the skills they hold (what they supervise);
    - a worker sees the queued tasks of their skills at or below their proficiency (what
      they may take), the tasks they hold now, and the tasks they decided (a decided task
      keeps its assignee) of skills they still hold; of a skill whose peer_visibility is
      "team", every task, read-only. A task given back (released, declined, timed out,
      returned) is no longer theirs: they see it again only as anyone in its queue does.
    - an inactive user, or one without a role, sees nothing.
    """

    user_id: int | None
    everything: bool = False
    supervisor: bool = False
    worker: bool = False
    # {skill id: (proficiency, peer visibility)}, read by loaded(); None until then.
    skills: Mapping[int, tuple[int, str]] | None = None

    def tasks(self) -> Q | None:
        """Return the condition on Task of what the user sees (None: nothing)."""
        held = WorkerSkill.objects.filter(worker_id=self.user_id).values("skill_id")
        parts = []
        if self.supervisor:
            parts.append(Q(skill_id__in=held))
        if self.worker:
            parts.append(Q(assignee_id=self.user_id, state__in=HELD_STATES))
        if self.worker and not self.supervisor:  # a supervisor sees all of these already
            parts += [
                Q(skill_id__in=held.filter(skill__peer_visibility=PeerVisibility.TEAM)),
                Q(assignee_id=self.user_id, skill_id__in=held),
                Q(Exists(WorkerSkill.objects.filter(
                    worker_id=self.user_id, skill_id=OuterRef("skill_id"),
                    proficiency__gte=OuterRef("min_proficiency"))), state=TaskState.QUEUED),
            ]
        return functools.reduce(operator.or_, parts) if parts else None

    def managed(self) -> Q | None:
        """Return the condition on Task of what the user manages (None: nothing)."""
        if self.everything:
            return Q()
        if self.supervisor:
            return Q(skill_id__in=WorkerSkill.objects.filter(worker_id=self.user_id)
                     .values("skill_id"))
        return None

    def loaded(self) -> "Visibility":
        """Return this visibility with the user's skills read, as sees() needs them."""
        links = WorkerSkill.objects.filter(worker_id=self.user_id).values_list(
            "skill_id", "proficiency", "skill__peer_visibility")
        return replace(self, skills={skill_id: (proficiency, seen)
                                     for skill_id, proficiency, seen in links})

    def sees(self, *, skill_id: int, min_proficiency: int, state: str,
             assignee_id: int | None) -> bool:
        """Return whether the user sees a task with these attributes (as tasks() says)."""
        if self.everything:
            return True
        if self.skills is None:
            raise RuntimeError("Visibility.sees needs the user's skills: call loaded().")
        link = self.skills.get(skill_id)
        if self.supervisor and link is not None:
            return True
        if not self.worker:
            return False
        mine = assignee_id is not None and assignee_id == self.user_id
        if mine and state in HELD_STATES:
            return True
        if link is None:
            return False
        proficiency, seen = link
        return (seen == PeerVisibility.TEAM or mine
                or (state == TaskState.QUEUED and min_proficiency <= proficiency))


def visibility_for(*, user: User) -> Visibility:
    """Return what the user may see now: their current roles (skills are read by the SQL)."""
    roles = user_roles(user=user) if user.is_active else set()
    return Visibility(user_id=user.pk, everything=Role.ADMIN in roles,
                      supervisor=Role.SUPERVISOR in roles, worker=Role.WORKER in roles)


def visible_tasks(*, user: User) -> QuerySet[Task]:
    """Return the tasks the user may see (the policy: Visibility)."""
    return _filtered(visibility_for(user=user), view=True)


def _filtered(visibility: Visibility, *, view: bool) -> QuerySet[Task]:
    if visibility.everything:
        return Task.objects.all()
    condition = visibility.tasks() if view else visibility.managed()
    return Task.objects.filter(condition) if condition is not None else Task.objects.none()


def access_task(*, user: User, task_id: object, action: Action = "view",
                history: bool = False) -> Task:
    """Return the task if the user may see it (view) or supervise it (manage); else NotFound.

    Permission only: a task the user may not see is NotFound (404), never a hint that it
    exists. Whether they may act on it now (hold it, its state, still eligible) is the
    transition's rule (inbox.lifecycle: a Conflict, 409). Manage: an admin, or a
    supervisor of the task's skill (every task they manage they also see).

    history: the caller will show the task's history (the API's answers). On PostgreSQL
    it is read in the same statement, as JSON text made into events only when read
    (task_history answers it; a transition applied to this very read adds its own event,
    inbox.lifecycle). Elsewhere task_history queries it.
    """
    if action not in ("view", "manage"):
        raise ValueError(f"unknown action {action!r}")
    visibility = visibility_for(user=user)
    with_history = history and connection.vendor == "postgresql"
    # The read's shape: which of the policy's conditions apply (every request of a task
    # runs it; its SQL is compiled once per shape, config.compiled).
    shape = (visibility.everything, visibility.supervisor, visibility.worker, action,
             with_history)
    try:
        found = _ACCESS_READ.run(shape, user_id=user.pk, task_id=task_id)
    except (ValidationError, ValueError, TypeError):
        # A malformed id is as unknown as a missing one.
        raise NotFound("No such task.") from None
    if not found:
        raise NotFound("No such task.")
    task = found[0]
    task.proficiency_of = user.pk  # Whose proficiency actor_proficiency is.
    if with_history:
        task.events_read = HistoryText(task.__dict__.pop("history_text"), task_id=task.pk,
                                       alias=connection.alias)
    return task


def _access_query(shape: tuple[bool, bool, bool, Action, bool], *, user_id: int,
                  task_id: object) -> QuerySet[Task]:
    """Build access_task's read for one shape of the policy (user_id, task_id: bound)."""
    everything, supervisor, worker, action, history = shape
    visibility = Visibility(user_id=user_id, everything=everything, supervisor=supervisor,
                            worker=worker)
    read = _filtered(visibility, view=action == "view").select_related(
        "skill", "assignee").annotate(
        # What hold_problem asks of the user, read with the task (no second query).
        actor_proficiency=WorkerSkill.objects.filter(
            worker_id=user_id, skill_id=OuterRef("skill_id")
        ).order_by().values("proficiency")[:1],
    ).filter(pk=task_id)
    if history:
        # The history in the same statement (a model's own table and column, no input).
        task_id_column = f'"{Task._meta.db_table}"."{Task._meta.pk.column}"'
        read = read.annotate(history_text=RawSQL(  # noqa: S611 (no value in the text)
            history_json_sql(task_id_column), [], output_field=TextField()))
    return read


_ACCESS_READ = CompiledRead(_access_query, user_id=User._meta.pk, task_id=Task._meta.pk)


def _access_gap(*, user: User, task: Task) -> tuple[str, int | None] | None:
    """Return what of the current access to work the task the user lacks, or None.

    ("inactive" | "role" | "skill" | "proficiency", the proficiency they hold): what
    hold_problem words, asked of one user under the task's row lock. Taking a task asks the
    same of many workers at once in inbox.eligibility (a test checks the two agree).
    """
    if not user.is_active:
        return "inactive", None
    if Role.WORKER not in user_roles(user=user):
        return "role", None
    if getattr(task, "proficiency_of", None) == user.pk:
        # Read with the task's row, for this user (inbox.lifecycle's locked read).
        proficiency = task.actor_proficiency
    else:
        proficiency = (
            WorkerSkill.objects.filter(worker=user, skill_id=task.skill_id)
            .values_list("proficiency", flat=True).first()
        )
    if proficiency is None:
        return "skill", None
    if proficiency < task.min_proficiency:
        return "proficiency", proficiency
    return None


def hold_problem(*, user: User, task: Task) -> str | None:
    """Return why the user may no longer hold the task, or None while they may.

    Their current access only: active, the worker role, the task's skill at its
    min_proficiency. Separation of duties is checked when a task is taken (see
    eligibility_problem); holding it does not change it. Said of the user by e-mail, as the
    history and the refusal both say it.
    """
    gap = _access_gap(user=user, task=task)
    if gap is None:
        return None
    lacks, proficiency = gap
    return {
        "inactive": f"{user.email} is deactivated",
        "role": f"{user.email} no longer has the worker role",
        "skill": f"{user.email} no longer holds {task.skill.slug}",
        "proficiency": (f"{user.email} holds {task.skill.slug} at {proficiency}, the task "
                        f"needs {task.min_proficiency}"),
    }[lacks]


def eligibility_problem(*, user: User, task: Task) -> str | None:
    """Return why the user may not take the task themselves, or None when they may.

    Their access only (inbox.eligibility.ACCESS: active, a worker, the skill at the task's
    proficiency, separation of duties), from the verdict dispatch decides by; capacity is
    checked under the worker's lock (capacity_check). Away and a declined or lapsed offer
    do not stop a worker taking a task themselves: they keep them from being offered it.
    """
    verdict = worker_verdict(task=task, worker=user)
    lacks = next((reason for reason in verdict.reasons if reason in ACCESS), None)
    if lacks is None:
        return None
    return {
        Reason.INACTIVE: "Deactivated users take no tasks.",
        Reason.NOT_WORKER: "Only workers take tasks (a supervisor who also works needs the "
                           "worker role).",
        Reason.SKILL: f"You do not hold the skill {task.skill.slug}.",
        Reason.PROFICIENCY: (f"This task needs {task.skill.slug} at proficiency "
                             f"{task.min_proficiency}; you hold {verdict.proficiency}."),
        Reason.SEPARATION: ("Separation of duties: you worked on an earlier stage of this "
                            f"process ({', '.join(task.exclude_workers_of)})."),
    }[lacks]


def excluded_by_separation(*, user: User, task: Task) -> bool:
    """Return whether the user worked a stage of this execution the task excludes.

    One task at a time (take next walks candidates); for many workers at once the
    verdicts read it in their query (inbox.eligibility).
    """
    if not task.exclude_workers_of:
        return False
    return Task.objects.filter(
        execution_arn=task.execution_arn, stage__in=task.exclude_workers_of, assignee=user
    ).exists()


def worker_load(*, user: User) -> int:
    """Return the capacity units the worker's held tasks use (offered or in progress).

    Each task uses its skill's weight (accounts.models.Skill.weight, 1 by default).
    """
    units = (Task.objects.filter(assignee=user, state__in=HELD_STATES)
             .aggregate(units=Sum("skill__weight"))["units"])
    return units or 0


def worker_lock(*, user: User) -> User:
    """Lock the worker's row in the open transaction and return it fresh.

    The lock queues up everything that may add to one worker's load (their own takes, an
    offer, a reassign to them), so a capacity checked after it still holds at commit.
    """
    return User.objects.select_for_update().get(pk=user.pk)


def capacity_check(*, user: User, weight: int = 1) -> None:
    """Raise Conflict if a task of weight would take the worker past their capacity."""
    held = worker_load(user=user)
    if over_capacity(load=held, weight=weight, capacity=user.capacity):
        raise Conflict(
            f"You hold {held} capacity unit(s), your capacity is {user.capacity} and this "
            f"task needs {weight}: finish or release a task first."
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
        .select_related("skill", "assignee")
        .order_by("work_deadline", "offer_deadline", "created_at")
    )


def task_taken_after(*, user: User, task: Task, decisions: tuple[str, ...]) -> Any | None:
    """Return the id of the task the user took next after their latest decision on task
    (a "Complete and next"; decisions: the table's actions, inbox.lifecycle.DECISIONS),
    if they still have it in progress; else None.

    What a retried decision's first request took: the user's held tasks (at most their
    capacity) whose take_next by them came at or after the decision.
    """
    decided = (TaskEvent.objects.filter(task=task, actor=user, action__in=decisions)
               .order_by("-version").values_list("at", flat=True).first())
    if decided is None:
        return None
    held = Task.objects.filter(assignee=user, state=TaskState.IN_PROGRESS).exclude(pk=task.pk)
    return (TaskEvent.objects.filter(task__in=held, actor=user, action="take_next",
                                     at__gte=decided)
            .order_by("at", "version").values_list("task_id", flat=True).first())


@dataclass(frozen=True)
class Undoable:
    """A decision its worker may still take back: the task, and when it is sent."""

    task: Task
    until: datetime.datetime


def decision_undoable(*, user: User) -> Undoable | None:
    """Return the user's latest complete or reject still inside its undo window, or None.

    The window is the outbox row's wait (see inbox.lifecycle's "undo" row): pending, never
    claimed, not yet due.
    """
    row = (
        Outbox.objects.filter(
            status=OutboxStatus.PENDING, attempts=0, next_attempt_at__gt=timezone.now(),
            task__assignee=user, task__state__in=[TaskState.COMPLETING, TaskState.REJECTING])
        .select_related("task").order_by("-next_attempt_at").first()
    )
    return Undoable(task=row.task, until=row.next_attempt_at) if row is not None else None


def answer_undone(*, task: Task) -> dict | None:
    """Return the answer of the complete just undone on the task, to show it again, or None.

    Just undone: the task's last change was the undo of that decision (its withdrawn
    outbox row keeps what it would have sent).
    """
    if task.state != TaskState.IN_PROGRESS:
        return None
    output = (
        Outbox.objects.filter(task=task, decision_version=task.version - 1,
                              status=OutboxStatus.WITHDRAWN, kind=OutboxKind.SUCCESS)
        .values_list("output", flat=True).first()
    )
    return output.get("answer") if output else None


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


def task_history(*, task: Task) -> list[TaskEvent]:
    """Return the task's events, oldest first: as read with the task when its reader read
    them too (take next on PostgreSQL answers them in its one round trip), else queried
    (every task page and answer: compiled once, config.compiled)."""
    read = getattr(task, "events_read", None)
    if read is not None:
        return list(read)
    return _HISTORY_READ.run("all", task_id=task.pk)


_HISTORY_READ = CompiledRead(
    lambda shape, *, task_id: TaskEvent.objects.filter(task_id=task_id).order_by("version"),
    task_id=TaskEvent._meta.get_field("task"))


def open_tasks_of_execution(*, execution_arn: str) -> QuerySet[Task]:
    return Task.objects.filter(execution_arn=execution_arn, state__in=OPEN_STATES)


def open_task_ids_of_execution(*, execution_arn: str) -> list[Any]:
    """Return the ids of the execution's open tasks: open_tasks_of_execution's, compiled
    once (every ended execution's status event reads them, most often to find none)."""
    return [task.pk for task in _OPEN_IDS_READ.run("all", execution_arn=execution_arn)]


_OPEN_IDS_READ = CompiledRead(
    lambda shape, *, execution_arn: open_tasks_of_execution(
        execution_arn=execution_arn).only("pk"),
    execution_arn=Task._meta.get_field("execution_arn"))

