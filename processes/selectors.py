"""Reads for processes, their versions and executions, and the forms and displays their
stages name."""

import datetime
import functools

from django.db.models import Prefetch, Q, QuerySet

from config.errors import NotFound
from processes.display import Display
from processes.forms import BUILTIN_FORMS, Form
from processes.models import Execution, ExecutionStatus, Process, ProcessVersion
from processes.spec import HumanStage, ProcessSpec, spec_parse


def process_list() -> QuerySet[Process]:
    """Return every process by name, with its versions (newest first) prefetched."""
    versions = ProcessVersion.objects.select_related("deployed_by").order_by("-version")
    return Process.objects.prefetch_related(Prefetch("versions", queryset=versions)).order_by(
        "name"
    )


def process_get(*, name: str) -> Process:
    """Return the process called name; raise NotFound if there is none."""
    try:
        return Process.objects.get(name=name)
    except Process.DoesNotExist:
        raise NotFound(f"There is no process called {name!r}.") from None


def process_version_latest(*, process: Process) -> ProcessVersion | None:
    """Return the process's highest deployed version, or None."""
    return process.versions.order_by("-version").first()


def process_version_get(*, name: str, version: int | None = None) -> ProcessVersion:
    """Return version of the process called name (the latest when None); raise NotFound."""
    process = process_get(name=name)
    if version is None:
        found = process_version_latest(process=process)
        if found is None:
            raise NotFound(f"Process {name!r} has no deployed version.")
        return found
    try:
        return process.versions.get(version=version)
    except ProcessVersion.DoesNotExist:
        raise NotFound(f"Process {name!r} has no version {version}.") from None


def process_version_find(*, name: str, version: int) -> ProcessVersion | None:
    """Return version of the process called name, or None if it is not deployed."""
    return (
        ProcessVersion.objects.select_related("process")
        .filter(process__name=name, version=version)
        .first()
    )


# A Standard execution runs a year at most (AWS's limit, and a day for a leap year): a
# version whose executions all started longer ago than this has none running.
EXECUTION_MAX_AGE = datetime.timedelta(days=366)


def process_versions_live(*, now: datetime.datetime) -> list[ProcessVersion]:
    """Return the deployed versions that may still run executions, by process and version.

    Each process's latest version (new starts go there), every version with an execution
    started within EXECUTION_MAX_AGE of now or recorded as still running, and every child
    version these start, and theirs. A version left out has no execution that can still
    be running: the CloudFormation template (processes/infra.py) leaves its state machine
    out, and a stack update deletes it.
    """
    versions = {(v.process.name, v.version): v
                for v in ProcessVersion.objects.select_related("process")}
    latest: dict[str, int] = {}
    for name, number in versions:
        latest[name] = max(latest.get(name, 0), number)
    started = (
        Execution.objects.filter(Q(started_at__gte=now - EXECUTION_MAX_AGE)
                                 | Q(status=ExecutionStatus.RUNNING))
        .values_list("version__process__name", "version__version").distinct()
    )
    todo = [*latest.items(), *started]
    live: set[tuple[str, int]] = set()
    while todo:
        key = todo.pop()
        if key in live or key not in versions:
            continue
        live.add(key)
        version = versions[key]
        todo.extend(_deployed_spec(version.spec_sha256, version.spec_text).children)
    return [versions[key] for key in sorted(live)]


def execution_list(*, process: Process) -> QuerySet[Execution]:
    """Return the process's executions, newest first."""
    return (
        Execution.objects.filter(process=process)
        .select_related("process", "version", "started_by")
        .order_by("-started_at", "-id")
    )


def execution_find(*, process: Process, business_key: str) -> Execution | None:
    """Return the process's execution for business_key, or None."""
    return (
        Execution.objects.select_related("process", "version")
        .filter(process=process, business_key=business_key)
        .first()
    )


def form_for(*, process_name: str, process_version: int, form_name: str) -> Form | None:
    """Return the form a task of this process version names, or None if it is unknown.

    A deployed version's own forms come first, then the built-in ones; a process that
    is not deployed here (hand-written ASL) can use built-in forms only.
    """
    spec = deployed_spec(process_name=process_name, process_version=process_version)
    if spec is not None:
        form = spec.forms.get(form_name)
        if form is not None:
            return form
    return BUILTIN_FORMS.get(form_name)


def display_for(*, process_name: str, process_version: int, stage: str) -> Display | None:
    """Return how a task of this process version's stage shows its input, or None.

    None when the version is not deployed here (hand-written ASL) or the stage declares no
    display: the task page lays the input out by its default (inbox.display).
    """
    spec = deployed_spec(process_name=process_name, process_version=process_version)
    if spec is None:
        return None
    found = spec.stage(stage)
    return found.display if isinstance(found, HumanStage) else None


# Deployed versions never change (processes.services refuses a changed spec under a version
# it has), so a version once read is kept for the life of the process: a task's form and
# display cost no query after the first. A version not deployed (yet) is asked each time.
_VERSIONS: dict[tuple[str, int], ProcessSpec] = {}
_VERSIONS_MAX = 1024


def deployed_spec(*, process_name: str, process_version: int) -> ProcessSpec | None:
    """Return the parsed spec of a deployed process version, or None if it is not deployed."""
    key = (process_name, process_version)
    spec = _VERSIONS.get(key)
    if spec is not None:
        return spec
    row = (
        ProcessVersion.objects.filter(process__name=process_name, version=process_version)
        .values_list("spec_sha256", "spec_text").first()
    )
    if row is None:
        return None
    spec = _deployed_spec(row[0], row[1])
    if len(_VERSIONS) >= _VERSIONS_MAX:
        _VERSIONS.clear()
    _VERSIONS[key] = spec
    return spec


@functools.lru_cache(maxsize=256)
def _deployed_spec(sha256: str, text: str) -> ProcessSpec:
    """Return a deployed spec, parsed; deployed versions never change, so sha256 keys it.

    Read as deployed: a version from before a rule for new versions keeps its forms and
    displays (processes.spec.spec_parse).
    """
    return spec_parse(text, source=f"deployed spec {sha256[:12]}", deployed=True)
