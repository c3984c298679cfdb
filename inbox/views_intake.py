"""Admin pages of the intake: the messages it refused, and the redrive of dead letters.

Only admins see them; to anyone else they do not exist (404). The redrive calls
inbox.services.admin.intake_redrive; its POST goes through Django's CSRF check.
"""

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST, require_safe

from accounts.decorators import admin_only
from config.errors import ExternalServiceError
from config.query import row_id
from inbox.models import IntakeError
from inbox.services.admin import intake_redrive

PAGE_SIZE = 100
# Per click: a redrive is a send and a delete per message, done within the request.
REDRIVE_BATCH = 100


@require_safe
@admin_only
def intake_errors(request: HttpRequest) -> HttpResponse:
    """List the messages the intake refused, newest first, a page at a time (keyset)."""
    errors = IntakeError.objects.order_by("-pk")
    before = request.GET.get("before", "")
    problem = ""
    if (before_id := row_id(before)) is not None:
        errors = errors.filter(pk__lt=before_id)
    elif before:
        # Unicode digits, numbers past a bigint: a mangled link, not a query to try.
        problem, before = "That page link is broken: showing the newest errors.", ""
    page = list(errors[: PAGE_SIZE + 1])
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    return render(
        request,
        "inbox/intake_errors.html",
        {
            "errors": page,
            "before": before,
            "next_before": page[-1].pk if more else "",
            "redrive_batch": REDRIVE_BATCH,
            "problem": problem,
        },
        status=400 if problem else 200,
    )


@require_POST
@admin_only
def intake_redrive_post(request: HttpRequest) -> HttpResponse:
    """Move dead letters back to the intake queue (after the admin fixed their cause)."""
    try:
        moved = intake_redrive(max_messages=REDRIVE_BATCH)
    except ExternalServiceError as exc:
        messages.error(request, f"Redrive failed: {exc.message}")
        return redirect("inbox:intake-errors")
    if moved:
        messages.success(
            request, f"Moved {moved} message(s) from the dead-letter queue back to the intake "
            "queue.")
    else:
        messages.info(request, "The dead-letter queue is empty.")
    return redirect("inbox:intake-errors")
