"""Decorators of views that only some roles may open."""

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import Http404, HttpRequest, HttpResponse

from accounts.roles import Role
from accounts.selectors import user_has_role


def admin_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """Let admins in; to everyone else the page does not exist."""

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not user_has_role(user=request.user, role=Role.ADMIN):
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapped
