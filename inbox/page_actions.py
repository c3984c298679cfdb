"""The one shape of the task pages' POST actions (workers' and supervisors').

A view of an action only says which service it calls with what the page posted; this
module does the rest: a task the user may not see is a 404, a refused action comes back
to the task page saying why, a done one says so and moves on.
"""

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from config.errors import InboxError, NotFound
from inbox.lifecycle import AccessLost
from inbox.models import Task
from inbox.refusals import refusal_record

Perform = Callable[[HttpRequest, Any], "Task | HttpResponse"]
Then = Callable[[HttpRequest, Task], HttpResponse]


def posted_version(request: HttpRequest) -> int | None:
    """Return the task version the posted page showed, so a stale page is refused."""
    try:
        return int(request.POST["version"])
    except (KeyError, ValueError):
        return None


def refused(request: HttpRequest, task_id: Any, exc: InboxError) -> HttpResponse:
    """Say why an action was refused, on the task's page as it is now."""
    messages.error(request, exc.message)
    return redirect("inbox:task", task_id=task_id)


def to_task(request: HttpRequest, task: Task) -> HttpResponse:
    return redirect("inbox:task", task_id=task.pk)


def to_home(request: HttpRequest, task: Task) -> HttpResponse:
    return redirect("inbox:home")


def posted(name: str) -> Callable[[HttpRequest], str]:
    """Return a reader of one posted field (blank when absent)."""
    return lambda request: request.POST.get(name, "")


def calls(service: Callable[..., Task], *, actor: str = "worker",
          **fields: Callable[[HttpRequest], Any]) -> Perform:
    """Return a perform that calls service as the signed-in user (the keyword actor) on the
    task, with the page's version and each field read from the request by its reader."""

    def perform(request: HttpRequest, task_id: Any) -> Task:
        return service(**{actor: request.user}, task_id=task_id,
                       expected_version=posted_version(request),
                       **{name: read(request) for name, read in fields.items()})

    return perform


def task_action(perform: Perform, *, done: str = "", then: Then = to_task,
                form: Callable[..., HttpResponse] | None = None
                ) -> Callable[[HttpRequest, Any], HttpResponse]:
    """Make the view of one task action from perform(request, task_id).

    perform calls one service and returns the task it changed, or a response of its own
    (a form to show again). done is the message on success, formatted with the task and
    the posted data (``{task.title}``, ``{post[clock]}``); then says where to go next.
    POST only, unless form is given: then GET shows form(request, task_id), the action's
    page of its own for a browser without JavaScript.
    """

    @require_http_methods(["GET", "HEAD", "POST"] if form else ["POST"])
    def view(request: HttpRequest, task_id: Any) -> HttpResponse:
        if request.method != "POST":
            return form(request, task_id)
        try:
            outcome = perform(request, task_id)
        except NotFound:
            raise Http404("No such task.") from None
        except PermissionDenied as exc:
            refusal_record(request=request, user=request.user, task_id=task_id, status=403,
                           reason=str(exc) or "Forbidden.")
            raise
        except AccessLost as exc:
            refusal_record(request=request, user=request.user, task_id=task_id,
                           status=exc.status, reason=exc.message)
            # The task went back to its queue; its page may be one the user no longer sees.
            messages.error(request, exc.message)
            return redirect("inbox:home")
        except InboxError as exc:
            refusal_record(request=request, user=request.user, task_id=task_id,
                           status=exc.status, reason=exc.message)
            return refused(request, task_id, exc)
        if isinstance(outcome, HttpResponse):
            return outcome
        if done:
            messages.success(request, done.format(task=outcome, post=request.POST))
        return then(request, outcome)

    return view
