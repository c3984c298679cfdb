"""Reads for processes, their versions and executions."""

from django.db.models import Prefetch, QuerySet

from config.errors import NotFound
from processes.models import Execution, Process, ProcessVersion


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
