"""Admin pieces shared by every room, and the admin site itself."""

from collections.abc import Callable

from allauth.account.decorators import secure_admin_login
from django.contrib import admin
from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.decorators import method_decorator
from django.views.decorators.cache import never_cache


class InboxAdminSite(admin.AdminSite):
    """Django's admin, signed into through allauth, with a recent sign-in for every change.

    Its own sign-in form would take passwords past allauth's and axes' throttling: it sends
    to the sign-in page instead (allauth's secure_admin_login), with ?next= back here. Every
    POST but signing out needs a sign-in or a password confirmation within
    ACCOUNT_REAUTHENTICATION_TIMEOUT (accounts.decorators.recent_auth_required); a GET
    does not.
    """

    site_header = "Inbox administration"
    site_title = "Inbox admin"

    @method_decorator(never_cache)
    @login_not_required
    def login(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        return secure_admin_login(super().login)(request, extra_context)

    def admin_view(self, view: Callable[..., HttpResponse],
                   cacheable: bool = False) -> Callable[..., HttpResponse]:
        from accounts.decorators import changes_need_recent_auth

        return super().admin_view(changes_need_recent_auth(view, unless=self._signing_out),
                                  cacheable)

    def _signing_out(self, request: HttpRequest) -> bool:
        return request.path == reverse("admin:logout", current_app=self.name)


class ReadOnlyModelAdmin(admin.ModelAdmin):
    """Show rows; never add, change or delete them: the services are the only writers."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
