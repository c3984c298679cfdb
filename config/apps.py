"""The Django admin app, on the inbox's own admin site (config.admin.InboxAdminSite)."""

from django.contrib.admin.apps import AdminConfig


class InboxAdminConfig(AdminConfig):
    default_site = "config.admin.InboxAdminSite"
