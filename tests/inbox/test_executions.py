"""The recent executions page: who sees it, its filters, order and pages, and the timeline
that follows a running execution until it ends.

Most tests build execution records as plain rows (processes.Execution is what the inbox
writes when it starts one; its versions carry real specs so the supervisor's skills
decide what they see). The last test runs a real execution on the emulator.
"""

import datetime
import hashlib
import time

import pytest
from django.utils import timezone

from accounts.roles import Role
from inbox import executions, timeline
from inbox.models import ExecutionTimeline, Task, TaskState
from inbox.services.worker import task_complete, task_take_next
from inbox.tasks import execution_timeline_task
from processes.models import Execution, ExecutionStatus, Process, ProcessVersion
from processes.services import execution_described_record
from tests.inbox.test_timeline import _review_of_real_execution, _send_callbacks
from tests.sfn import execution_wait

pytestmark = pytest.mark.django_db

T0 = datetime.datetime(2026, 11, 30, 9, 0, tzinfo=datetime.UTC)
FOLLOW = "data-timeline-follow"


def _spec(name: str, version: int, skill: str) -> str:
    return f"""\
process: {name}
version: {version}
stages:
  - id: review
    kind: human
    skill: {skill}
    title: Review
    form: approve-reject
    timeouts: {{offer: 60, work: 60, overall: 120}}
  - id: done
    kind: succeed
"""


def make_version(name: str = "invoice-approval", version: int = 1,
                 skill: str = "invoice-review") -> ProcessVersion:
    """A deployed version's row (its state machine is not needed by these pages)."""
    process, _ = Process.objects.get_or_create(name=name)
    text = _spec(name, version, skill)
    return ProcessVersion.objects.create(
        process=process, version=version, spec_text=text,
        spec_sha256=hashlib.sha256(text.encode()).hexdigest(), asl={},
        state_machine_name=f"{name}-v{version}",
        state_machine_arn=f"arn:aws:states:us-east-1:123456789012:stateMachine:{name}-v{version}")


def make_execution(version: ProcessVersion, key: str, *, minutes: int = 0,
                   status: str = ExecutionStatus.RUNNING) -> Execution:
    return Execution.objects.create(
        process=version.process, version=version, business_key=key, name=key,
        execution_arn=f"{version.state_machine_arn.replace('stateMachine', 'execution')}:{key}",
        status=status, started_at=T0 + datetime.timedelta(minutes=minutes))


def keys(response) -> list[str]:
    return [execution.business_key for execution in response.context["rows"]]


@pytest.fixture
def supervisor_client(supervisor, browser_for):
    return browser_for(supervisor)


@pytest.fixture
def enqueued(monkeypatch) -> list[str]:
    """Record each timeline refresh asked for, without running it (no worker, no AWS)."""
    calls: list[str] = []
    monkeypatch.setattr(execution_timeline_task, "delay", calls.append)
    return calls


# Who sees it -------------------------------------------------------------------------------


def test_a_worker_is_refused_and_supervisors_and_admins_see_the_list(
        worker, supervisor, admin, browser_for, client):
    execution = make_execution(make_version(), "INV-1")
    for url in ("/supervisor/executions/", f"/supervisor/executions/{execution.pk}/",
                f"/supervisor/executions/{execution.pk}/timeline/"):
        assert browser_for(worker).get(url).status_code == 403
        signed_out = client.get(url)
        assert signed_out.status_code == 302 and "login" in signed_out["Location"]
    for user in (supervisor, admin):
        page = browser_for(user).get("/supervisor/executions/")
        assert page.status_code == 200 and keys(page) == ["INV-1"]
        assert f'href="/supervisor/executions/{execution.pk}/"' in page.content.decode()


def test_a_supervisor_sees_only_executions_of_processes_with_their_skills(
        make_worker, review_skill, approval_skill, browser_for, admin):
    mine = make_execution(make_version(), "INV-1")
    theirs = make_execution(make_version("payment", skill="finance-approval"), "PAY-1")
    reviewer_boss = make_worker({"invoice-review": 3}, roles=(Role.SUPERVISOR,))
    client = browser_for(reviewer_boss)
    page = client.get("/supervisor/executions/")
    assert keys(page) == ["INV-1"]
    assert page.context["processes"] == ["invoice-approval"]
    assert client.get(f"/supervisor/executions/{theirs.pk}/").status_code == 404
    assert client.get(f"/supervisor/executions/{theirs.pk}/timeline/").status_code == 404
    assert client.get(f"/supervisor/executions/{mine.pk}/").status_code == 200
    assert client.get("/supervisor/executions/99999999999999999999/").status_code == 404
    assert keys(browser_for(admin).get("/supervisor/executions/")) == ["PAY-1", "INV-1"]


# Filters, order, pages -----------------------------------------------------------------------


@pytest.fixture
def population(review_skill):
    """Executions of two versions of one process and of another, at known times."""
    v1, v2 = make_version(version=1), make_version(version=2)
    other = make_version("document-check", skill="invoice-review")
    make_execution(v1, "A", minutes=0, status=ExecutionStatus.SUCCEEDED)
    make_execution(v1, "B", minutes=10, status=ExecutionStatus.FAILED)
    make_execution(v2, "C", minutes=20)
    make_execution(v2, "D", minutes=30, status=ExecutionStatus.TIMED_OUT)
    make_execution(other, "E", minutes=40, status=ExecutionStatus.ABORTED)
    make_execution(other, "F", minutes=24 * 60)


@pytest.mark.parametrize("query, expected", [
    ({}, ["F", "E", "D", "C", "B", "A"]),
    ({"process": "invoice-approval"}, ["D", "C", "B", "A"]),
    ({"process": "invoice-approval", "version": "2"}, ["D", "C"]),
    ({"process": "invoice-approval", "version": "v1"}, ["B", "A"]),
    ({"status": "RUNNING"}, ["F", "C"]),
    ({"status": "failed"}, ["B"]),
    ({"status": "TIMED_OUT"}, ["D"]),
    ({"status": "ABORTED"}, ["E"]),
    ({"status": "SUCCEEDED"}, ["A"]),
    ({"started_after": "2026-11-30T09:20"}, ["F", "E", "D", "C"]),
    ({"started_before": "2026-11-30T09:20"}, ["B", "A"]),
    ({"started_before": "2026-11-30"}, ["E", "D", "C", "B", "A"]),  # the whole day
    ({"started_after": "2026-12-01"}, ["F"]),
    ({"started_after": "2026-11-30T10:20:00+01:00"}, ["F", "E", "D", "C"]),
    ({"process": "invoice-approval", "status": "RUNNING",
      "started_after": "2026-11-30T09:15", "started_before": "2026-11-30T09:25"}, ["C"]),
    ({"process": "document-check", "status": "SUCCEEDED"}, []),
])
def test_each_filter_and_their_combination(population, supervisor_client, query, expected):
    page = supervisor_client.get("/supervisor/executions/", query)
    assert page.status_code == 200, page.context["filters"].problems
    assert keys(page) == expected
    if not expected:
        assert "No execution matches these filters." in page.content.decode()


@pytest.mark.parametrize("query, message", [
    ({"process": "nope"}, "Process: 'nope' is not a process you supervise"),
    ({"process": "a\x00b"}, "Process: "),
    ({"process": "document-check", "version": "two"}, "Version: 'two' is not a version"),
    ({"process": "document-check", "version": "9" * 30}, "Version: "),
    ({"version": "2"}, "Version: choose a process for the version"),
    ({"status": "DONE"}, "Status: 'DONE' is not a status (one of RUNNING, SUCCEEDED"),
    ({"started_after": "yesterday"}, "Started after: 'yesterday' is not a date"),
    ({"started_before": "2026-02-30"}, "Started before: '2026-02-30' is not a date"),
    ({"started_before": "2026-11-30T25:00"}, "Started before: "),
    ({"started_after": "2026-12-02", "started_before": "2026-12-01"},
     "Started after is not before Started before"),
    ({"after": "x"}, "Page: that page link is broken"),
    ({"after": "99999999"}, "Page: that page link is broken"),
])
def test_a_bad_filter_is_a_400_naming_it_and_the_list_shows_without_it(
        population, supervisor_client, query, message):
    page = supervisor_client.get("/supervisor/executions/", query)
    assert page.status_code == 400
    problems = page.context["filters"].problems
    assert len(problems) == 1 and problems[0].startswith(message), problems
    html = page.content.decode()
    assert 'role="alert"' in html
    # The list without the bad filter (with a good process filter beside it: its two).
    assert len(keys(page)) == (2 if query.get("process") == "document-check" else 6)


def test_pages_are_newest_first_without_overlap_and_the_filters_stay(
        review_skill, supervisor_client):
    version = make_version()
    other = make_version("document-check")
    total = executions.PAGE_SIZE + 7
    for n in range(total):
        # Pairs started at the same moment: the id keeps their order and the cursor exact.
        make_execution(version, f"K{n:03}", minutes=n // 2)
    make_execution(other, "OTHER", minutes=10_000)
    first = supervisor_client.get("/supervisor/executions/", {"process": "invoice-approval"})
    assert len(keys(first)) == executions.PAGE_SIZE
    expected = [f"K{n:03}" for n in reversed(range(total))]
    assert keys(first) == expected[:executions.PAGE_SIZE]
    next_query = first.context["next_query"]
    assert "process=invoice-approval" in next_query and "after=" in next_query
    assert f'href="?{next_query.replace("&", "&amp;")}" rel="next"' in first.content.decode()
    second = supervisor_client.get(f"/supervisor/executions/?{next_query}")
    assert second.status_code == 200
    assert keys(second) == expected[executions.PAGE_SIZE:]
    assert second.context["next_query"] is None and second.context["paged"]


# The status the list shows --------------------------------------------------------------------


def test_a_timeline_read_records_the_status_and_a_final_one_stays(review_skill):
    execution = make_execution(make_version(), "INV-9")
    stop = timezone.now()
    assert execution_described_record(execution_arn=execution.execution_arn, described={
        "status": "SUCCEEDED", "output": '{"ok": true}', "stopDate": stop})
    execution.refresh_from_db()
    assert (execution.status, execution.output, execution.finished_at) == (
        ExecutionStatus.SUCCEEDED, {"ok": True}, stop)
    assert execution.checked_at is not None
    assert not execution_described_record(execution_arn=execution.execution_arn,
                                          described={"status": "RUNNING"})
    assert Execution.objects.get(pk=execution.pk).status == ExecutionStatus.SUCCEEDED


def test_an_ended_execution_without_output_records_sql_null_and_its_error(review_skill):
    """The status event's record (one statement built once, not the ORM's update) writes
    what update() wrote: no output is SQL NULL, not JSON null; a running one only checked."""
    version = make_version()
    running, failed = (make_execution(version, key) for key in ("INV-10", "INV-11"))
    stop = timezone.now()
    assert execution_described_record(execution_arn=running.execution_arn,
                                      described={"status": "RUNNING"})
    assert execution_described_record(execution_arn=failed.execution_arn, described={
        "status": "FAILED", "output": None, "error": "States.Timeout", "cause": "late",
        "stopDate": stop})

    running.refresh_from_db()
    assert running.status == ExecutionStatus.RUNNING and running.checked_at is not None
    assert running.finished_at is None
    failed.refresh_from_db()
    assert (failed.status, failed.error, failed.cause, failed.finished_at) == (
        ExecutionStatus.FAILED, "States.Timeout", "late", stop)
    assert Execution.objects.filter(pk=failed.pk, output__isnull=True).exists()


# The timeline follows a running execution ------------------------------------------------------


def _stored(execution: Execution, *, status: str, seconds_ago: int) -> None:
    at = timezone.now() - datetime.timedelta(seconds=seconds_ago)
    ExecutionTimeline.objects.create(
        execution_arn=execution.execution_arn, checked_at=at, fetched_at=at, status=status,
        stages=[{"name": "review", "type": "Task", "entered_at": at.isoformat(),
                 "exited_at": None, "outcome": "running"}])


def test_a_running_execution_is_followed_and_read_again_once_stale(
        review_skill, supervisor_client, enqueued, make_task):
    execution = make_execution(make_version(), "INV-2")
    # A task of an execution the inbox did not start: its timeline, no execution page.
    other = make_task()
    assert "The execution's page" not in supervisor_client.get(
        f"/tasks/{other.pk}/").content.decode()
    enqueued.clear()  # its timeline was asked for
    _stored(execution, status="RUNNING", seconds_ago=1)
    page = supervisor_client.get(f"/supervisor/executions/{execution.pk}/").content.decode()
    assert FOLLOW in page
    assert f'data-timeline-every="{timeline.FOLLOW_SECONDS}"' in page
    assert f'data-timeline-url="/supervisor/executions/{execution.pk}/timeline/"' in page
    assert enqueued == []  # fresh: shown as it is
    ExecutionTimeline.objects.filter(execution_arn=execution.execution_arn).update(
        checked_at=timezone.now() - datetime.timedelta(seconds=timeline.FRESH_SECONDS + 1))
    part = supervisor_client.get(f"/supervisor/executions/{execution.pk}/timeline/")
    assert part["Cache-Control"].startswith("max-age=0")
    assert FOLLOW in part.content.decode() and "data-timeline-pending" in part.content.decode()
    assert enqueued == [execution.execution_arn]


def test_an_ended_execution_is_not_followed_and_never_read_again(
        review_skill, supervisor_client, enqueued):
    execution = make_execution(make_version(), "INV-3", status=ExecutionStatus.SUCCEEDED)
    _stored(execution, status="SUCCEEDED", seconds_ago=10 * 24 * 3600)
    part = supervisor_client.get(
        f"/supervisor/executions/{execution.pk}/timeline/").content.decode()
    assert FOLLOW not in part and "data-timeline-pending" not in part
    assert enqueued == []


def test_a_failed_read_is_read_again_rather_than_final(review_skill, supervisor_client,
                                                       enqueued):
    execution = make_execution(make_version(), "INV-4")
    ExecutionTimeline.objects.create(
        execution_arn=execution.execution_arn, status="SUCCEEDED", error_code="Throttling",
        error="Rate exceeded", checked_at=timezone.now() - datetime.timedelta(minutes=5))
    supervisor_client.get(f"/supervisor/executions/{execution.pk}/timeline/")
    assert enqueued == [execution.execution_arn]


def test_a_finished_refresh_lets_the_next_request_enqueue(review_skill, monkeypatch):
    """The refresh is patched (no AWS): only the lock's release after it is shown here."""
    arn = "arn:aws:states:us-east-1:123456789012:execution:x:lock-test"
    monkeypatch.setattr(execution_timeline_task, "delay", lambda arn: None)
    monkeypatch.setattr("inbox.tasks.timeline_refresh",
                        lambda execution_arn: ExecutionTimeline(execution_arn=execution_arn))
    assert timeline.timeline_request(execution_arn=arn)
    assert not timeline.timeline_request(execution_arn=arn)  # one at a time
    execution_timeline_task(arn)
    assert timeline.timeline_request(execution_arn=arn)
    timeline.timeline_request_done(execution_arn=arn)


@pytest.mark.emulator
def test_the_execution_page_follows_a_real_execution_until_it_ends(
        private_intake, supervisor, worker, browser_for, eager_celery):
    """A real execution on the emulator: running, its page follows it; answered and ended,
    the next read shows it ended and the page stops following."""
    review = _review_of_real_execution()
    execution = Execution.objects.get(execution_arn=review.execution_arn)
    client = browser_for(supervisor)
    listed = client.get("/supervisor/executions/", {"status": "RUNNING"})
    assert execution in listed.context["rows"]
    page = client.get(f"/supervisor/executions/{execution.pk}/").content.decode()
    assert review.title in page  # its task, linked
    part = client.get(f"/supervisor/executions/{execution.pk}/timeline/").content.decode()
    assert FOLLOW in part and "review" in part and "running" in part
    # The task's page links its execution's page; the task's own timeline follows it too.
    task_page = client.get(f"/tasks/{review.pk}/").content.decode()
    assert f'href="/supervisor/executions/{execution.pk}/"' in task_page
    assert FOLLOW in client.get(f"/tasks/{review.pk}/timeline/").content.decode()

    task_take_next(worker=worker)
    task_complete(worker=worker, task_id=review.pk,
                  answer={"decision": "approve", "comment": "fine"})
    _send_callbacks()
    assert execution_wait(execution_arn=review.execution_arn)["status"] == "SUCCEEDED"
    assert Task.objects.get(pk=review.pk).state == TaskState.COMPLETED
    ExecutionTimeline.objects.filter(execution_arn=review.execution_arn).update(
        checked_at=timezone.now() - datetime.timedelta(seconds=timeline.FRESH_SECONDS + 1))
    deadline = time.monotonic() + 10
    while True:  # the eager refresh ran inside the first of these requests
        part = client.get(f"/supervisor/executions/{execution.pk}/timeline/").content.decode()
        if FOLLOW not in part or time.monotonic() > deadline:
            break
    assert FOLLOW not in part and "Succeeded" in part
    assert "approved" in part
    # The read recorded the end in the list too, before the reconciler came by.
    ended = client.get("/supervisor/executions/", {"status": "SUCCEEDED"})
    assert execution.pk in [row.pk for row in ended.context["rows"]]


@pytest.mark.parametrize("name", ["process", "version", "status", "started_after",
                                  "started_before", "after"])
@pytest.mark.parametrize("value", ["²", "1" * 5000, "-1", "7\x00", "2026-13-01", "x" * 300])
def test_a_crafted_filter_is_a_400_never_a_500(population, supervisor_client, name, value):
    query = {name: value}
    if name == "version":
        query["process"] = "invoice-approval"
    page = supervisor_client.get("/supervisor/executions/", query)
    assert page.status_code == 400
    assert page.context["filters"].problems
