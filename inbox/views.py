from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from accounts.selectors import user_roles, worker_skills


def home(request: HttpRequest) -> HttpResponse:
    """Show the signed-in user's queues (their skills) and roles."""
    return render(
        request,
        "inbox/home.html",
        {
            "skills": worker_skills(worker=request.user),
            "roles": sorted(role.label for role in user_roles(user=request.user)),
        },
    )
