"""A worker sets themselves available or away (the header's presence control)."""

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from accounts.models import Availability
from accounts.roles import Role
from accounts.selectors import user_roles
from accounts.services import worker_set_availability


@require_POST
def presence_set(request: HttpRequest) -> HttpResponse:
    """Set the signed-in worker available or away, and go back to the page they were on."""
    if Role.WORKER not in user_roles(user=request.user):
        raise PermissionDenied("Only workers set themselves available or away.")
    value = request.POST.get("availability", "")
    if value not in Availability.values:
        return HttpResponseBadRequest(
            f"Choose availability 'available' or 'away', not {value[:40]!r}.",
            content_type="text/plain")
    withdrawn = worker_set_availability(worker=request.user, availability=Availability(value),
                                        actor=request.user, request=request)
    if value == Availability.AWAY:
        back = (f" {withdrawn} offer{'s' if withdrawn != 1 else ''} you held went back to "
                "the queue." if withdrawn else "")
        messages.success(request, "You are away: nobody offers or assigns you new tasks; "
                                  f"what you have in progress stays yours.{back}")
    else:
        messages.success(request, "You are available: new tasks are offered to you again.")
    target = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()},
                                           require_https=request.is_secure()):
        target = reverse("inbox:home")
    return redirect(target)
