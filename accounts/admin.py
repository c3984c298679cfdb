from allauth.account.forms import ResetPasswordForm
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from accounts.models import AuditEvent, Skill, User, WorkerSkill
from accounts.roles import Role
from accounts.services import user_set_roles
from config.admin import ReadOnlyModelAdmin


class WorkerSkillInline(admin.TabularInline):
    model = WorkerSkill
    extra = 1
    autocomplete_fields = ["skill"]


class SkillWorkerInline(admin.TabularInline):
    model = WorkerSkill
    extra = 1
    autocomplete_fields = ["worker"]
    verbose_name = "worker"
    verbose_name_plural = "workers"


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    ordering = ["email"]
    list_display = ["email", "first_name", "last_name", "availability", "capacity", "is_active"]
    list_filter = ["availability", "is_active", "is_staff", "groups"]
    search_fields = ["email", "first_name", "last_name"]
    inlines = [WorkerSkillInline]
    actions = ["send_invitation"]
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("Name", {"fields": ("first_name", "last_name")}),
        ("Work", {"fields": ("availability", "capacity")}),
        ("Roles and access", {"fields": ("is_active", "groups", "is_staff", "is_superuser")}),
        ("Dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = (
        (
            None,
            {
                "classes": ("wide",),
                "fields": ("email", "usable_password", "password1", "password2"),
            },
        ),
    )

    def save_related(self, request: HttpRequest, form: ModelForm, formsets: list,
                     change: bool) -> None:
        """Save the form's groups, with the role groups changed through user_set_roles.

        The form would set the role groups directly, past the service that keeps is_staff
        with the admin role and writes ROLES_CHANGED to the audit log: it saves the other
        groups and leaves the roles as they were, then the service sets the chosen ones.
        """
        chosen = form.cleaned_data.get("groups")
        if chosen is None:  # a form without the groups field (adding a user)
            super().save_related(request, form, formsets, change)
            return
        user = form.instance
        roles = [Role(group.name) for group in chosen if group.name in Role.values]
        held = Group.objects.filter(user=user, name__in=Role.values) if change else []
        form.cleaned_data["groups"] = [
            *(group for group in chosen if group.name not in Role.values), *held]
        super().save_related(request, form, formsets, change)
        user_set_roles(user=user, roles=roles, actor=request.user, request=request)

    @admin.action(description="Send an invitation (a link to set a password)")
    def send_invitation(self, request: HttpRequest, queryset: QuerySet[User]) -> None:
        sent = 0
        for user in queryset.filter(is_active=True):
            form = ResetPasswordForm(data={"email": user.email})
            if form.is_valid():
                form.save(request)
                sent += 1
        self.message_user(request, f"Sent {sent} invitation(s).", messages.SUCCESS)


@admin.register(Skill)
class SkillAdmin(admin.ModelAdmin):
    list_display = ["slug", "name", "dispatch"]
    list_filter = ["dispatch"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [SkillWorkerInline]


@admin.register(WorkerSkill)
class WorkerSkillAdmin(admin.ModelAdmin):
    list_display = ["worker", "skill", "proficiency", "granted_at"]
    list_filter = ["skill", "proficiency"]
    list_editable = ["proficiency"]
    search_fields = ["worker__email", "skill__slug"]
    autocomplete_fields = ["worker", "skill"]


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    """The audit log, to read: nobody adds, changes or deletes an entry (the team's audit
    page, /team/audit/, reads it too)."""

    list_display = ["at", "action", "actor_email", "subject", "ip"]
    list_filter = ["action"]
    search_fields = ["actor_email", "subject"]
    date_hierarchy = "at"
