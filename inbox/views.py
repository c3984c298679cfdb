from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.selectors import user_roles
from inbox.selectors import my_queues, my_tasks


def home(request: HttpRequest) -> HttpResponse:
    """Show the signed-in user's queues (their skills), what they hold, and their roles."""
    return render(
        request,
        "inbox/home.html",
        {
            "queues": my_queues(user=request.user),
            "held": my_tasks(user=request.user),
            "roles": sorted(role.label for role in user_roles(user=request.user)),
        },
    )
