"""Admin pages of the inbox. None of them shows a task token."""

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join

from config.errors import ExternalServiceError
from inbox.intake import intake_redrive
from inbox.models import IntakeError, ProcessFailure

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
class ProcessFailureAdmin(admin.ModelAdmin):
    """Executions that took their failure branch, as their notices reported them."""

    list_display = ["received_at", "process_name", "process_version", "error", "execution_arn"]
    list_filter = ["process_name", "error"]
    search_fields = ["execution_arn", "process_name", "error"]
    date_hierarchy = "received_at"
    fields = ["received_at", "process_name", "process_version", "execution_arn", "error",
              "cause", "message_id"]
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
