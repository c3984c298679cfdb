"""Admin page of the processes: each process and its deployed versions.

Only admins see it; to anyone else it does not exist (404).
"""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from accounts.decorators import admin_only
from processes.selectors import process_list


@require_safe
@admin_only
def process_list_page(request: HttpRequest) -> HttpResponse:
    """List the processes and their deployed versions, newest first."""
    return render(request, "processes/process_list.html", {"processes": process_list()})
