"""Admin pages of the team: workers by skills, with proficiency, availability and capacity;
and the audit log (at the end).

Only admins see them; to anyone else they do not exist (404). Each edit calls the services
of accounts (worker_skill_set, worker_skill_remove, worker_set_availability,
worker_set_capacity), then returns the tasks a worker may no longer hold
(inbox.services.access); every POST goes through Django's CSRF check. The other team pages
are their apps': intake errors in inbox.views_intake, processes in processes.views.
"""

from dataclasses import dataclass, field

from django.contrib import messages
from django.db import transaction
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_POST, require_safe

from accounts import services
from accounts.decorators import admin_only
from accounts.forms import CAPACITY_MAX, PROFICIENCIES, WorkerRowForm, skill_field
from accounts.models import AuditAction, AuditEvent, Availability, Skill, User
from accounts.selectors import audit_entries, team_proficiencies, team_workers
from config.query import row_id, text_ok
from inbox.services.access import worker_access_recheck

PAGE_SIZE = 100


@dataclass
class Cell:
    skill: Skill
    name: str
    value: str
    error: str = ""


@dataclass
class Row:
    worker: User
    cells: list[Cell]
    availability: str
    capacity: str
    errors: dict[str, str] = field(default_factory=dict)
    focus: str = ""


def _rows(workers: list[User], skills: list[Skill]) -> list[Row]:
    held = team_proficiencies(workers=workers)
    return [
        Row(
            worker=worker,
            cells=[
                Cell(skill=skill, name=skill_field(skill),
                     value=str(held.get((worker.pk, skill.pk), "")))
                for skill in skills
            ],
            availability=worker.availability,
            capacity=str(worker.capacity),
        )
        for worker in workers
    ]


def _row_refused(worker: User, skills: list[Skill], row_form: WorkerRowForm) -> Row:
    """Return the worker's row showing what was posted, with each error at its cell."""
    row = _rows([worker], skills)[0]
    row.errors = row_form.problems()
    for cell in row.cells:
        if cell.name in row_form.fields:
            cell.value = row_form[cell.name].value()
            cell.error = row.errors.get(cell.name, "")
    if "availability" in row_form.fields:
        row.availability = row_form["availability"].value()
    if "capacity" in row_form.fields:
        row.capacity = row_form["capacity"].value()
    row.focus = next(iter(row.errors))
    return row


def _skills_page(request: HttpRequest, *, after: str, edited: Row | None = None,
                 focus: tuple[int, str] | None = None, status: int = 200) -> HttpResponse:
    """Render the matrix page; edited replaces its worker's row (a refused edit)."""
    skills = list(Skill.objects.order_by("slug"))
    workers = team_workers(after=after, limit=PAGE_SIZE + 1)
    more = len(workers) > PAGE_SIZE
    workers = workers[:PAGE_SIZE]
    rows = _rows(workers, skills)
    if edited is not None:
        rows = [edited if row.worker.pk == edited.worker.pk else row for row in rows]
    if focus is not None:
        for row in rows:
            if row.worker.pk == focus[0]:
                row.focus = focus[1]
    elif edited is None and rows and rows[0].cells:
        rows[0].focus = rows[0].cells[0].name
    return render(
        request,
        "accounts/skills.html",
        {
            "skills": skills,
            "rows": rows,
            "after": after,
            "next_after": workers[-1].email if more else "",
            "proficiencies": PROFICIENCIES,
            "availabilities": Availability.choices,
            "capacity_max": CAPACITY_MAX,
        },
        status=status,
    )


@require_safe
@admin_only
def skills(request: HttpRequest) -> HttpResponse:
    """Show workers by skills with each proficiency, availability and capacity, editable."""
    focus = None
    worker_id, name = row_id(request.GET.get("worker")), request.GET.get("field", "")
    if worker_id is not None and name:
        focus = (worker_id, name)  # a link back to the cell edited: a bad one focuses none
    after = request.GET.get("after", "")
    if not text_ok(after, longest=254):
        messages.error(request, "That page link is broken: showing the first workers.")
        return _skills_page(request, after="", focus=focus, status=400)
    return _skills_page(request, after=after, focus=focus)


@require_POST
@admin_only
def worker_save(request: HttpRequest, worker_id: int) -> HttpResponse:
    """Save one worker's row: skills held and their proficiency, availability, capacity.

    The row is a Django form (accounts.forms.WorkerRowForm) bound to the fields posted;
    only those that differ are changed. A bad value changes nothing: the page comes back
    with the error at its cell.
    """
    worker = get_object_or_404(User, pk=worker_id, is_active=True)
    skills = list(Skill.objects.order_by("slug"))
    held = team_proficiencies(workers=[worker])
    after = request.POST.get("after", "")
    if not text_ok(after, longest=254):
        after = ""  # where the page was: a mangled one only loses the place, not the edit

    row_form = WorkerRowForm(data=request.POST, skills=skills)
    if not row_form.is_valid():
        row = _row_refused(worker, skills, row_form)
        messages.error(request, f"Nothing saved for {worker.email}: "
                                f"{'; '.join(row.errors.values())}")
        return _skills_page(request, after=after, edited=row, status=400)
    availability = row_form.cleaned_data.get("availability")
    capacity = row_form.cleaned_data.get("capacity")

    changes: list[str] = []
    with transaction.atomic():
        for skill, proficiency in row_form.proficiencies().items():
            if proficiency == held.get((worker.pk, skill.pk)):
                continue
            if proficiency is None:
                services.worker_skill_remove(worker=worker, skill=skill,
                                             actor=request.user, request=request)
                changes.append(f"{skill.name} removed")
            else:
                services.worker_skill_set(worker=worker, skill=skill, proficiency=proficiency,
                                          actor=request.user, request=request)
                changes.append(f"{skill.name} {proficiency}")
        if availability is not None and availability != worker.availability:
            services.worker_set_availability(worker=worker, availability=availability)
            changes.append(availability.label.lower())
        if capacity is not None and capacity != worker.capacity:
            services.worker_set_capacity(worker=worker, capacity=capacity)
            changes.append(f"capacity {capacity}")
    if changes:
        messages.success(request, f"Saved {worker.email}: {', '.join(changes)}.")
    else:
        messages.info(request, f"Nothing changed for {worker.email}.")
    # After the commit: the tasks the new skills no longer allow go back to their queues,
    # each in a transaction of its own (a task decided meanwhile is left as it is).
    returned = worker_access_recheck(worker=worker, actor=request.user)
    if returned:
        messages.info(request, f"{len(returned)} held task(s) of {worker.email} went back to "
                               "their queues: the skills saved no longer allow them.")

    query = {"worker": worker.pk, "field": request.POST.get("focus") or "save"}
    if after:
        query["after"] = after
    return redirect(f"{reverse('team:skills')}?{urlencode(query)}")


# The audit log ---------------------------------------------------------------------------

AUDIT_PAGE_SIZE = 50

@require_safe
@admin_only
def audit_log(request: HttpRequest) -> HttpResponse:
    """List the audit log, newest first, a page at a time (keyset), by action and user.

    A filter or cursor that cannot be read answers 400 with the form and what is wrong.
    """
    action = request.GET.get("action", "").strip()
    email = request.GET.get("email", "").strip()
    before = request.GET.get("before", "").strip()
    problems = []
    if action and action not in AuditAction.values:
        problems.append(f"The action {action[:40]!r} is not one of the log's actions.")
    if not text_ok(email, longest=254):
        problems.append("The e-mail address is not one a user can have: it is longer than "
                        "254 characters or holds a NUL.")
    if before and row_id(before) is None:
        problems.append(f"The page cursor {before[:40]!r} is not a page of this log: "
                        "start again from the newest entries.")
    entries: list[AuditEvent] = []
    more = False
    if not problems:
        entries = audit_entries(action=action, email=email,
                                before=row_id(before),
                                limit=AUDIT_PAGE_SIZE + 1)
        more = len(entries) > AUDIT_PAGE_SIZE
        entries = entries[:AUDIT_PAGE_SIZE]
    filters = {key: value for key, value in (("action", action), ("email", email)) if value}
    return render(
        request,
        "accounts/audit.html",
        {
            "rows": [(entry, _detail_text(entry.detail)) for entry in entries],
            "actions": AuditAction.choices,
            "action": action,
            "email": email,
            "before": before,
            "problems": problems,
            "newest_query": urlencode(filters),
            "older_query": urlencode({**filters, "before": entries[-1].pk}) if more else "",
        },
        status=400 if problems else 200,
    )


def _detail_text(detail: dict) -> str:
    """Return an entry's details as "key=value" pairs (lists joined with commas)."""

    def shown(value: object) -> str:
        if value is None or value == []:
            return "none"
        if isinstance(value, list):
            return ",".join(str(item) for item in value)
        return str(value)

    return " ".join(f"{key}={shown(value)}" for key, value in detail.items())
