"""Security headers Django 5.2 does not set itself (the Content-Security-Policy), and the
end of idle or too old sessions."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.urls import reverse


class ContentSecurityPolicyMiddleware:
    """Send settings.INBOX_CSP with every response that has not set its own policy.

    The policy allows no inline script or style, on our pages and the Django admin alike
    (Django 5.2's admin needs neither). With DEBUG on, Django's technical 404 and 500
    pages (inline CSS and JavaScript, never shown in production) go without it.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if settings.DEBUG and response.status_code in (404, 500):
            return response
        response.headers.setdefault("Content-Security-Policy", settings.INBOX_CSP)
        return response


class SessionIdleTimeoutMiddleware:
    """End a signed-in session idle for INBOX_SESSION_IDLE_SECONDS or older than
    INBOX_SESSION_MAX_SECONDS; record the user's activity otherwise.

    An ended session is flushed before any view runs (audited as SESSION_EXPIRED, not as a
    sign-out), so the request goes on signed out: a page sends to the sign-in page with
    ?next=, the API answers 401/403. What counts as activity: anything but the live stream
    and a browser's background fetch of a page (Sec-Fetch-Mode other than "navigate" on a
    GET: the pages refreshing themselves), so a tab left open does not keep a session alive
    (docs/DECISIONS.md). The activity time is written at most once a minute.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        from accounts.sessions import session_expired, session_touch

        if request.user.is_authenticated:
            reason = session_expired(request)
            if reason:
                self._end(request, reason)
            elif self._is_activity(request):
                session_touch(request)
        return self.get_response(request)

    def _end(self, request: HttpRequest, reason: str) -> None:
        from django.contrib import messages
        from django.contrib.auth.models import AnonymousUser

        from accounts.audit import audit_record
        from accounts.models import AuditAction

        user = request.user
        audit_record(action=AuditAction.SESSION_EXPIRED, actor=user, subject=user.email,
                     request=request, reason=reason)
        request.session.flush()
        request.user = AnonymousUser()
        if reason == "idle":
            after = _duration(settings.INBOX_SESSION_IDLE_SECONDS)
            messages.info(request, f"You were signed out after {after} without activity. "
                                   "Sign in again to go on.")
        else:
            after = _duration(settings.INBOX_SESSION_MAX_SECONDS)
            messages.info(request, f"Sessions last at most {after}. Sign in again to go on.")

    def _is_activity(self, request: HttpRequest) -> bool:
        if request.path == reverse("inbox:live"):
            return False
        if request.method in ("GET", "HEAD"):
            return request.headers.get("Sec-Fetch-Mode", "navigate") == "navigate"
        return True


def _duration(seconds: int) -> str:
    """Return "8 hours", "90 minutes" or "45 seconds"."""
    for unit, size in (("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"
