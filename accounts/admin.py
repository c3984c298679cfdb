from typing import Any

from allauth.account.forms import ResetPasswordForm
from django.contrib import admin, messages
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.models import Group
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from knox.models import AuthToken as KnoxAuthToken

from accounts import services
from accounts.api_tokens import api_token_revoke
from accounts.models import ApiToken, AuditEvent, Skill, User, WorkerSkill
from accounts.roles import Role
from accounts.services import user_set_roles
from config.admin import ReadOnlyModelAdmin
from config.errors import NotFound


class WorkerSkillsThroughServices:
    """Save a WorkerSkill inline through accounts.services (audited), then recheck access.

    Each grant, change and removal is worker_skill_set or worker_skill_remove with the
    admin as actor; afterwards every worker concerned gets inbox.services.access
    .worker_access_recheck, which returns the tasks they may no longer hold. It runs in the
    admin's transaction (changeform_view's atomic): the skill change and the tasks it
    returns commit together or not at all; their effects (offers) run after commit.
    """

    def save_formset(self, request: HttpRequest, form: Any, formset: Any,
                     change: bool) -> None:
        if formset.model is not WorkerSkill:
            super().save_formset(request, form, formset, change)  # type: ignore[misc]
            return
        links = formset.save(commit=False)
        touched: dict[int, User] = {}
        for link, fields in formset.changed_objects:
            if {"worker", "skill"} & set(fields):
                # Another worker or skill is another grant: the one it replaces goes.
                before = WorkerSkill.objects.select_related("worker", "skill").get(pk=link.pk)
                services.worker_skill_remove(worker=before.worker, skill=before.skill,
                                             actor=request.user, request=request)
                touched[before.worker_id] = before.worker
        for link in formset.deleted_objects:
            services.worker_skill_remove(worker=link.worker, skill=link.skill,
                                         actor=request.user, request=request)
            touched[link.worker_id] = link.worker
        for link in links:
            services.worker_skill_set(worker=link.worker, skill=link.skill,
                                      proficiency=link.proficiency, actor=request.user,
                                      request=request)
            touched[link.worker_id] = link.worker
        for worker in touched.values():
            access_recheck(request, worker)


def access_recheck(request: HttpRequest, worker: User) -> list[Any]:
    """Return to their queues the tasks worker may no longer hold; say so to the admin."""
    from inbox.services.access import worker_access_recheck

    returned = worker_access_recheck(worker=worker, actor=request.user)
    if returned:
        messages.info(request, f"{len(returned)} held task(s) of {worker.email} went back "
                               "to their queues: they may no longer hold them.")
    return returned


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
class UserAdmin(WorkerSkillsThroughServices, BaseUserAdmin):
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

    def save_formset(self, request: HttpRequest, form: Any, formset: Any,
                     change: bool) -> None:
        super().save_formset(request, form, formset, change)
        if formset.model is WorkerSkill:
            self.access_recheck_after_save(request, form.instance)

    def access_recheck_after_save(self, request: HttpRequest, user: User) -> None:
        """Return the tasks the user may no longer hold once this save is made.

        Called after the skills inline is saved, which Django does after the user's fields
        (is_active) and groups (roles): it sees all of this save's changes.
        """
        access_recheck(request, user)

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
        # After the roles too: a worker who lost the worker role gives back what they hold.
        self.access_recheck_after_save(request, user)

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
class SkillAdmin(WorkerSkillsThroughServices, admin.ModelAdmin):
    list_display = ["slug", "name", "dispatch", "peer_visibility", "weight"]
    list_filter = ["dispatch", "peer_visibility"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    fields = ["slug", "name", "description", "dispatch", "peer_visibility", "weight"]
    inlines = [SkillWorkerInline]

    def get_readonly_fields(self, request: HttpRequest, obj: Skill | None = None) -> list[str]:
        # Specs and tasks on their way name the skill by its slug (as the team pages say).
        return ["slug"] if obj is not None else []

    def get_prepopulated_fields(self, request: HttpRequest,
                                obj: Skill | None = None) -> dict[str, list[str]]:
        return {} if obj is not None else dict(self.prepopulated_fields)

    def save_model(self, request: HttpRequest, obj: Skill, form: Any, change: bool) -> None:
        """Create or change the skill through accounts.services, audited as on our pages."""
        if change:
            changed = {name: form.cleaned_data[name] for name in services.SKILL_SETTINGS
                       if name in form.changed_data}
            if changed:
                services.skill_update(skill=obj, actor=request.user, request=request,
                                      **changed)
            return
        skill = services.skill_create(
            slug=obj.slug, name=obj.name, description=obj.description, dispatch=obj.dispatch,
            peer_visibility=obj.peer_visibility, weight=obj.weight, actor=request.user,
            request=request)
        # The admin goes on with this object (its inlines, its message): the saved row.
        obj.pk, obj.created_at = skill.pk, skill.created_at
        obj._state.adding, obj._state.db = False, skill._state.db


@admin.register(WorkerSkill)
class WorkerSkillAdmin(admin.ModelAdmin):
    """Skills held, editable one by one and in the list; every write is a service call."""

    list_display = ["worker", "skill", "proficiency", "granted_at"]
    list_filter = ["skill", "proficiency"]
    list_editable = ["proficiency"]
    search_fields = ["worker__email", "skill__slug"]
    autocomplete_fields = ["worker", "skill"]

    def get_readonly_fields(self, request: HttpRequest, obj: WorkerSkill | None = None
                            ) -> list[str]:
        # Another worker or skill is another grant: remove this one and add that one.
        return ["worker", "skill"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: WorkerSkill, form: Any,
                   change: bool) -> None:
        saved = services.worker_skill_set(worker=obj.worker, skill=obj.skill,
                                          proficiency=obj.proficiency, actor=request.user,
                                          request=request)
        obj.pk = saved.pk  # the admin's log and redirect name the row the service wrote
        access_recheck(request, obj.worker)

    def delete_model(self, request: HttpRequest, obj: WorkerSkill) -> None:
        services.worker_skill_remove(worker=obj.worker, skill=obj.skill, actor=request.user,
                                     request=request)
        access_recheck(request, obj.worker)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[WorkerSkill]) -> None:
        for link in queryset.select_related("worker", "skill"):
            self.delete_model(request, link)


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


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyModelAdmin):
    """The audit log, to read: nobody adds, changes or deletes an entry (the team's audit
    page, /team/audit/, reads it too)."""

    list_display = ["at", "action", "actor_email", "subject", "ip"]
    list_filter = ["action"]
    search_fields = ["actor_email", "subject"]
    date_hierarchy = "at"
