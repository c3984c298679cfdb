"""Admin pages of the inbox. None of them shows a task token."""

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from config.admin import ReadOnlyModelAdmin
from config.errors import ExternalServiceError
from inbox.models import (
    ExecutionTimeline,
    IntakeError,
    Outbox,
    ProcessFailure,
    Task,
    TaskEvent,
)
from inbox.services.admin import intake_redrive, outbox_requeue

# Intake: refused messages and process failures ----------------------------------------------

# Per click: a redrive is a send and a delete per message, done within the admin request.
REDRIVE_BATCH = 100


@admin.register(IntakeError)
class IntakeErrorAdmin(admin.ModelAdmin):
    """Refused intake messages; admins fix the cause, redrive the dead letters, clear rows."""

    list_display = ["received_at", "message_id", "receive_count", "problem_summary",
                    "execution_arn", "stage"]
    search_fields = ["message_id", "execution_arn", "stage"]
    date_hierarchy = "received_at"
    fields = ["message_id", "received_at", "receive_count", "problem_list", "execution_arn",
              "stage"]
    readonly_fields = fields
    actions = ["redrive_dead_letters"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_redrive_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("inbox.change_intakeerror")

    @admin.display(description="problems")
    def problem_summary(self, obj: IntakeError) -> str:
        text = "; ".join(obj.problems)
        return text if len(text) <= 120 else text[:117] + "..."

    @admin.display(description="problems")
    def problem_list(self, obj: IntakeError) -> str:
        return format_html("<ul>{}</ul>", format_html_join("", "<li>{}</li>",
                                                           ((p,) for p in obj.problems)))

    @admin.action(
        description=f"Redrive up to {REDRIVE_BATCH} dead letters to the intake queue "
        "(after fixing the cause; the selection does not matter)",
        permissions=["redrive"],
    )
    def redrive_dead_letters(self, request: HttpRequest, queryset: QuerySet) -> None:
        try:
            moved = intake_redrive(max_messages=REDRIVE_BATCH)
        except ExternalServiceError as exc:
            self.message_user(request, f"Redrive failed: {exc.message}", messages.ERROR)
            return
        self.message_user(
            request,
            f"Moved {moved} message(s) from the dead-letter queue back to the intake queue."
            if moved else "The dead-letter queue is empty.",
            messages.SUCCESS if moved else messages.INFO,
        )


@admin.register(ProcessFailure)
class ProcessFailureAdmin(ReadOnlyModelAdmin):
    """Executions that took their failure branch, as their notices reported them."""

    list_display = ["received_at", "process_name", "process_version", "error", "execution_arn"]
    list_filter = ["process_name", "error"]
    search_fields = ["execution_arn", "process_name", "error"]
    date_hierarchy = "received_at"
    fields = ["received_at", "process_name", "process_version", "execution_arn", "error",
              "cause", "message_id"]
    readonly_fields = fields


# Tasks, their history and callbacks ------------------------------------------------------------


class TaskEventInline(admin.TabularInline):
    model = TaskEvent
    fields = ["version", "action", "from_state", "to_state", "actor_label", "reason", "at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["version"]

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Task)
class TaskAdmin(ReadOnlyModelAdmin):
    """Tasks, read-only: state changes go through the services, never through the admin.

    The token fields are never listed, shown or searchable.
    """

    list_display = ["title", "state", "skill", "assignee", "priority", "created_at",
                    "overall_deadline"]
    list_filter = ["state", "skill", "process_name"]
    search_fields = ["title", "execution_arn", "stage"]
    list_select_related = ["skill", "assignee"]
    date_hierarchy = "created_at"
    fields = ["id", "state", "version", "title", "process_name", "process_version", "stage",
              "execution_arn", "skill", "min_proficiency", "priority", "form", "input",
              "answer", "reason", "assignee", "exclude_workers_of", "entered_at",
              "created_at", "offer_deadline", "work_deadline", "overall_deadline",
              "closed_at", "on_timeout"]
    readonly_fields = fields
    inlines = [TaskEventInline]


@admin.register(Outbox)
class OutboxAdmin(ReadOnlyModelAdmin):
    """Callbacks to Step Functions: what was sent, what is waiting, what is dead and why."""

    list_display = ["created_at", "task", "kind", "status", "attempts", "next_attempt_at",
                    "sent_at", "last_error"]
    list_filter = ["status", "kind"]
    list_select_related = ["task"]
    fields = ["task", "decision_version", "kind", "status", "attempts", "next_attempt_at",
              "sent_at", "last_error", "error", "cause", "output", "created_at"]
    readonly_fields = fields
    actions = ["requeue"]

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("inbox.view_outbox") and request.user.is_staff

    @admin.action(description="Requeue dead callbacks (safe: a landed one is reconciled)",
                  permissions=["requeue"])
    def requeue(self, request: HttpRequest, queryset: QuerySet) -> None:
        requeued = sum(outbox_requeue(outbox_id=pk) for pk in queryset.values_list("pk",
                                                                                    flat=True))
        self.message_user(request, f"Requeued {requeued} callback(s).", messages.SUCCESS)


@admin.register(ExecutionTimeline)
class ExecutionTimelineAdmin(ReadOnlyModelAdmin):
    """Executions' timelines as the worker last read them (stages only, never a token)."""

    list_display = ["execution_arn", "status", "fetched_at", "checked_at", "error_code"]
    list_filter = ["status", "error_code"]
    search_fields = ["execution_arn"]
    fields = ["execution_arn", "status", "fetched_at", "checked_at", "truncated", "stages",
              "error_code", "error"]
    readonly_fields = fields
