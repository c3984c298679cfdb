from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts, roles and skills"

    def ready(self) -> None:
        from accounts.roles import roles_sync_after_migrate

        # Groups need the permissions that migrate creates, so they are synced after it.
        post_migrate.connect(roles_sync_after_migrate, dispatch_uid="accounts.roles_sync")
