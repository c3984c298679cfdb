"""A supervisor in a real browser: the recent executions, and a timeline followed live."""

import datetime
import time

import pytest
from django.utils import timezone

from accounts.roles import Role
from inbox import timeline
from inbox.models import ExecutionTimeline
from processes.models import ExecutionStatus
from tests.browser import keyboard
from tests.browser.a11y import assert_accessible
from tests.browser.keyboard import PASSWORD
from tests.inbox.test_executions import make_execution, make_version

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _stage(at: datetime.datetime, *, exited: datetime.datetime | None) -> dict:
    return {"name": "review", "type": "Task", "entered_at": at.isoformat(),
            "exited_at": exited.isoformat() if exited else None,
            "outcome": "succeeded" if exited else "running"}


def test_the_timeline_follows_a_running_execution_and_stops_when_it_ends(
        page, problems, review_skill, make_worker, monkeypatch):
    """The follow interval is cut to 1 s and the stored read kept fresh, so no refresh is
    asked for (no Celery worker here): the test writes the reads a worker would store."""
    monkeypatch.setattr(timeline, "FOLLOW_SECONDS", 1)
    monkeypatch.setattr(timeline, "FRESH_SECONDS", 3600)
    make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,), email="sue@example.com",
                password=PASSWORD)
    execution = make_execution(make_version(), "INV-77")
    make_execution(make_version("document-check"), "DOC-1", minutes=5,
                   status=ExecutionStatus.SUCCEEDED)
    now = timezone.now()
    ExecutionTimeline.objects.create(execution_arn=execution.execution_arn, checked_at=now,
                                     fetched_at=now, status="RUNNING",
                                     stages=[_stage(now, exited=None)])
    keyboard.sign_in(page, "sue@example.com", start="/supervisor/executions/")
    page.get_by_role("heading", name="Recent executions", level=1).wait_for()
    assert_accessible(page, "the recent executions")
    # Keyboard first: j selects the newest row, k the next up, Enter opens it.
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Execution INV-77", level=1).wait_for()
    section = page.locator("#timeline")
    section.get_by_text("The execution is running", exact=False).wait_for()
    assert_accessible(page, "a running execution's page")

    fetched: list[str] = []
    page.on("request", lambda request: fetched.append(request.url)
            if request.url.endswith(f"/supervisor/executions/{execution.pk}/timeline/")
            else None)
    deadline = time.monotonic() + 10
    while len(fetched) < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(200)
    assert len(fetched) >= 2  # re-read while it runs

    ended = timezone.now()
    ExecutionTimeline.objects.filter(execution_arn=execution.execution_arn).update(
        checked_at=ended, fetched_at=ended, status="SUCCEEDED",
        stages=[_stage(now, exited=ended)])
    section.locator(".exec-status", has_text="Succeeded").wait_for()
    assert page.locator("[data-timeline]").get_attribute("data-timeline-follow") is None
    assert page.locator("[data-timeline]").count() == 1
    settled = len(fetched)
    page.wait_for_timeout(3500)  # three follow intervals
    assert len(fetched) == settled  # stopped once it ended
    assert_accessible(page, "an ended execution's page")
