"""Supervisor pages: the board, and the supervisor actions on a task, one by one and in bulk.

Each action calls one service of inbox.services.supervisor (the same ones the supervisor
API calls; inbox.page_actions gives them their one shape); none changes a task any other
way. Every POST goes through Django's CSRF check.
"""

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST, require_safe

from accounts.models import User
from config.errors import Conflict, InboxError, NotFound
from inbox import board, timeline
from inbox.eligibility import task_eligibility
from inbox.executions import managed_task_execution
from inbox.lifecycle import SUPERVISOR_REASON
from inbox.live import live_url
from inbox.models import OPEN_STATES, Task, TaskState
from inbox.page_actions import calls, posted, task_action
from inbox.selectors import access_task, visible_tasks
from inbox.services import supervisor

BULK_MAX = 500
BULK_ACTIONS = {
    "reassign": "Reassign",
    "return": "Return to queue",
    "extend": "Extend a clock",
    "abort": "Abort",
}
DONE = {
    "reassign": "Reassigned",
    "return": "Returned to the queue",
    "extend": "Extended",
    "abort": "Aborted",
}


@require_safe
def supervisor_board(request: HttpRequest) -> HttpResponse:
    """Show per-skill counts and one page of the open tasks of the supervisor's skills."""
    _need_supervisor(request)
    stream = live_url()  # first: see inbox.live.live_url
    now = timezone.now()
    filters = board.Filters.from_query(request.GET)
    skills = list(board.supervised_skills(user=request.user))
    tasks, cursor = board.board_tasks(user=request.user, filters=filters, now=now)
    attention, more_attention = ([], False) if filters.after else board.attention_tasks(
        user=request.user, filters=filters, now=now)
    next_query = None
    if cursor:
        query = request.GET.copy()
        query["after"] = cursor
        next_query = query.urlencode()
    first_query = request.GET.copy()
    first_query.pop("after", None)
    overdue_query = first_query.copy()
    overdue_query["overdue"] = "1"
    return render(
        request,
        "supervisor/board.html",
        {
            "now": now,
            "counts": board.skill_counts(skills=skills, now=now),
            "tasks": tasks,
            "attention": attention,
            "more_attention": more_attention,
            "overdue_query": overdue_query.urlencode(),
            "filters": filters,
            "paged": filters.after is not None,
            "next_query": next_query,
            "first_query": first_query.urlencode(),
            "states": [(state.value, state.label) for state in OPEN_STATES],
            "sorts": board.SORT_LABELS.items(),
            "ages": board.AGES,
            "workers": list(board.bulk_workers(skills=skills)),
            "bulk_actions": [(value, label, BULK_CONFIRM[value])
                             for value, label in BULK_ACTIONS.items()],
            "clocks": [(clock, board.CLOCK_LABELS[clock]) for clock in supervisor.CLOCKS],
            # The task page's extend presets, offered as the bulk minutes' suggestions.
            "presets": EXTEND_PRESETS.items(),
            "escalation_label": board.ESCALATION_LABEL,
            "live_url": stream,
            "presence": board.team_presence(skills=skills, now=now),
        },
        # A bad filter or page link: the list without it, under the message saying so.
        status=400 if filters.problems else 200,
    )


def supervisor_panel(request: HttpRequest, task: Task) -> dict[str, Any] | None:
    """Return what the task page needs for the supervisor actions, or None if not a supervisor.

    The task page calls this for every viewer; for one who may not manage the task it
    costs one query (their roles).
    """
    if not task.is_open or not board.is_supervisor(user=request.user):
        return None
    try:
        access_task(user=request.user, task_id=task.pk, action="manage")
    except NotFound:
        return None
    running = [(clock, board.clock_label(task=task, clock=clock))
               for clock in supervisor.CLOCKS if _clock_running(task, clock)]
    escalation = (board.escalation_of(task=task) if task.state == TaskState.ESCALATED
                  else None)
    # Who may take it and why not (inbox.eligibility): the explainer and the reassign picker
    # read the same verdicts, once.
    verdicts = task_eligibility(task=task)
    return {"workers": board.eligible_workers(task=task, verdicts=verdicts), "clocks": running,
            "escalation": escalation, "eligibility": verdicts,
            "presets": EXTEND_PRESETS.items(),
            "confirm": {action: confirm_text(task=task, action=action)
                        for action in ("return", "abort")},
            "confirm_titles": CONFIRM_TITLES}


def timeline_panel(request: HttpRequest, task: Task) -> dict[str, Any] | None:
    """Return the execution timeline for the task page, or None if the user may not manage it.

    Open or closed, a task the supervisor may see shows its timeline. A missing or stale
    timeline is asked for here (a Celery task reads Step Functions); the page says so.
    """
    if not board.is_supervisor(user=request.user):
        return None
    try:
        access_task(user=request.user, task_id=task.pk, action="manage")
    except NotFound:
        return None
    return _timeline(task, request.user)


@require_safe
@never_cache
def task_timeline(request: HttpRequest, task_id: UUID) -> HttpResponse:
    """Return the timeline partial alone: the task page polls it while a refresh is pending."""
    task = _managed_task(request, task_id)
    return render(request, "supervisor/_timeline.html",
                  {"task": task, "timeline": _timeline(task, request.user)})


def _timeline(task: Task, user: User) -> dict[str, Any]:
    # The execution's own page, when the inbox started it and the user may see it.
    execution = managed_task_execution(user=user, task=task)
    return {**timeline.timeline_for_page(execution_arn=task.execution_arn),
            "url": reverse("inbox:task-timeline", args=[task.pk]),
            "execution_url": reverse("inbox:execution", args=[execution]) if execution else ""}


def _posted_worker(request: HttpRequest) -> User:
    return _worker(request.POST.get("worker", ""))


def _posted_seconds(request: HttpRequest) -> int:
    """Return the extension asked for: a preset button's minutes, else the minutes field."""
    preset = request.POST.get("preset", "")
    if preset:
        if preset not in EXTEND_PRESETS:
            raise InboxError(f"Unknown preset {preset[:20]!r}: choose "
                             f"{', '.join(EXTEND_PRESETS.values())}, or type the minutes.")
        return int(preset) * 60
    return _minutes(request) * 60


# What the confirm step of a destructive action says will happen (the page of its own
# without JavaScript, the dialog with it).
def confirm_text(*, task: Task, action: str) -> str:
    """Return the sentence naming what a confirmed return or abort of the task does."""
    if action == "abort":
        return (f"Abort '{task.title}': Step Functions hears TimedOut "
                "(HumanTask.TimedOut) with your reason.")
    holder = (f"{task.assignee.email} no longer holds it; " if task.assignee_id else "")
    return (f"Return '{task.title}' to the {task.skill.slug} queue: {holder}"
            "anyone eligible may take it.")


def _confirmed(perform: Any, action: str) -> Any:
    """Wrap perform so that a POST without confirmed=1 shows the confirm step instead."""

    def confirmed(request: HttpRequest, task_id: Any) -> Task | HttpResponse:
        if request.POST.get("confirmed") == "1":
            return perform(request, task_id)
        task = access_task(user=request.user, task_id=task_id, action="manage")
        if not request.POST.get("reason", "").strip():
            raise Conflict(SUPERVISOR_REASON)
        return _confirm_page(
            request, title=CONFIRM_TITLES[action], text=confirm_text(task=task, action=action),
            button=ACTION_BUTTONS[action], post_to=reverse(f"inbox:task-{action}", args=[task.pk]),
            back=reverse("inbox:task", args=[task.pk]), titles=[])
    return confirmed


def _confirm_page(request: HttpRequest, *, title: str, text: str, button: str, post_to: str,
                  back: str, titles: list[str]) -> HttpResponse:
    """Render the confirm step: what will happen, and the same post again with confirmed=1."""
    fields = [(name, value) for name, values in request.POST.lists()
              if name not in {"csrfmiddlewaretoken", "confirmed"} for value in values]
    return render(request, "supervisor/confirm.html", {
        "title": title, "text": text, "button": button, "post_to": post_to, "back": back,
        "fields": fields, "reason": request.POST.get("reason", ""), "titles": titles})


def _back(request: HttpRequest, task: Task) -> HttpResponse:
    """Go back to the board a dialog of the board posted from, else to the task's page."""
    if request.POST.get("from") == "board":
        return redirect(_board_url(request))
    return redirect("inbox:task", task_id=task.pk)


def _board_url(request: HttpRequest) -> str:
    """Return the board with the filters the posting page had (one line, nothing else)."""
    back = reverse("inbox:supervisor")
    filters = request.POST.get("filters", "")
    if filters and "\n" not in filters and "\r" not in filters:
        back = f"{back}?{filters}"
    return back


def _action_page(action: str) -> Any:
    """Return the GET view of one action's form on a page of its own (the board's dialogs
    fetch it; it also works as a plain page)."""

    def page(request: HttpRequest, task_id: Any) -> HttpResponse:
        task = _managed_task(request, task_id)
        panel = supervisor_panel(request, task)
        if panel is None:
            messages.error(request, f"This task is {task.get_state_display().lower()}: "
                                    "nothing more to do.")
            return redirect("inbox:task", task_id=task.pk)
        return render(request, "supervisor/action.html",
                      {"task": task, "supervise": panel, "action": action,
                       "title": ACTION_TITLES[action]})
    return page


ACTION_TITLES = {"reassign": "Reassign", "return": "Return to queue",
                 "extend": "Extend a clock", "abort": "Abort"}
ACTION_BUTTONS = {"return": "Return to queue", "abort": "Abort task"}
CONFIRM_TITLES = {"return": "Return this task to its queue?", "abort": "Abort this task?"}
# Extend presets: minutes, and what the button says.
EXTEND_PRESETS = {"15": "+15 min", "60": "+1 h", "1440": "+1 day"}

# Each action: the service it calls with what the page posts, and what it says. Return
# and abort first show what they will do (see _confirmed); reassign and extend do not.
task_reassign_page = task_action(
    calls(supervisor.task_reassign, actor="supervisor", worker=_posted_worker,
          reason=posted("reason")),
    done="Reassigned to {task.assignee.email}: {task.title}.", then=_back,
    form=_action_page("reassign"))
task_return_page = task_action(
    _confirmed(calls(supervisor.task_return, actor="supervisor", reason=posted("reason")),
               "return"),
    done="Returned to the queue: {task.title}.", then=_back, form=_action_page("return"))
_extend = calls(supervisor.task_extend, actor="supervisor", clock=posted("clock"),
               seconds=_posted_seconds, reason=posted("reason"))


def _extend_named(request: HttpRequest, task_id: Any) -> Task:
    """Extend, and name the clock as the task page does (the escalation clock, once
    escalated) for the message."""
    task = _extend(request, task_id)
    task.extended_clock = board.clock_label(task=task, clock=request.POST["clock"]).lower()
    return task


task_extend_page = task_action(
    _extend_named, done="Extended the {task.extended_clock} clock: {task.title}.", then=_back,
    form=_action_page("extend"))
task_abort_page = task_action(
    _confirmed(calls(supervisor.task_abort, actor="supervisor", reason=posted("reason")),
               "abort"),
    done="Aborted: {task.title}.", then=_back, form=_action_page("abort"))


@require_POST
def tasks_bulk_page(request: HttpRequest) -> HttpResponse:
    """Apply one action to every checked task; say how each one went."""
    _need_supervisor(request)
    back = _board_url(request)
    action = request.POST.get("action", "")
    ids = request.POST.getlist("task")
    if action not in BULK_ACTIONS:
        messages.error(request, "Choose what to do with the checked tasks.")
        return redirect(back)
    if not ids:
        messages.error(request, "Check at least one task.")
        return redirect(back)
    if len(ids) > BULK_MAX:
        messages.error(request, f"At most {BULK_MAX} tasks at once.")
        return redirect(back)
    try:
        service, arguments = _bulk_action(request, action)
    except InboxError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    if request.POST.get("confirmed") != "1":
        if not request.POST.get("reason", "").strip():
            messages.error(request, SUPERVISOR_REASON)
            return redirect(back)
        titles = _titles(request, ids)
        return _confirm_page(
            request, title=f"{BULK_ACTIONS[action]}: {_count(len(ids))}?",
            text=bulk_confirm_text(action=action, count=len(ids), **arguments),
            button=f"{BULK_ACTIONS[action]}: {_count(len(ids))}", back=back,
            post_to=reverse("inbox:supervisor-bulk"),
            titles=[titles.get(task_id, task_id) for task_id in ids])
    outcomes = supervisor.tasks_bulk(supervisor=request.user, task_ids=ids, action=service,
                                      reason=request.POST.get("reason", ""), **arguments)
    titles = _titles(request, ids)
    done = [titles.get(task_id, task_id) for task_id, outcome in outcomes.items()
            if outcome == "ok"]
    if done:
        messages.success(request, f"{DONE[action]} {len(done)} of {len(ids)}: "
                                  f"{', '.join(done)}.")
    for task_id, outcome in outcomes.items():
        if outcome != "ok":
            messages.error(request, f"{titles.get(task_id, task_id)}: {outcome}")
    return redirect(back)


# What a bulk action will do, said before it is done; the board's dialog fills in the same
# words ({n}, {worker}, {clock}, {minutes}) from the bulk form.
BULK_CONFIRM = {
    "reassign": "Reassign {n} to {worker}: whoever holds them now no longer does.",
    "return": "Return {n} to their queues: whoever holds them now no longer does.",
    "extend": "Extend the {clock} clock of {n} by {minutes} min.",
    "abort": "Abort {n}: Step Functions hears TimedOut (HumanTask.TimedOut) for each, "
             "with your reason.",
}


def _count(n: int) -> str:
    return f"{n} task{'' if n == 1 else 's'}"


def bulk_confirm_text(*, action: str, count: int, worker: User | None = None,
                      clock: str = "", seconds: int = 0) -> str:
    """Return the sentence naming what the bulk action will do to count tasks."""
    return BULK_CONFIRM[action].format(
        n=_count(count), worker=worker.email if worker else "",
        clock=board.CLOCK_LABELS.get(clock, clock).lower(), minutes=seconds // 60)


def _bulk_action(request: HttpRequest, action: str) -> tuple[Any, dict[str, Any]]:
    """Return the service of the bulk action and its arguments besides the reason."""
    if action == "reassign":
        return supervisor.task_reassign, {"worker": _worker(request.POST.get("worker", ""))}
    if action == "extend":
        return supervisor.task_extend, {"clock": request.POST.get("clock", ""),
                                        "seconds": _minutes(request) * 60}
    if action == "return":
        return supervisor.task_return, {}
    return supervisor.task_abort, {}


def _titles(request: HttpRequest, ids: list[str]) -> dict[str, str]:
    """Return the titles of the tasks among ids the user may see, by id."""
    valid = []
    for task_id in ids:
        try:
            valid.append(UUID(task_id))
        except ValueError:
            continue
    return {str(pk): title for pk, title in
            visible_tasks(user=request.user).filter(pk__in=valid)
            .values_list("pk", "title")}


def _need_supervisor(request: HttpRequest) -> None:
    if not board.is_supervisor(user=request.user):
        raise PermissionDenied("Only supervisors and admins see the supervisor board.")


def _managed_task(request: HttpRequest, task_id: UUID) -> Task:
    """Return the task if the user supervises it; any other task does not exist for them."""
    try:
        return access_task(user=request.user, task_id=task_id, action="manage")
    except NotFound:
        raise Http404("No such task.") from None


def _worker(value: str) -> User:
    try:
        worker = User.objects.filter(pk=int(value), is_active=True).first()
    except ValueError:
        worker = None
    if worker is None:
        raise InboxError("Choose a worker to give the task to.")
    return worker


def _minutes(request: HttpRequest) -> int:
    try:
        return int(request.POST.get("minutes", ""))
    except ValueError:
        raise InboxError("Say by how many minutes to extend the clock.") from None


def _clock_running(task: Task, clock: str) -> bool:
    if clock == "offer":
        return task.state == TaskState.OFFERED and task.offer_deadline is not None
    if clock == "work":
        return task.state == TaskState.IN_PROGRESS and task.work_deadline is not None
    return task.overall_deadline is not None
