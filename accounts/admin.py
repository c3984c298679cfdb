from allauth.account.forms import ResetPasswordForm
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.db.models import QuerySet
from django.http import HttpRequest
from knox.models import AuthToken as KnoxAuthToken

from accounts.api_tokens import api_token_revoke
from accounts.models import ApiToken, Skill, User, WorkerSkill
from config.errors import NotFound


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


# knox registers its own token model, which KNOX_TOKEN_MODEL replaces with ApiToken.
if admin.site.is_registered(KnoxAuthToken):
    admin.site.unregister(KnoxAuthToken)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """API tokens, read-only (never the digest); made on the tokens page, revoked here too."""

    list_display = ["name", "user", "scope", "created_by", "created", "expiry", "last_used_at"]
    list_filter = ["scope"]
    search_fields = ["name", "user__email"]
    fields = ["name", "user", "scope", "created_by", "created", "expiry", "last_used_at"]
    readonly_fields = fields
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens (their callers get 401)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = 0
        for token_id in queryset.values_list("pk", flat=True):
            try:
                api_token_revoke(token_id=token_id, user=None, actor=request.user,
                                 request=request)
            except NotFound:
                continue  # revoked meanwhile
            revoked += 1
        self.message_user(request, f"Revoked {revoked} token(s).", messages.SUCCESS)
