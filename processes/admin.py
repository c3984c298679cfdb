"""Read-only admin pages: versions are immutable and only services write executions."""

import json

from django.contrib import admin
from django.http import HttpRequest
from django.utils.html import format_html

from config.admin import ReadOnlyModelAdmin
from processes.models import Execution, Process, ProcessVersion


def _pretty_json(value: object) -> str:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))


class ProcessVersionInline(admin.TabularInline):
    model = ProcessVersion
    fields = ["version", "description", "state_machine_arn", "deployed_by", "deployed_at"]
    readonly_fields = fields
    show_change_link = True
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Process)
class ProcessAdmin(ReadOnlyModelAdmin):
    list_display = ["name", "created_at"]
    search_fields = ["name"]
    inlines = [ProcessVersionInline]


@admin.register(ProcessVersion)
class ProcessVersionAdmin(ReadOnlyModelAdmin):
    list_display = ["process", "version", "state_machine_name", "deployed_by", "deployed_at"]
    list_filter = ["process"]
    list_select_related = ["process", "deployed_by"]
    search_fields = ["process__name", "spec_sha256"]
    fields = [
        "process",
        "version",
        "description",
        "spec_sha256",
        "state_machine_name",
        "state_machine_arn",
        "deployed_by",
        "deployed_at",
        "spec",
        "compiled_asl",
    ]
    readonly_fields = fields

    @admin.display(description="spec")
    def spec(self, obj: ProcessVersion) -> str:
        return format_html("<pre>{}</pre>", obj.spec_text)

    @admin.display(description="compiled ASL")
    def compiled_asl(self, obj: ProcessVersion) -> str:
        return _pretty_json(obj.asl)


@admin.register(Execution)
class ExecutionAdmin(ReadOnlyModelAdmin):
    list_display = [
        "business_key",
        "process",
        "version_number",
        "status",
        "started_at",
        "finished_at",
        "checked_at",
    ]
    list_filter = ["status", "process"]
    list_select_related = ["process", "version"]
    search_fields = ["business_key", "name", "execution_arn"]
    date_hierarchy = "started_at"
    fields = [
        "process",
        "version",
        "business_key",
        "name",
        "execution_arn",
        "status",
        "started_at",
        "finished_at",
        "checked_at",
        "started_by",
        "error",
        "cause",
        "pretty_input",
        "pretty_output",
    ]
    readonly_fields = fields

    @admin.display(description="version", ordering="version__version")
    def version_number(self, obj: Execution) -> int:
        return obj.version.version

    @admin.display(description="input")
    def pretty_input(self, obj: Execution) -> str:
        return _pretty_json(obj.input)

    @admin.display(description="output")
    def pretty_output(self, obj: Execution) -> str:
        return _pretty_json(obj.output)
