"""Small helpers shared by the task pages' POST views (workers' and supervisors')."""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from config.errors import InboxError
from inbox.models import Task


def posted_version(request: HttpRequest) -> int | None:
    """Return the task version the posted page showed, so a stale page is refused."""
    try:
        return int(request.POST["version"])
    except (KeyError, ValueError):
        return None


def refused(request: HttpRequest, task: Task, exc: InboxError) -> HttpResponse:
    """Say why an action was refused, on the task's page as it is now."""
    messages.error(request, exc.message)
    return redirect("inbox:task", task_id=task.pk)
