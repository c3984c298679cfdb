"""Reads of the supervisor board: per-skill counts, the filtered task list, who may take a task.

The list pages with a keyset (the last row's sort key and id), never OFFSET: a page costs
the same at the millionth row as at the first, and rows that move between two page loads
are neither skipped nor shown twice within one ordering.
"""

import datetime
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.models import Group
from django.db.models import (
    BooleanField,
    Case,
    Count,
    Exists,
    F,
    IntegerField,
    Min,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.functions import Coalesce
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from accounts.models import ONLINE_SECONDS, Skill, User, WorkerSkill
from accounts.roles import Role
from accounts.selectors import user_roles
from inbox.eligibility import Verdict, held_units, worker_verdicts
from inbox.models import HELD_STATES, OPEN_STATES, Task, TaskEvent, TaskState
from inbox.selectors import visible_tasks
from inbox.services.presence import online_since

PAGE_SIZE = 50

# name: (column, descending). Each ordering breaks ties by id in the same direction.
SORTS: dict[str, tuple[str, bool]] = {
    "deadline": ("overall_deadline", False),
    "-deadline": ("overall_deadline", True),
    "created": ("created_at", False),
    "-created": ("created_at", True),
    "priority": ("priority", True),
    "-priority": ("priority", False),
}
SORT_LABELS = {
    "deadline": "Escalated and overdue first, then deadline soonest",
    "-deadline": "Deadline, latest first",
    "created": "Created, oldest first",
    "-created": "Created, newest first",
    "priority": "Priority, highest first",
    "-priority": "Priority, lowest first",
}
# Minimum waiting age a filter may ask for: (value, label).
AGES = [("15m", "15 min"), ("1h", "1 hour"), ("4h", "4 hours"), ("1d", "1 day"),
        ("7d", "7 days")]
_AGE_SPANS = {"15m": datetime.timedelta(minutes=15), "1h": datetime.timedelta(hours=1),
              "4h": datetime.timedelta(hours=4), "1d": datetime.timedelta(days=1),
              "7d": datetime.timedelta(days=7)}
UNASSIGNED = "none"
# How many escalated and overdue tasks the default order puts first, on its first page.
ATTENTION_SIZE = 20

# The clocks by the names the API, the docs and every page use (docs/CLOCKS.md). The overall
# clock of an escalated task is the escalation clock: the same column, its own label.
CLOCK_LABELS = {"offer": "Offer", "work": "Work", "overall": "Overall"}
ESCALATION_LABEL = "Escalation"


def clock_label(*, task: Task, clock: str) -> str:
    """Return the name the pages give the task's clock ("Escalation" once it escalated).

    Once escalated, the overall column runs the escalation clock also after a supervisor
    reassigned or returned the task. The board annotates ``escalated_at``; a task read
    alone asks its history once (only a task with an escalation policy can have one).
    """
    if clock == "overall" and (task.state == TaskState.ESCALATED or _escalated_at(task)):
        return ESCALATION_LABEL
    return CLOCK_LABELS[clock]


def _escalated_at(task: Task) -> datetime.datetime | None:
    if not hasattr(task, "escalated_at"):
        task.escalated_at = (
            TaskEvent.objects.filter(task=task, to_state=TaskState.ESCALATED)
            .order_by("-version").values_list("at", flat=True).first()
            if task.escalation_seconds else None)
    return task.escalated_at


def overdue_q(now: datetime.datetime) -> Q:
    """Return the condition of an overdue task: a running clock has passed its deadline."""
    return (
        Q(overall_deadline__lte=now)
        | Q(state=TaskState.OFFERED, offer_deadline__lte=now)
        | Q(state=TaskState.IN_PROGRESS, work_deadline__lte=now)
    )


def attention_q(now: datetime.datetime) -> Q:
    """Return the condition of a task that needs a supervisor: escalated or overdue."""
    return Q(state=TaskState.ESCALATED) | overdue_q(now)


def is_supervisor(*, user: User) -> bool:
    """Return whether the user supervises (a supervisor or an admin)."""
    return bool({Role.SUPERVISOR, Role.ADMIN} & user_roles(user=user))


def supervised_tasks(*, supervisor: User, escalated: bool = False,
                     overdue: bool = False) -> QuerySet[Task]:
    """Return the open tasks the supervisor manages; escalated or overdue ones if asked."""
    tasks = visible_tasks(user=supervisor).filter(state__in=OPEN_STATES)
    now = timezone.now()
    if escalated:
        tasks = tasks.filter(state=TaskState.ESCALATED)
    if overdue:
        tasks = tasks.filter(attention_q(now))
    return tasks.select_related("skill", "assignee").order_by("overall_deadline")


def supervised_skills(*, user: User) -> QuerySet[Skill]:
    """Return the skills the user supervises: all for admins, else the ones they hold."""
    if Role.ADMIN in user_roles(user=user):
        return Skill.objects.order_by("slug")
    return Skill.objects.filter(worker_skills__worker=user).order_by("slug")


def skill_counts(*, skills: list[Skill], now: datetime.datetime) -> list[dict[str, Any]]:
    """Return each skill's open tasks by state, overdue ones and the oldest waiting one.

    One aggregate query for every skill together.
    """
    overdue = overdue_q(now)
    rows = {
        row["skill_id"]: row
        for row in Task.objects.filter(skill__in=skills, state__in=OPEN_STATES)
        .values("skill_id")
        .annotate(
            queued=Count("id", filter=Q(state=TaskState.QUEUED)),
            offered=Count("id", filter=Q(state=TaskState.OFFERED)),
            in_progress=Count("id", filter=Q(state=TaskState.IN_PROGRESS)),
            escalated=Count("id", filter=Q(state=TaskState.ESCALATED)),
            overdue=Count("id", filter=overdue),
            oldest=Min("created_at", filter=Q(state=TaskState.QUEUED)),
        )
        .order_by()
    }
    empty = {"queued": 0, "offered": 0, "in_progress": 0, "escalated": 0, "overdue": 0,
             "oldest": None}
    return [{"skill": skill, **{k: rows.get(skill.pk, empty)[k] for k in empty}}
            for skill in skills]


# The free-text filters: what a valid value looks like (slugs as Django's SlugField takes
# them, an address as long as one may be), and what it is called. No NUL reaches
# PostgreSQL, which refuses it in a query.
_TEXT_FILTERS = {
    "skill": (re.compile(r"[-a-zA-Z0-9_]{1,64}", re.ASCII), "skill slug"),
    "process": (re.compile(r"[-a-zA-Z0-9_]{1,64}", re.ASCII), "process name"),
    "assignee": (re.compile(rf"{UNASSIGNED}|[^@\s\x00]{{1,64}}@[^@\s\x00]{{1,189}}"),
                 "worker's e-mail address"),
}
_SHOWN_MAX = 40


def _shown(value: str) -> str:
    """Return a bad value quoted for a message, its start only when it is long."""
    return repr(value if len(value) <= _SHOWN_MAX else f"{value[:_SHOWN_MAX]}…")


@dataclass
class Filters:
    """What the board's list shows, as read from the query string.

    A bad value (unknown, too long, a forged page link) is dropped and named in
    ``problems``: the board shows the list without it and answers 400.
    """

    skill: str = ""
    state: str = ""
    process: str = ""
    assignee: str = ""
    age: str = ""
    overdue: bool = False
    sort: str = "deadline"
    after: tuple[Any, str] | None = None
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, query: Any) -> "Filters":
        filters = cls(sort=query.get("sort", "").strip() or "deadline")
        for name, (pattern, shows) in _TEXT_FILTERS.items():
            value = query.get(name, "").strip()
            if value and not pattern.fullmatch(value):
                filters.problems.append(f"{_shown(value)} is not a {shows}: showing every "
                                        f"{name}.")
            else:
                setattr(filters, name, value)
        state, age = query.get("state", "").strip(), query.get("age", "").strip()
        if state and state not in OPEN_STATES:
            filters.problems.append(f"Unknown state {_shown(state)}: showing every state.")
        else:
            filters.state = state
        if age and age not in _AGE_SPANS:
            filters.problems.append(f"Unknown age {_shown(age)}: showing every age.")
        else:
            filters.age = age
        overdue = query.get("overdue", "").strip()
        if overdue and overdue != "1":
            filters.problems.append(f"Unknown overdue {_shown(overdue)}: say 1 or nothing; "
                                    "showing every task.")
        else:
            filters.overdue = overdue == "1"
        if filters.sort not in SORTS:
            filters.problems.append(f"Unknown order {_shown(filters.sort)}: by deadline.")
            filters.sort = "deadline"
        after = query.get("after", "")
        if after:
            filters.after = _parse_cursor(after, sort=filters.sort)
            if filters.after is None:
                filters.problems.append("That page link is broken: showing the first page.")
        return filters

    @property
    def attention_first(self) -> bool:
        """Whether escalated and overdue tasks come first, apart (the default order)."""
        return (self.sort == "deadline" and not self.overdue
                and self.state != TaskState.ESCALATED)


def _filtered(*, user: User, filters: Filters, now: datetime.datetime) -> QuerySet[Task]:
    """Return the open tasks the user supervises that the filters select, in no order."""
    # The latest escalation of each row shown (an escalated row's why and since), read
    # in the same query for the rows of the page only.
    escalation = (TaskEvent.objects.filter(task_id=OuterRef("pk"), to_state=TaskState.ESCALATED)
                  .order_by("-version"))
    tasks = (visible_tasks(user=user).filter(state__in=OPEN_STATES)
             .select_related("skill", "assignee")
             .annotate(escalated_at=Subquery(escalation.values("at")[:1]),
                       escalated_why=Subquery(escalation.values("reason")[:1])))
    if filters.skill:
        tasks = tasks.filter(skill__slug=filters.skill)
    if filters.state:
        tasks = tasks.filter(state=filters.state)
    if filters.process:
        tasks = tasks.filter(process_name=filters.process)
    if filters.assignee == UNASSIGNED:
        tasks = tasks.filter(assignee__isnull=True)
    elif filters.assignee:
        tasks = tasks.filter(assignee__email__iexact=filters.assignee)
    if filters.age:
        tasks = tasks.filter(created_at__lte=now - _AGE_SPANS[filters.age])
    if filters.overdue:
        tasks = tasks.filter(overdue_q(now))
    return tasks


def attention_tasks(*, user: User, filters: Filters,
                    now: datetime.datetime) -> tuple[list[Task], bool]:
    """Return the escalated and overdue tasks the default order shows first, soonest
    deadline first, at most ATTENTION_SIZE, and whether there are more; each with why and
    since when (see triage_notes). Other orders show none apart.
    """
    if not filters.attention_first:
        return [], False
    rows = list(_filtered(user=user, filters=filters, now=now).filter(attention_q(now))
                .order_by("overall_deadline", "id")[:ATTENTION_SIZE + 1])
    triage_notes(tasks=rows, now=now)
    return rows[:ATTENTION_SIZE], len(rows) > ATTENTION_SIZE


def board_tasks(*, user: User, filters: Filters, now: datetime.datetime,
                size: int = PAGE_SIZE) -> tuple[list[Task], str | None]:
    """Return one page of the open tasks the user supervises, and the next page's cursor.

    In the default order the escalated and overdue ones are left out: attention_tasks
    shows them first. The bound on overall_deadline is an index condition there.
    """
    tasks = _filtered(user=user, filters=filters, now=now)
    if filters.attention_first:
        tasks = tasks.filter(
            Q(overall_deadline__gt=now), ~Q(state=TaskState.ESCALATED),
            ~Q(state=TaskState.OFFERED, offer_deadline__lte=now),
            ~Q(state=TaskState.IN_PROGRESS, work_deadline__lte=now),
        )
    column, descending = SORTS[filters.sort]
    if filters.after is not None:
        value, last_id = filters.after
        # The first, redundant bound is what an index can start from: without it the
        # planner reads and discards every row before the cursor (the OR is no index
        # condition), so a later page would cost more than the first.
        if descending:
            tasks = tasks.filter(Q(**{f"{column}__lte": value}),
                                 Q(**{f"{column}__lt": value})
                                 | Q(**{column: value, "id__lt": last_id}))
        else:
            tasks = tasks.filter(Q(**{f"{column}__gte": value}),
                                 Q(**{f"{column}__gt": value})
                                 | Q(**{column: value, "id__gt": last_id}))
    prefix = "-" if descending else ""
    rows = list(tasks.order_by(f"{prefix}{column}", f"{prefix}id")[:size + 1])
    triage_notes(tasks=rows[:size], now=now)
    if len(rows) <= size:
        return rows, None
    last = rows[size - 1]
    return rows[:size], _cursor(getattr(last, column), last.pk)


def triage_notes(*, tasks: list[Task], now: datetime.datetime) -> None:
    """Set ``why`` and ``since`` on each escalated or overdue task ("" and None on others),
    and ``deadline_label``: the name of the clock the overall_deadline column runs.

    Escalated: "Escalated: " and the escalation's reason, since the escalation (annotated
    by _filtered: no query of its own); its escalation clock, once run out, is said too.
    Overdue: which running clocks ran out, by the names the pages give them, since the
    first one did.
    """
    for task in tasks:
        task.why, task.since = "", None
        task.deadline_label = clock_label(task=task, clock="overall")
        ran_out = [(deadline, clock_label(task=task, clock=clock).lower())
                   for clock, deadline in _running_deadlines(task)
                   if deadline is not None and deadline <= now]
        ran_out.sort()
        clocks = " and ".join(label for _, label in ran_out)
        plural = "s" if len(ran_out) > 1 else ""
        if task.state == TaskState.ESCALATED:
            reason = getattr(task, "escalated_why", "") or "no reason recorded"
            task.why = f"Escalated: {reason}"
            if ran_out:
                task.why += f" The {clocks} clock ran out too."
            task.since = getattr(task, "escalated_at", None)
        elif ran_out:
            task.why = f"Overdue: the {clocks} clock{plural} ran out"
            task.since = ran_out[0][0]


def _running_deadlines(task: Task) -> list[tuple[str, datetime.datetime | None]]:
    """Return the task's running clocks and their deadlines (as overdue_q reads them)."""
    running = [("overall", task.overall_deadline)]
    if task.state == TaskState.OFFERED:
        running.insert(0, ("offer", task.offer_deadline))
    elif task.state == TaskState.IN_PROGRESS:
        running.insert(0, ("work", task.work_deadline))
    return running


def escalation_of(*, task: Task) -> TaskEvent | None:
    """Return the event that escalated the task (its latest escalation), or None."""
    return (TaskEvent.objects.filter(task=task, to_state=TaskState.ESCALATED)
            .order_by("-version").first())


def eligible_workers(*, task: Task, verdicts: list[Verdict] | None = None) -> list[User]:
    """Return the workers a supervisor may give the task to now, most free capacity first.

    The assignable verdicts of inbox.eligibility (what task_reassign accepts: everything
    dispatch asks but a declined or lapsed offer, which binds offers only), from verdicts
    when the caller has them already. Each carries ``load`` and ``free`` (capacity units)
    and ``proficiency``.
    """
    workers = []
    for verdict in worker_verdicts(task=task) if verdicts is None else verdicts:
        if verdict.assignable:
            verdict.worker.free = verdict.free
            workers.append(verdict.worker)
    return sorted(workers, key=lambda worker: (-worker.free, worker.email))


# The most workers the board's presence lists (online and available ones first).
PRESENCE_SIZE = 100


def team_presence(*, skills: list[Skill], now: datetime.datetime) -> dict[str, Any]:
    """Return the workers of the skills: availability, online, and what each holds.

    Each row is a User with ``online`` (seen within accounts.models.ONLINE_SECONDS),
    ``offered`` and ``in_progress`` (tasks) and ``load`` (the capacity units they use,
    as inbox.eligibility counts them). Online first, then available, then by e-mail; at
    most PRESENCE_SIZE, and how many more there are. One query for the rows, one to count.
    """
    held = (Task.objects.filter(assignee_id=OuterRef("pk"), state__in=HELD_STATES)
            .order_by().values("assignee_id"))

    def count(state: str) -> Coalesce:
        return Coalesce(Subquery(held.filter(state=state).annotate(n=Count("id"))
                                 .values("n"), output_field=IntegerField()), Value(0))

    workers = (
        User.objects.filter(is_active=True)
        .filter(Exists(WorkerSkill.objects.filter(worker_id=OuterRef("pk"), skill__in=skills)))
        .filter(Q(is_superuser=True)
                | Exists(Group.objects.filter(name=Role.WORKER, user=OuterRef("pk"))))
    )
    rows = list(
        workers.annotate(
            online=Case(When(last_seen__gte=online_since(now), then=Value(True)),
                        default=Value(False), output_field=BooleanField()),
            offered=count(TaskState.OFFERED), in_progress=count(TaskState.IN_PROGRESS),
            load=held_units(),
        ).order_by("-online", "availability", "email")[:PRESENCE_SIZE + 1]
    )
    more = workers.count() - PRESENCE_SIZE if len(rows) > PRESENCE_SIZE else 0
    return {"workers": rows[:PRESENCE_SIZE], "more": more,
            "online_minutes": ONLINE_SECONDS // 60}


def bulk_workers(*, skills: list[Skill]) -> QuerySet[User]:
    """Return active workers holding any of the skills: who a bulk reassign may name.

    Available ones first, then most free capacity, then by e-mail; each carries ``load``,
    ``free`` and ``proficiencies`` (their WorkerSkill rows of these skills, by slug). The
    reassign of each task still checks that worker against that task.
    """
    return (
        User.objects.filter(is_active=True, worker_skills__skill__in=skills)
        .filter(Q(groups__name=Role.WORKER) | Q(is_superuser=True))
        # Capacity units, as inbox.eligibility counts them.
        .annotate(load=held_units())
        .annotate(free=F("capacity") - F("load"))
        .prefetch_related(Prefetch(
            "worker_skills", to_attr="proficiencies",
            queryset=WorkerSkill.objects.filter(skill__in=skills).select_related("skill")
            .order_by("skill__slug")))
        # "available" sorts before "away".
        .distinct().order_by("availability", "-free", "email")
    )


def _cursor(value: Any, pk: Any) -> str:
    text = value.isoformat() if isinstance(value, datetime.datetime) else str(value)
    return f"{text}~{pk}"


# A cursor is one the board wrote: a priority (0-100) or an ISO date and time, then "~"
# and a task id. Anything longer or else is a forged or mangled link.
_CURSOR_MAX = 80
_PRIORITY = re.compile(r"[0-9]{1,3}", re.ASCII)
_PRIORITY_MAX = 100


def _parse_cursor(text: str, *, sort: str) -> tuple[Any, str] | None:
    """Return the sort value and task id of a cursor, or None when it is not one.

    Never raises: Unicode digits ("²" is a digit to str.isdigit, not to int), numbers of
    thousands of digits and dates that leave the calendar in UTC
    ("0001-01-01T00:00:00+14:00") are refused here, before any query.
    """
    if len(text) > _CURSOR_MAX:
        return None
    value_text, _, pk_text = text.rpartition("~")
    try:
        pk = str(uuid.UUID(pk_text))
    except ValueError:
        return None
    column = SORTS[sort][0]
    if column == "priority":
        if not _PRIORITY.fullmatch(value_text) or int(value_text) > _PRIORITY_MAX:
            return None
        return int(value_text), pk
    try:
        value = parse_datetime(value_text)
        if value is None:
            return None
        if timezone.is_naive(value):
            value = timezone.make_aware(value, datetime.UTC)
        # What the database will be given: a time it cannot hold in UTC overflows here.
        return value.astimezone(datetime.UTC), pk
    except (ValueError, OverflowError):
        return None
