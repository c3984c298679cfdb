"""Roles are Django groups with a fixed set of permissions, kept in sync after migrate."""

from typing import Any

from django.contrib.auth.models import Group, Permission
from django.db import models


class Role(models.TextChoices):
    WORKER = "worker", "Worker"
    SUPERVISOR = "supervisor", "Supervisor"
    ADMIN = "admin", "Admin"


# "app_label.codename"; "app_label.*" means every permission of that app.
ROLE_PERMISSIONS: dict[Role, list[str]] = {
    Role.WORKER: ["accounts.work_tasks"],
    Role.SUPERVISOR: [
        "accounts.work_tasks",
        "accounts.supervise_tasks",
        "accounts.view_user",
        "accounts.view_skill",
        "accounts.view_workerskill",
    ],
    Role.ADMIN: [
        "accounts.*",
        "account.*",
        "socialaccount.*",
        "axes.*",  # to see and lift sign-in lockouts
        "auth.view_group",
        "processes.*",
        "inbox.*",
    ],
}


def _permissions_for(specs: list[str]) -> list[Permission]:
    found: list[Permission] = []
    for spec in specs:
        app_label, codename = spec.split(".", 1)
        query = Permission.objects.filter(content_type__app_label=app_label)
        if codename != "*":
            query = query.filter(codename=codename)
        found.extend(query)
    return found


def roles_sync() -> None:
    """Create the role groups and set each one's permissions exactly."""
    for role, specs in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role.value)
        group.permissions.set(_permissions_for(specs))


def roles_sync_after_migrate(sender: Any, **kwargs: Any) -> None:
    """Run roles_sync after each app's post_migrate.

    Permissions of an app exist only after its own post_migrate, so syncing
    after every app (it is idempotent and cheap) leaves no role short.
    """
    roles_sync()
