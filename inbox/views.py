"""Reviewer pages: my queues, take next, a task and every action on it.

Each view calls one service or selector of the inbox (the same ones the worker API
calls; inbox.page_actions gives the actions their one shape); none changes a task any
other way. Every POST goes through Django's CSRF check.
"""

import functools
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from accounts.models import Dispatch
from accounts.roles import Role
from accounts.selectors import user_roles
from config.errors import Conflict, NotFound
from inbox.answer_form import answer_fields
from inbox.board import clock_label
from inbox.display import input_view
from inbox.lifecycle import transition_problem, undo_seconds
from inbox.live import live_url
from inbox.models import HELD_STATES, Task, TaskState
from inbox.page_actions import calls, posted, posted_version, refused, task_action, to_home
from inbox.refusals import refusal_record
from inbox.selectors import (
    Undoable,
    UnknownForm,
    access_task,
    answer_undone,
    decision_undoable,
    eligibility_problem,
    hold_problem,
    my_queues,
    my_tasks,
    task_form,
    task_history,
    worker_load,
)
from inbox.services import worker
from inbox.views_supervisor import supervisor_panel, timeline_panel
from processes.forms import AnswerForm, FormInvalid, answer_form_class

NOTHING_WAITING = "Nothing is waiting in your queues."


@require_safe
def home(request: HttpRequest) -> HttpResponse:
    """Show the signed-in user's queues (their skills), what they hold, and their roles."""
    stream = live_url()  # first: see inbox.live.live_url
    queues = my_queues(user=request.user)
    roles = user_roles(user=request.user)
    return render(
        request,
        "inbox/home.html",
        {
            "queues": queues,
            # What of their capacity their held tasks use (each its skill's weight).
            "load": worker_load(user=request.user) if Role.WORKER in roles else None,
            "held": list(my_tasks(user=request.user)),
            "roles": sorted(role.label for role in roles),
            "can_take": any(queue["dispatch"] == Dispatch.PULL for queue in queues),
            "live_url": stream,
            "undo": _undoable(request),
        },
    )


@require_POST
def take_next(request: HttpRequest) -> HttpResponse:
    """Take the next task of the user's pull queues (or of one queue) and open it."""
    try:
        task = worker.task_take_next(worker=request.user,
                                     skill=request.POST.get("skill") or None)
    except worker.NothingToTake:
        messages.info(request, NOTHING_WAITING)
        return redirect("inbox:home")
    except Conflict as exc:
        refusal_record(request=request, user=request.user, task_id=None, status=exc.status,
                       reason=exc.message)
        messages.error(request, exc.message)
        return redirect("inbox:home")
    return redirect("inbox:task", task_id=task.pk)


@require_safe
def task_detail(request: HttpRequest, task_id: UUID) -> HttpResponse:
    """Show a task: its input, its clocks, its form (to whoever holds it) and its history."""
    stream = live_url()  # first: see inbox.live.live_url
    return task_page(request, _visible_task(request, task_id), stream=stream)


def _open_next(request: HttpRequest, task: Task) -> HttpResponse:
    """Open the next task after a decision: a new one from the queues, else one already held.

    A push-queue worker has no queue to take from; their next task is the next offer.
    """
    # First (the page is rendered here when it swaps in place): see inbox.live.live_url.
    stream = live_url() if _swapping(request) else ""
    try:
        # The history is read with the take only when the page is rendered here. A
        # retried decision opens what its first request took, never a second task.
        task = worker.task_take_next_after(worker=request.user, decided=task,
                                           history=_swapping(request))
    except (worker.NothingToTake, Conflict):
        held = my_tasks(user=request.user).first()
        if held is not None:
            return _show_task(request, held, stream=stream)
        messages.info(request, NOTHING_WAITING)
        return redirect("inbox:home")
    return _show_task(request, task, stream=stream)


# A page's script that swaps the next page in place (inbox.js) posts with this header.
SWAP_HEADER = "X-Inbox-Swap"
# Where the swapped-in page lives, or where to go (a redirect the script follows itself).
LOCATION_HEADER = "X-Inbox-Location"


def _swapping(request: HttpRequest) -> bool:
    return request.headers.get(SWAP_HEADER) == "1"


def _show_task(request: HttpRequest, task: Task, *, stream: str) -> HttpResponse:
    """Open the task's page: a redirect to it, or, for a page swapping in place, the page.

    The page comes in the decision's own response, one round trip: the decision and the
    take are committed before it is rendered.
    """
    if not _swapping(request):
        return redirect("inbox:task", task_id=task.pk)
    response = task_page(request, task, stream=stream)
    response[LOCATION_HEADER] = reverse("inbox:task", args=[task.pk])
    return response


def swappable(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Let the script follow a redirect of view itself, when it posted to swap in place.

    fetch() would follow it and read the page, using up the messages it carries; an empty
    answer naming the place lets the script open it as a page, messages and all.
    """

    @functools.wraps(view)
    def answered(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if _swapping(request) and isinstance(response, HttpResponseRedirect):
            located = HttpResponse(status=204)
            located[LOCATION_HEADER] = response["Location"]
            return located
        return response

    return answered


def _complete(request: HttpRequest, task_id: UUID) -> Task | HttpResponse:
    """Complete the held task with the posted answer.

    The stage's Django answer form is bound to the POST; the service validates what it
    read. A bad answer changes nothing: the page comes back with each error at its field.
    """
    task = _visible_task(request, task_id)
    form = task_form(task=task)
    answer_form = answer_form_class(form)(data=request.POST)
    try:
        return worker.task_complete(worker=request.user, task_id=task.pk,
                                    answer=answer_form.answer(),
                                    expected_version=posted_version(request))
    except FormInvalid as exc:
        # Each problem is shown at its field; the message names the fields, once.
        labels = ", ".join(form.field(name).label if form.field(name) else name
                           for name in exc.errors)
        messages.error(request, f"The answer needs another look: see {labels}.")
        return task_page(request, task, answer_form=answer_form, status=400)


def _after_complete(request: HttpRequest, task: Task) -> HttpResponse:
    """Open the next task if the reviewer asked for it ("Complete and next"), else go home.

    Plain Complete takes nothing: the last task of a day leaves no fresh task held, its work
    clock running.
    """
    if request.POST.get("then") == "next":
        return _open_next(request, task)
    return to_home(request, task)


# Each action: the service it calls with what the page posts, what it says, where it goes.
task_complete_page = swappable(task_action(_complete, done="Completed: {task.title}.",
                                           then=_after_complete))
task_reject_page = swappable(task_action(
    calls(worker.task_reject, reason=posted("reason")), done="Rejected: {task.title}.",
    then=_open_next, form=lambda request, task_id: _reason_page(request, task_id, "reject")))
task_release_page = task_action(
    calls(worker.task_release, reason=posted("reason")),
    done="Released: {task.title}. It is back in its queue.", then=to_home)
task_claim_page = task_action(calls(worker.task_claim))
task_accept_page = task_action(calls(worker.task_accept),
                               done="Accepted. The work clock is running.")
task_undo_page = task_action(
    calls(worker.task_undo),
    done="Undone: {task.title} is yours again, in progress; nothing was sent to Step "
         "Functions.")
task_decline_page = task_action(
    calls(worker.task_decline, reason=posted("reason")),
    done="Declined: {task.title}. It will be offered to someone else.", then=to_home,
    form=lambda request, task_id: _reason_page(request, task_id, "decline"))


def _reason_page(request: HttpRequest, task_id: UUID, kind: str) -> HttpResponse:
    """Render the reject or decline reason form alone, for the task's holder.

    A task the user may not see is a 404; one they do not hold, or that is no longer in the
    state the action needs, sends them to the task page with the reason the transition
    would give, as a refused POST does (inbox.page_actions.refused).
    """
    task = _visible_task(request, task_id)
    problem = transition_problem(task=task, action=kind, actor=request.user)
    if problem:
        return refused(request, task.pk, Conflict(problem))
    return render(request, "inbox/task_reason.html", {"task": task, "kind": kind})


def task_page(request: HttpRequest, task: Task, *, answer_form: AnswerForm | None = None,
              status: int = 200, stream: str | None = None) -> HttpResponse:
    """Render the task page; answer_form is a refused answer, bound, to show again.

    stream is the live stream's URL, read before the task was (inbox.live.live_url).
    """
    # Actions are offered by what the user may do now, not by what they may see: a peer
    # who sees the task read-only (a "team" skill) gets none.
    mine = task.assignee_id == request.user.pk and task.state in HELD_STATES
    lost = hold_problem(user=request.user, task=task) if mine else None
    working = mine and not lost and task.state == TaskState.IN_PROGRESS
    claim_problem = None
    if task.state == TaskState.QUEUED and task.skill.dispatch == Dispatch.PULL:
        claim_problem = eligibility_problem(user=request.user, task=task)
    form = form_problem = None
    try:
        form = task_form(task=task)
    except UnknownForm as exc:
        form_problem = exc.message
    history = list(task_history(task=task))
    if form is not None and answer_form is None:
        # Just undone: the answer taken back is there again, to correct.
        undone = working and history and history[-1].action == "undo"
        answer_form = answer_form_class(form)(initial=answer_undone(task=task) if undone else None)
    fields = answer_fields(answer_form) if form is not None else []
    return render(
        request,
        "inbox/task.html",
        {
            "task": task,
            "input": input_view(task=task),
            "form": form,
            "form_problem": form_problem,
            "fields": fields,
            "has_errors": any(field.error for field in fields),
            "working": working,
            "offered": mine and not lost and task.state == TaskState.OFFERED,
            "claimable": (task.state == TaskState.QUEUED
                          and task.skill.dispatch == Dispatch.PULL and not claim_problem),
            "lost": lost,
            "claim_problem": claim_problem,
            "clocks": _clocks(task),
            "history": history,
            "supervise": supervisor_panel(request, task),
            "timeline": timeline_panel(request, task),
            "live_url": stream or live_url(),
            "undo": _undoable(request),
        },
        status=status,
    )


def _undoable(request: HttpRequest) -> Undoable | None:
    """Return the decision the user may still undo, to offer it (no query when undo is off)."""
    return decision_undoable(user=request.user) if undo_seconds() else None


def _clocks(task: Task) -> list[dict[str, Any]]:
    """Return the task's three clocks: which is running and when it runs out (named as
    every page names them: inbox.board.clock_label)."""
    running = {
        "offer": task.offer_deadline if task.state == TaskState.OFFERED else None,
        "work": task.work_deadline if task.state == TaskState.IN_PROGRESS else None,
        "overall": task.overall_deadline if task.is_open else None,
    }
    return [{"name": clock, "label": clock_label(task=task, clock=clock), "deadline": deadline}
            for clock, deadline in running.items()]


def _visible_task(request: HttpRequest, task_id: UUID) -> Task:
    """Return the task if the user may see it; a task they may not see does not exist."""
    try:
        return access_task(user=request.user, task_id=task_id)
    except NotFound:
        raise Http404("No such task.") from None
