from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts, roles and skills"

    def ready(self) -> None:
        from axes.signals import user_locked_out
        from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed

        from accounts import audit_receivers
        from accounts.roles import roles_sync_after_migrate
        from accounts.sessions import presence_signed_out, session_mark_signed_in

        # Groups need the permissions that migrate creates, so they are synced after it.
        post_migrate.connect(roles_sync_after_migrate, dispatch_uid="accounts.roles_sync")
        # Every sign-in starts the session's clocks (idle timeout, recent sign-in).
        user_logged_in.connect(session_mark_signed_in, dispatch_uid="accounts.session_clocks")
        # Signing out ends being online on the supervisor board (accounts.sessions).
        user_logged_out.connect(presence_signed_out, dispatch_uid="accounts.presence_out")
        # The audit log of signing in and out (accounts.audit_receivers).
        for signal, receiver in [
            (user_logged_in, audit_receivers.audit_signed_in),
            (user_logged_out, audit_receivers.audit_signed_out),
            (user_login_failed, audit_receivers.audit_sign_in_failed),
            (user_locked_out, audit_receivers.audit_locked_out),
        ]:
            signal.connect(receiver, dispatch_uid=f"accounts.{receiver.__name__}")
