"""django-allauth adapters: sign-up is closed unless INBOX_OPEN_SIGNUP is on; a password
confirmation is checked against the user's own e-mail, throttled, and recorded."""

from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from allauth.core import context
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.http import HttpRequest

from accounts.audit import audit_record
from accounts.models import AuditAction
from accounts.sessions import session_mark_reauthenticated


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return settings.INBOX_OPEN_SIGNUP

    def reauthenticate(self, user: Any, password: str) -> bool:
        """Confirm the signed-in user's password (allauth's reauthenticate page).

        allauth would look the address up among its EmailAddress rows, which users an admin
        created do not have: the user's own e-mail is used instead. It goes through
        authenticate() with the request, so axes counts a wrong password like any other.
        """
        request = context.request
        confirmed = self.authenticate(request, email=user.email, password=password)
        if confirmed is None or confirmed.pk != user.pk:
            return False
        session_mark_reauthenticated(request)
        audit_record(action=AuditAction.REAUTHENTICATED, actor=user, subject=user.email,
                     request=request)
        return True


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin: object) -> bool:
        # An identity provider may sign in users an admin created (matched by
        # verified email); it creates new users only when sign-up is open.
        return settings.INBOX_OPEN_SIGNUP
