from django.conf import settings
from django.http import HttpRequest


def signup(request: HttpRequest) -> dict[str, bool]:
    """Tell templates whether open sign-up is on, so closed sites show no sign-up link."""
    return {"signup_open": settings.INBOX_OPEN_SIGNUP}
