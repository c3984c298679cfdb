"""django-allauth adapters: sign-up is closed unless INBOX_OPEN_SIGNUP is on."""

from allauth.account.adapter import DefaultAccountAdapter
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from django.conf import settings
from django.http import HttpRequest


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        return settings.INBOX_OPEN_SIGNUP


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest, sociallogin: object) -> bool:
        # An identity provider may sign in users an admin created (matched by
        # verified email); it creates new users only when sign-up is open.
        return settings.INBOX_OPEN_SIGNUP
