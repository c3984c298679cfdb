"""Security headers Django 5.2 does not set itself: the Content-Security-Policy."""

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse


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
