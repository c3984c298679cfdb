"""Admin pages of the team: workers by skills, with proficiency, availability and capacity
(one cell or row at a time, or one skill to many workers at once); the skills themselves
(created and edited); and the audit log (at the end).

Only admins see them; to anyone else they do not exist (404); a change also needs a recent
sign-in (accounts.decorators.admin_only). Each edit calls the services of accounts
(skill_create, skill_update, worker_skill_set, worker_skills_grant, worker_skill_remove,
worker_set_availability, worker_set_capacity), which write the audit log, then
returns the tasks a worker may no longer hold (inbox.services.access); every POST goes
through Django's CSRF check. The other team pages are their apps': intake errors in
inbox.views_intake, processes in processes.views.
"""

from dataclasses import dataclass, field

from django.contrib import messages
from django.db import transaction
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from accounts import services
from accounts.decorators import admin_only
from accounts.forms import (
    CAPACITY_MAX,
    PROFICIENCIES,
    BulkGrantForm,
    SkillForm,
    WorkerRowForm,
    skill_field,
)
from accounts.models import AuditAction, AuditEvent, Availability, Skill, User
from accounts.selectors import audit_entries, team_members, team_proficiencies, team_workers
from config.query import row_id, text_ok
from inbox.services.access import worker_access_recheck

PAGE_SIZE = 100
# The longest worker search the matrix takes (an e-mail address is at most 254).
QUERY_MAX = 254
# Where the matrix keeps the last change a page without JavaScript may undo.
UNDO_KEY = "team_undo"


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
    selected: bool = False


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


def _place(request: HttpRequest, source: dict) -> tuple[str, str]:
    """Return the matrix's page cursor and worker search as posted or asked for; a
    mangled one only loses the place."""
    after, query = source.get("after", ""), source.get("q", "").strip()
    return (after if text_ok(after, longest=254) else "",
            query if text_ok(query, longest=QUERY_MAX) else "")


def _skills_url(*, after: str = "", query: str = "", **more: object) -> str:
    params = {key: value for key, value in (("q", query), ("after", after)) if value}
    params.update({key: value for key, value in more.items() if value not in ("", None)})
    return reverse("team:skills") + (f"?{urlencode(params)}" if params else "")


def _skills_page(request: HttpRequest, *, after: str, query: str = "",
                 edited: Row | None = None, focus: tuple[int, str] | None = None,
                 bulk: BulkGrantForm | None = None, status: int = 200) -> HttpResponse:
    """Render the matrix page; edited replaces its worker's row (a refused edit), bulk is
    a refused bulk grant shown as it was posted."""
    skills = list(Skill.objects.order_by("slug"))
    workers = team_workers(after=after, query=query, limit=PAGE_SIZE + 1)
    more = len(workers) > PAGE_SIZE
    workers = workers[:PAGE_SIZE]
    rows = _rows(workers, skills)
    if edited is not None:
        rows = [edited if row.worker.pk == edited.worker.pk else row for row in rows]
    if bulk is not None:
        selected = set(bulk.data.getlist("worker"))
        for row in rows:
            row.selected = str(row.worker.pk) in selected
        if "worker" in bulk.errors and rows:
            rows[0].focus = "pick"  # where workers are selected
    if focus is not None:
        for row in rows:
            if row.worker.pk == focus[0]:
                row.focus = focus[1]
    elif edited is None and bulk is None and rows and rows[0].cells:
        rows[0].focus = rows[0].cells[0].name
    undo = request.session.pop(UNDO_KEY, None) if request.method == "GET" else None
    return render(
        request,
        "accounts/skills.html",
        {
            "skills": skills,
            "rows": rows,
            "after": after,
            "query": query,
            "next_after": workers[-1].email if more else "",
            "next_query": urlencode({key: value for key, value in
                                     (("q", query), ("after", workers[-1].email if more else ""))
                                     if value}) if more else "",
            "proficiencies": PROFICIENCIES,
            "availabilities": Availability.choices,
            "capacity_max": CAPACITY_MAX,
            "bulk": bulk or BulkGrantForm(workers=team_members()),
            "bulk_problems": bulk.problems() if bulk is not None else {},
            "undo": undo,
        },
        status=status,
    )


@require_safe
@admin_only
def skills(request: HttpRequest) -> HttpResponse:
    """Show workers by skills with each proficiency, availability and capacity, editable.

    q: only the workers whose e-mail or name holds it; after: the page after this e-mail.
    """
    focus = None
    worker_id, name = row_id(request.GET.get("worker")), request.GET.get("field", "")
    if worker_id is not None and name:
        focus = (worker_id, name)  # a link back to the cell edited: a bad one focuses none
    after, query = request.GET.get("after", ""), request.GET.get("q", "").strip()
    if not text_ok(after, longest=254) or not text_ok(query, longest=QUERY_MAX):
        messages.error(request, "That page link is broken (its search or page is too long "
                                "or holds a NUL): showing the first workers.")
        return _skills_page(request, after="", focus=focus, status=400)
    return _skills_page(request, after=after, query=query, focus=focus)


def _wants_json(request: HttpRequest) -> bool:
    """Return whether the caller is the matrix's script (a cell saved with fetch)."""
    return "application/json" in request.headers.get("Accept", "")


def _shown(value: object) -> str:
    """Return a value as the matrix's cell shows it ("" for a skill not held)."""
    if value is None:
        return ""
    return str(getattr(value, "value", value))


@require_POST
@admin_only
def worker_save(request: HttpRequest, worker_id: int) -> HttpResponse:
    """Save one worker's cells: skills held and their proficiency, availability, capacity.

    The posted fields are a Django form (accounts.forms.WorkerRowForm) bound to those
    fields only: a whole row (the page without JavaScript) or one cell (the matrix's script,
    which asks for JSON). Only fields that differ are changed. A bad value changes nothing:
    the page comes back (or the JSON says) with the error at its cell. The answer carries
    the values before the change, which undo posts back to this same route.
    """
    worker = get_object_or_404(User, pk=worker_id, is_active=True)
    skills = list(Skill.objects.order_by("slug"))
    held = team_proficiencies(workers=[worker])
    after, query = _place(request, request.POST)
    as_json = _wants_json(request)

    row_form = WorkerRowForm(data=request.POST, skills=skills)
    if not row_form.is_valid():
        row = _row_refused(worker, skills, row_form)
        text = f"Nothing saved for {worker.email}: {'; '.join(row.errors.values())}"
        if as_json:
            return JsonResponse({"message": text, "errors": row.errors}, status=400)
        messages.error(request, text)
        return _skills_page(request, after=after, query=query, edited=row, status=400)
    availability = row_form.cleaned_data.get("availability")
    capacity = row_form.cleaned_data.get("capacity")

    changes: list[str] = []
    undo: dict[str, str] = {}  # field: its value before, as the page posts it
    with transaction.atomic():
        for skill, proficiency in row_form.proficiencies().items():
            before = held.get((worker.pk, skill.pk))
            if proficiency == before:
                continue
            undo[skill_field(skill)] = _shown(before)
            if proficiency is None:
                services.worker_skill_remove(worker=worker, skill=skill,
                                             actor=request.user, request=request)
                changes.append(f"{skill.name} removed")
            else:
                services.worker_skill_set(worker=worker, skill=skill, proficiency=proficiency,
                                          actor=request.user, request=request)
                changes.append(f"{skill.name} {proficiency}")
        if availability is not None and availability != worker.availability:
            undo["availability"] = worker.availability
            services.worker_set_availability(worker=worker, availability=availability,
                                             actor=request.user, request=request)
            changes.append(availability.label.lower())
        if capacity is not None and capacity != worker.capacity:
            undo["capacity"] = str(worker.capacity)
            services.worker_set_capacity(worker=worker, capacity=capacity,
                                         actor=request.user, request=request)
            changes.append(f"capacity {capacity}")
    said = [f"Saved {worker.email}: {', '.join(changes)}." if changes
            else f"Nothing changed for {worker.email}."]
    # After the commit: the tasks the new skills no longer allow go back to their queues,
    # each in a transaction of its own (a task decided meanwhile is left as it is).
    returned = worker_access_recheck(worker=worker, actor=request.user)
    if returned:
        said.append(f"{len(returned)} held task(s) of {worker.email} went back to their "
                    "queues: the skills saved no longer allow them.")
    if as_json:
        return JsonResponse({
            "message": " ".join(said),
            "saved": {name: _shown(row_form.cleaned_data[name]) for name in row_form.fields},
            "undo": undo,
            "undo_label": _undo_label(worker, skills, undo),
        })
    (messages.success if changes else messages.info)(request, said[0])
    if returned:
        messages.info(request, said[1])
    if undo:
        request.session[UNDO_KEY] = {"worker": worker.pk, "fields": undo,
                                     "label": _undo_label(worker, skills, undo)}
    return redirect(_skills_url(after=after, query=query, worker=worker.pk,
                                field=request.POST.get("focus") or "save"))


def _undo_label(worker: User, skills: list[Skill], undo: dict[str, str]) -> str:
    """Return what undoing these changes does, e.g. "Invoice review of ana@… back to 2"."""
    names = {skill_field(skill): skill.name for skill in skills}
    names.update(availability="Availability", capacity="Capacity")
    return "; ".join(f"{names[name]} of {worker.email} back to {value or 'not held'}"
                     for name, value in undo.items())


@require_POST
@admin_only
def bulk_grant(request: HttpRequest) -> HttpResponse:
    """Grant one skill at one proficiency to the workers checked on the matrix, all at once.

    One service call in one transaction (accounts.services.worker_skills_grant), audited
    per worker. A bad choice grants nothing: the page comes back with the choices as they
    were posted (workers still checked) and what is wrong at its field.
    """
    after, query = _place(request, request.POST)
    form = BulkGrantForm(data=request.POST, workers=team_members())
    if not form.is_valid():
        messages.error(request, "Nothing granted: " + " ".join(form.problems().values()))
        return _skills_page(request, after=after, query=query, bulk=form, status=400)
    workers, skill = list(form.cleaned_data["worker"]), form.cleaned_data["skill"]
    proficiency = form.cleaned_data["proficiency"]
    before = services.worker_skills_grant(workers=workers, skill=skill,
                                          proficiency=proficiency, actor=request.user,
                                          request=request)
    changed = [worker for worker, was in before.items() if was != proficiency]
    same = len(before) - len(changed)
    text = (f"Granted {skill.name} at {proficiency} to {len(changed)} worker(s): "
            + (", ".join(worker.email for worker in changed) or "none") + "."
            + (f" {same} held it at {proficiency} already." if same else ""))
    messages.success(request, text)
    # After the commit: a lowered proficiency may no longer allow a task held.
    for worker, was in before.items():
        if was is not None and was > proficiency:
            returned = worker_access_recheck(worker=worker, actor=request.user)
            if returned:
                messages.info(request, f"{len(returned)} held task(s) of {worker.email} "
                                       "went back to their queues: the skills saved no "
                                       "longer allow them.")
    return redirect(_skills_url(after=after, query=query))


# Skills: the list, a new skill, a skill's settings ---------------------------------------


@require_safe
@admin_only
def skill_list(request: HttpRequest) -> HttpResponse:
    """List the skills with their dispatch, visibility and how many workers hold them."""
    rows = Skill.objects.annotate(workers=Count("worker_skills")).order_by("slug")
    return render(request, "accounts/skill_list.html",
                  {"skills": rows, "focus": request.GET.get("skill", "")})


@require_http_methods(["GET", "HEAD", "POST"])
@admin_only
def skill_create(request: HttpRequest) -> HttpResponse:
    """Create a skill from its form (accounts.services.skill_create, audited)."""
    form = SkillForm(data=request.POST if request.method == "POST" else None)
    if request.method == "POST" and form.is_valid():
        skill = services.skill_create(slug=form.cleaned_data["slug"], **form.settings(),
                                      actor=request.user, request=request)
        messages.success(request, f"Created the skill {skill.name} ({skill.slug}), "
                                  f"{skill.get_dispatch_display().split(':')[0].lower()}. "
                                  "Grant it to workers on the Skills page.")
        return redirect(f"{reverse('team:skill-list')}?{urlencode({'skill': skill.slug})}")
    return _skill_form(request, form, skill=None)


@require_http_methods(["GET", "HEAD", "POST"])
@admin_only
def skill_edit(request: HttpRequest, slug: str) -> HttpResponse:
    """Change a skill's settings (accounts.services.skill_update, audited); not its slug."""
    skill = get_object_or_404(Skill, slug=slug)
    form = SkillForm(data=request.POST if request.method == "POST" else None,
                     instance=Skill.objects.get(pk=skill.pk))  # the form's own copy
    if request.method == "POST" and form.is_valid():
        changed = services.skill_update(skill=skill, **form.settings(), actor=request.user,
                                        request=request)
        if changed:
            names = [SkillForm.base_fields[name].label or name for name in changed]
            messages.success(request, f"Saved {skill.name} ({skill.slug}): "
                                      f"{', '.join(str(name).lower() for name in names)}.")
        else:
            messages.info(request, f"Nothing changed for {skill.name} ({skill.slug}).")
        return redirect(f"{reverse('team:skill-list')}?{urlencode({'skill': skill.slug})}")
    return _skill_form(request, form, skill=skill)


def _skill_form(request: HttpRequest, form: SkillForm, *, skill: Skill | None) -> HttpResponse:
    if form.is_bound:
        messages.error(request, "Nothing saved: " + " ".join(
            f"{form.fields[name].label if name in form.fields else ''}: {errors[0]}".lstrip(": ")
            for name, errors in form.errors.items()))
    return render(request, "accounts/skill_form.html",
                  {"form": form, "skill": skill, "first_error": next(iter(form.errors), "")},
                  status=400 if form.is_bound else 200)


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
