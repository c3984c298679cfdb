from django.conf import settings
from django.http import HttpRequest


def signup(request: HttpRequest) -> dict[str, bool]:
    """Tell templates whether open sign-up is on, so closed sites show no sign-up link."""
    return {"signup_open": settings.INBOX_OPEN_SIGNUP}


def roles(request: HttpRequest) -> dict[str, object]:
    """Give templates the user's roles, read lazily and once per request (navigation)."""
    from django.utils.functional import SimpleLazyObject

    from accounts.selectors import user_roles

    held = SimpleLazyObject(lambda: {role.value for role in user_roles(user=request.user)})
    return {"roles_held": held}
