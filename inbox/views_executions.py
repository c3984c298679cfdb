"""Supervisor pages of executions: the recent ones, filtered, and one execution's timeline.

What they show comes from the database (inbox.executions, inbox.timeline): the web
process never calls Step Functions. Filters are in the query string, so a list is a link
to bookmark or share.
"""

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from config.errors import NotFound
from inbox import board, executions, timeline
from inbox.redaction import redact
from inbox.selectors import visible_tasks
from processes.models import Execution


def _need_supervisor(request: HttpRequest) -> None:
    if not board.is_supervisor(user=request.user):
        raise PermissionDenied("Only supervisors and admins see executions.")


def _execution(request: HttpRequest, execution_id: int) -> Execution:
    _need_supervisor(request)
    try:
        return executions.access_execution(user=request.user, execution_id=execution_id)
    except NotFound:
        raise Http404("No such execution.") from None


@require_safe
def execution_list(request: HttpRequest) -> HttpResponse:
    """List the executions the supervisor sees, newest first, filtered as the URL says."""
    _need_supervisor(request)
    processes = executions.visible_process_names(user=request.user)
    filters = executions.Filters.from_query(request.GET, processes=processes)
    rows, cursor = executions.executions_page(user=request.user, filters=filters)
    first_query = request.GET.copy()
    first_query.pop("after", None)
    next_query = None
    if cursor is not None:
        query = first_query.copy()
        query["after"] = str(cursor)
        next_query = query.urlencode()
    return render(request, "supervisor/executions.html", {
        "rows": rows,
        "filters": filters,
        "form": {name: request.GET.get(name, "") for name in (
            "process", "version", "status", "started_after", "started_before")},
        "processes": processes,
        "statuses": executions.STATUSES,
        "time_hint": executions.TIME_HINT,
        "paged": filters.after is not None,
        "next_query": next_query,
        "first_query": first_query.urlencode(),
    }, status=400 if filters.problems else 200)


@require_safe
def execution_detail(request: HttpRequest, execution_id: int) -> HttpResponse:
    """Show one execution: what the inbox knows of it, its tasks, and its timeline."""
    execution = _execution(request, execution_id)
    tasks = (visible_tasks(user=request.user).filter(execution_arn=execution.execution_arn)
             .select_related("skill", "assignee").order_by("created_at"))
    return render(request, "supervisor/execution.html", {
        "execution": execution,
        "cause": redact(execution.cause)[:2000],
        "tasks": list(tasks[:100]),
        "timeline": _timeline(execution),
    })


@require_safe
@never_cache
def execution_timeline(request: HttpRequest, execution_id: int) -> HttpResponse:
    """Return the timeline partial alone: the page fetches it while pending or following."""
    execution = _execution(request, execution_id)
    return render(request, "supervisor/_timeline.html", {"timeline": _timeline(execution)})


def _timeline(execution: Execution) -> dict:
    return {**timeline.timeline_for_page(execution_arn=execution.execution_arn),
            "url": reverse("inbox:execution-timeline", args=[execution.pk])}
