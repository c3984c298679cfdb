"""Who may be given a task, and why every other worker may not: the one decision of it.

``worker_verdicts`` reads the workers asked about in one annotated query (their role,
proficiency in the task's skill, passes on the task, the capacity units they hold,
separation of duties) and gives each a ``Verdict``: every reason that excludes them, in
a fixed order, the first of which is the one the pages show. Dispatch (``offer_candidates``),
the reassign picker and check (``inbox.board.eligible_workers``, ``task_reassign``), a
worker's own claim (``eligibility_problem``) and the supervisor's explainer on a task page
all decide from these verdicts, so what the explainer says is what dispatch did.

Capacity is weighted: a task uses its skill's ``weight`` in capacity units, and a worker
may be given a task while the units they hold plus its weight stay within their capacity.
"""

import datetime
from dataclasses import dataclass, replace
from enum import StrEnum

from django.contrib.auth.models import Group
from django.db.models import Exists, IntegerField, OuterRef, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Availability, User, WorkerSkill
from accounts.roles import Role
from inbox.models import HELD_STATES, Task, TaskPass, TaskState

# A worker who let an offer lapse may be offered it again after this, if nobody else can.
REOFFER_COOLDOWN = datetime.timedelta(minutes=10)


class Reason(StrEnum):
    """Why a worker may not be given the task, from the most lasting to the most passing."""

    INACTIVE = "inactive"
    NOT_WORKER = "not_worker"
    SKILL = "skill"
    PROFICIENCY = "proficiency"
    HOLDER = "holder"
    SEPARATION = "separation"
    DECLINED = "declined"
    LAPSED = "lapsed"
    AWAY = "away"
    CAPACITY = "capacity"


# What binds offers only: a supervisor may give the task to a worker who let its offer go
# (they know why it was let go); dispatch never offers it to them again (declined) or not
# before the cool-down (lapsed).
OFFER_ONLY = frozenset({Reason.DECLINED, Reason.LAPSED})
# What the worker's own access decides (a worker taking a task themselves: claim, take next).
ACCESS = frozenset({Reason.INACTIVE, Reason.NOT_WORKER, Reason.SKILL, Reason.PROFICIENCY,
                    Reason.SEPARATION})


def over_capacity(*, load: int, weight: int, capacity: int) -> bool:
    """Return whether a task of weight would take a worker holding load past capacity."""
    return load + weight > capacity


@dataclass(frozen=True)
class Verdict:
    """Whether one worker may be given the task and, if not, every reason why."""

    worker: User
    reasons: tuple[Reason, ...]
    words: str
    proficiency: int | None
    load: int
    weight: int
    until: datetime.datetime | None = None

    @property
    def eligible(self) -> bool:
        """Whether dispatch offers them the task (nothing excludes them)."""
        return not self.reasons

    @property
    def reason(self) -> Reason | None:
        """The one reason the pages show: the first."""
        return self.reasons[0] if self.reasons else None

    @property
    def assignable(self) -> bool:
        """Whether a supervisor may give them the task (only offer-only reasons, or none)."""
        return all(reason in OFFER_ONLY for reason in self.reasons)

    @property
    def capacity(self) -> int:
        return self.worker.capacity

    @property
    def free(self) -> int:
        """Capacity units left before this task."""
        return self.worker.capacity - self.load


def held_units() -> Coalesce:
    """Return, to annotate on workers, the capacity units their held tasks use (each its
    skill's weight; offered or in progress), 0 for none."""
    held = (Task.objects.filter(assignee_id=OuterRef("pk"), state__in=HELD_STATES)
            .order_by().values("assignee_id").annotate(units=Sum("skill__weight"))
            .values("units"))
    return Coalesce(Subquery(held, output_field=IntegerField()), Value(0))


def _annotated(task: Task, workers: QuerySet[User]) -> QuerySet[User]:
    """Return workers with what their verdicts need, read in the same query."""
    passes = TaskPass.objects.filter(task_id=task.pk, worker_id=OuterRef("pk"))
    workers = workers.annotate(
        in_worker_group=Exists(Group.objects.filter(name=Role.WORKER, user=OuterRef("pk"))),
        proficiency=Subquery(WorkerSkill.objects.filter(
            worker_id=OuterRef("pk"), skill_id=task.skill_id).values("proficiency")[:1]),
        declined=Exists(passes.filter(why=TaskPass.Why.DECLINED)),
        lapsed_at=Subquery(passes.filter(why=TaskPass.Why.LAPSED).values("at")[:1]),
        load=held_units(),
    )
    if task.exclude_workers_of:
        return workers.annotate(separated=Exists(Task.objects.filter(
            execution_arn=task.execution_arn, stage__in=task.exclude_workers_of,
            assignee_id=OuterRef("pk"))))
    return workers.annotate(separated=Value(False))


def _verdict(task: Task, worker: User, *, weight: int, now: datetime.datetime) -> Verdict:
    """Judge one annotated worker: every reason that applies, in Reason's order."""
    reasons: list[Reason] = []
    until = None
    if not worker.is_active:
        reasons.append(Reason.INACTIVE)
    if not (worker.is_superuser or worker.in_worker_group):
        reasons.append(Reason.NOT_WORKER)
    if worker.proficiency is None:
        reasons.append(Reason.SKILL)
    elif worker.proficiency < task.min_proficiency:
        reasons.append(Reason.PROFICIENCY)
    if task.assignee_id == worker.pk and task.state in HELD_STATES:
        reasons.append(Reason.HOLDER)
    if worker.separated:
        reasons.append(Reason.SEPARATION)
    if worker.declined:
        reasons.append(Reason.DECLINED)
    elif worker.lapsed_at is not None and worker.lapsed_at + REOFFER_COOLDOWN > now:
        reasons.append(Reason.LAPSED)
        until = worker.lapsed_at + REOFFER_COOLDOWN
    if worker.availability != Availability.AVAILABLE:
        reasons.append(Reason.AWAY)
    # The task's own units count once: a holder is not over capacity by holding it.
    load = worker.load - (weight if Reason.HOLDER in reasons else 0)
    if over_capacity(load=load, weight=weight, capacity=worker.capacity):
        reasons.append(Reason.CAPACITY)
    verdict = Verdict(worker=worker, reasons=tuple(reasons), words="",
                      proficiency=worker.proficiency, load=worker.load, weight=weight,
                      until=until)
    return replace(verdict, words=verdict_words(task=task, verdict=verdict))


def verdict_words(*, task: Task, verdict: Verdict, reason: Reason | None = None) -> str:
    """Say one reason of the verdict (its first by default) of the worker, as a supervisor
    reads it."""
    worker, reason = verdict.worker, reason or verdict.reason
    if reason is None:
        return "Eligible."
    held = "Is offered" if task.state == TaskState.OFFERED else "Holds"
    return {
        Reason.INACTIVE: "Deactivated.",
        Reason.NOT_WORKER: "Not a worker: holds the skill without the worker role.",
        Reason.SKILL: f"Does not hold {task.skill.slug}.",
        Reason.PROFICIENCY: (f"Proficiency {verdict.proficiency}; the task needs "
                             f"{task.min_proficiency}."),
        Reason.HOLDER: f"{held} this task now.",
        Reason.SEPARATION: ("Separation of duties: worked on "
                            f"{', '.join(task.exclude_workers_of)} of this process."),
        Reason.DECLINED: "Declined this task's offer: it is not offered to them again.",
        Reason.LAPSED: "Let this task's offer run out: cooling down before it is offered again.",
        Reason.AWAY: "Away: takes no new offers or assignments.",
        Reason.CAPACITY: (f"At capacity: holds {verdict.load} of {worker.capacity} units; "
                          f"this task needs {verdict.weight}."),
    }[reason]


def worker_verdicts(*, task: Task, workers: QuerySet[User] | None = None,
                    now: datetime.datetime | None = None) -> list[Verdict]:
    """Return a verdict for each worker asked about (by default every holder of the task's
    skill), in dispatch's order: eligible ones first, those who let the offer lapse last
    among them, then the least loaded, the longest since their last sign-in.

    One query, whatever the number of workers.
    """
    if workers is None:
        workers = User.objects.filter(worker_skills__skill_id=task.skill_id)
    now = now or timezone.now()
    weight = task.skill.weight
    rows = _annotated(task, workers).order_by("load", "last_login", "pk")
    verdicts = [_verdict(task, worker, weight=weight, now=now) for worker in rows]
    # Stable: within each group the query's order stands.
    return sorted(verdicts, key=lambda v: (not v.eligible, v.worker.lapsed_at is not None))


def worker_verdict(*, task: Task, worker: User,
                   now: datetime.datetime | None = None) -> Verdict:
    """Return the verdict on one worker (read fresh: after a lock, it is current)."""
    return worker_verdicts(task=task, workers=User.objects.filter(pk=worker.pk), now=now)[0]


def eligible_verdicts(*, task: Task, now: datetime.datetime | None = None) -> list[Verdict]:
    """Return the eligible verdicts only, in dispatch's order (what dispatch offers to).

    The rows are first narrowed in SQL by the verdict's lasting, cheap rules (active,
    available, the skill at the task's proficiency), so a large team costs dispatch only
    its likely candidates; every row left is still judged by the verdict, so the narrowing
    can only drop workers the verdict excludes anyway (a test checks that the eligible are
    the same with and without it).
    """
    likely = User.objects.filter(
        is_active=True, availability=Availability.AVAILABLE,
        worker_skills__skill_id=task.skill_id,
        worker_skills__proficiency__gte=task.min_proficiency)
    return [v for v in worker_verdicts(task=task, workers=likely, now=now) if v.eligible]


def task_eligibility(*, task: Task) -> list[Verdict]:
    """Return the explainer's rows: every worker of the task's skill, eligible ones first
    (in dispatch's order), then the others by the reason that excludes them and e-mail."""
    verdicts = worker_verdicts(task=task)
    order = list(Reason)
    return ([v for v in verdicts if v.eligible]
            + sorted((v for v in verdicts if not v.eligible),
                     key=lambda v: (order.index(v.reason), v.worker.email)))
