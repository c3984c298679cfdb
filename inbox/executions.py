"""Recent executions for supervisors: the inbox's own records, filtered, newest first.

The list reads ``processes.Execution``, the row ``process_start`` writes for every
execution the inbox starts. Its status is kept current without the page calling Step
Functions: an ended execution's status-change event is recorded in its row
(``inbox.services.upstream.execution_record``), the reconciler
(``processes.services.executions_reconcile``, every 30 s, the least recently checked
RUNNING rows first) asks DescribeExecution for what an event missed, and every read of an
execution's timeline (``inbox.timeline.timeline_refresh``) records the status it read.
Executions started outside the inbox (by hand in the console, or by a parent state
machine) have no row and are not listed.

Who sees what: an admin, every execution; a supervisor, the executions of the process
versions with a human stage of a skill they hold (what they supervise on the board).
An execution they may not see is a 404, as a task is.
"""

import datetime
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from accounts.models import User, WorkerSkill
from accounts.roles import Role
from accounts.selectors import user_roles
from config.errors import NotFound
from config.query import row_id, text_ok
from processes.models import Execution, ExecutionStatus, ProcessVersion
from processes.selectors import deployed_spec
from processes.spec import HumanStage

PAGE_SIZE = 50
_SHOWN_MAX = 40
# The statuses a supervisor filters by: Step Functions' five, and MISSING (the inbox's own:
# Step Functions no longer knows the execution).
STATUSES = [(status.value, status.label) for status in ExecutionStatus]
TIME_HINT = "a date (2026-12-01) or a date and time (2026-12-01T09:30), UTC"


def _shown(value: str) -> str:
    return repr(value if len(value) <= _SHOWN_MAX else f"{value[:_SHOWN_MAX]}…")


@dataclass
class Filters:
    """What the list shows, as read from the query string (every filter is in the URL).

    A bad value is dropped and named in ``problems``, saying which filter and why: the
    page shows the list without it and answers 400.
    """

    process: str = ""
    version: int | None = None
    status: str = ""
    started_after: datetime.datetime | None = None
    started_before: datetime.datetime | None = None
    after: int | None = None
    problems: list[str] = field(default_factory=list)

    @classmethod
    def from_query(cls, query: Any, *, processes: Iterable[str]) -> "Filters":
        filters = cls()
        process = query.get("process", "").strip()
        if process and (not text_ok(process, longest=64) or process not in set(processes)):
            filters.problems.append(f"Process: {_shown(process)} is not a process you "
                                    "supervise; showing every process.")
        else:
            filters.process = process
        version = query.get("version", "").strip()
        if version:
            number = row_id(version.removeprefix("v"))
            if number is None or number > 2**31:
                filters.problems.append(f"Version: {_shown(version)} is not a version "
                                        "number (1, 2, ...); showing every version.")
            elif not filters.process:
                filters.problems.append("Version: choose a process for the version; "
                                        "showing every version.")
            else:
                filters.version = number
        status = query.get("status", "").strip()
        if status and status.upper() not in ExecutionStatus.values:
            filters.problems.append(
                f"Status: {_shown(status)} is not a status (one of "
                f"{', '.join(ExecutionStatus.values)}); showing every status.")
        else:
            filters.status = status.upper()
        for name, label in (("started_after", "Started after"),
                            ("started_before", "Started before")):
            value = query.get(name, "").strip()
            if not value:
                continue
            moment = _moment(value, end_of_day=name == "started_before")
            if moment is None:
                filters.problems.append(f"{label}: {_shown(value)} is not {TIME_HINT}; "
                                        "showing every start time.")
            else:
                setattr(filters, name, moment)
        if (filters.started_after and filters.started_before
                and filters.started_after >= filters.started_before):
            filters.problems.append("Started after is not before Started before: no "
                                    "execution could match; showing every start time.")
            filters.started_after = filters.started_before = None
        after = query.get("after", "").strip()
        if after:
            filters.after = row_id(after)
            if filters.after is None:
                filters.problems.append("Page: that page link is broken; showing the "
                                        "first page.")
        return filters

    @property
    def any(self) -> bool:
        return bool(self.process or self.version or self.status or self.started_after
                    or self.started_before)


def _moment(value: str, *, end_of_day: bool) -> datetime.datetime | None:
    """Return the UTC moment value names, or None: a date, or a date and time.

    A date alone in Started before means the end of that day (its whole day counts).
    """
    if "\x00" in value or len(value) > 40:
        return None
    try:
        # A date first: parse_datetime reads "2026-12-01" as its midnight too.
        day = parse_date(value)
        moment = None if day else parse_datetime(value)
    except ValueError:  # well formed, but not a real day or time (2026-02-30)
        return None
    if moment is None and day is None:
        return None
    if moment is None:
        moment = datetime.datetime.combine(day, datetime.time.min)
        if end_of_day:
            moment += datetime.timedelta(days=1)
    if timezone.is_naive(moment):
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment


def supervised_versions(*, user: User) -> QuerySet[ProcessVersion] | None:
    """Return the process versions whose executions the user sees; None means every one.

    A supervisor sees a version with a human stage of a skill they hold. Deployed
    specs are parsed once per process (processes.selectors.deployed_spec).
    """
    roles = user_roles(user=user) if user.is_active else set()
    if Role.ADMIN in roles:
        return None
    if Role.SUPERVISOR not in roles:
        return ProcessVersion.objects.none()
    held = set(WorkerSkill.objects.filter(worker=user).values_list("skill__slug", flat=True))
    ids = []
    for pk, name, number in ProcessVersion.objects.values_list("pk", "process__name",
                                                               "version"):
        spec = deployed_spec(process_name=name, process_version=number)
        if spec and _asks_for(spec, held):
            ids.append(pk)
    return ProcessVersion.objects.filter(pk__in=ids)


def _asks_for(spec: Any, skills: set[str]) -> bool:
    """Return whether the spec has a human stage of one of the skills."""
    return any(isinstance(stage, HumanStage) and stage.skill in skills
               for stage in spec.stages)


def visible_executions(*, user: User) -> QuerySet[Execution]:
    """Return the executions the user may see (see the module's docstring)."""
    versions = supervised_versions(user=user)
    executions = Execution.objects.select_related("process", "version")
    return executions if versions is None else executions.filter(version__in=versions)


def managed_task_execution(*, user: User, task: Any) -> int | None:
    """Return the id of the execution record of a task the user manages, if they may see it.

    Managing the task means being an admin or holding its skill (inbox.selectors), so a
    version with a human stage of that skill is one supervised_versions lets them see:
    one read of the record answers, where visible_executions reads every version. Any
    other version is judged by visible_executions.
    """
    row = (Execution.objects.filter(execution_arn=task.execution_arn)
           .values_list("pk", "process__name", "version__version").first())
    if row is None:
        return None
    pk, name, number = row
    spec = deployed_spec(process_name=name, process_version=number)
    if spec and _asks_for(spec, {task.skill.slug}):
        return pk
    return visible_executions(user=user).filter(pk=pk).values_list("pk", flat=True).first()


def visible_process_names(*, user: User) -> list[str]:
    """Return the names of the processes the user sees executions of, sorted."""
    versions = supervised_versions(user=user)
    if versions is None:
        versions = ProcessVersion.objects.all()
    return sorted(set(versions.values_list("process__name", flat=True)))


def executions_page(*, user: User, filters: Filters) -> tuple[list[Execution], int | None]:
    """Return one page of the filtered executions, newest start first, and the next cursor.

    Keyset by (started_at, id): the cursor is the id of the last row shown, so a page
    costs the same however deep, and a row started meanwhile never shifts a page.
    """
    executions = visible_executions(user=user)
    if filters.process:
        executions = executions.filter(process__name=filters.process)
    if filters.version is not None:
        executions = executions.filter(version__version=filters.version)
    if filters.status:
        executions = executions.filter(status=filters.status)
    if filters.started_after:
        executions = executions.filter(started_at__gte=filters.started_after)
    if filters.started_before:
        executions = executions.filter(started_at__lt=filters.started_before)
    if filters.after is not None:
        last = Execution.objects.filter(pk=filters.after).values_list("started_at",
                                                                       flat=True).first()
        if last is None:
            # The row of the cursor is gone (never, rows are kept): the first page.
            filters.problems.append("Page: that page link is broken; showing the first page.")
        else:
            executions = executions.filter(
                Q(started_at__lt=last) | Q(started_at=last, pk__lt=filters.after))
    rows = list(executions.order_by("-started_at", "-pk")[:PAGE_SIZE + 1])
    cursor = rows[PAGE_SIZE - 1].pk if len(rows) > PAGE_SIZE else None
    return rows[:PAGE_SIZE], cursor


def access_execution(*, user: User, execution_id: int) -> Execution:
    """Return the execution if the user may see it; else NotFound (never a hint it exists)."""
    if not 1 <= execution_id < 10**18:  # beyond a bigint: no row, and no query for it
        raise NotFound("No such execution.")
    execution = visible_executions(user=user).filter(pk=execution_id).first()
    if execution is None:
        raise NotFound("No such execution.")
    return execution
