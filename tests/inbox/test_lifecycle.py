import pytest
from django.db import DatabaseError, connection, transaction

from accounts.models import PeerVisibility, Skill
from config.errors import Conflict, NotFound
from inbox import lifecycle
from inbox.history import events_verify
from inbox.models import Outbox, OutboxKind, TaskEvent, TaskState
from inbox.selectors import access_task
from inbox.services.dispatcher import task_dispatch
from inbox.services.worker import (
    task_accept,
    task_claim,
    task_complete,
    task_decline,
    task_reject,
    task_release,
    task_take_next,
)
from processes.forms import FormInvalid


def test_take_next_gives_highest_priority_then_oldest(make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    low = make_task(priority=10)
    old = make_task(priority=60)
    new = make_task(priority=60)
    taken = [task_take_next(worker=worker) for _ in range(2)]
    assert [t.pk for t in taken] == [old.pk, new.pk]
    assert all(t.state == TaskState.IN_PROGRESS and t.assignee == worker for t in taken)
    assert low.pk not in [t.pk for t in taken]


def test_take_next_respects_proficiency(make_task, make_worker):
    novice = make_worker({"invoice-review": 1})
    make_task(minProficiency=4)
    with pytest.raises(NotFound, match="Nothing is waiting"):
        task_take_next(worker=novice)


def test_take_next_respects_capacity(make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    worker.capacity = 1
    worker.save()
    make_task(), make_task()
    task_take_next(worker=worker)
    with pytest.raises(Conflict, match="capacity is 1"):
        task_take_next(worker=worker)



def test_take_next_reads_and_locks_its_task_once(make_task, make_worker, transactional_db,
                                                take_next_in_python):
    """The candidate locked with SKIP LOCKED is the row the transition changes: no re-read.

    The Python path (SQLite's, and PostgreSQL's when the database took nothing).
    """
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    worker = make_worker({"invoice-review": 3})
    task = make_task()
    with CaptureQueriesContext(connection) as queries:
        taken = task_take_next(worker=worker)

    task_reads = [q["sql"] for q in queries.captured_queries
                  if q["sql"].startswith("SELECT") and 'FROM "inbox_task"' in q["sql"]
                  and "COUNT(" not in q["sql"] and "SUM(" not in q["sql"]]
    assert len(task_reads) == 1, task_reads
    assert not any("SAVEPOINT" in q["sql"] for q in queries.captured_queries)
    assert (taken.pk, taken.state, taken.version) == (task.pk, TaskState.IN_PROGRESS,
                                                      task.version + 1)
    assert [e.action for e in TaskEvent.objects.filter(task=task).order_by("version")] == [
        "receive", "take_next"]


def test_a_transition_on_a_locked_row_needs_the_transaction_that_locked_it(make_task,
                                                                           transactional_db):
    task = make_task()
    with pytest.raises(RuntimeError, match="needs the transaction"):
        lifecycle.transition(task_id=task.pk, action="take_next", locked=task)

def test_every_transition_is_recorded_with_a_chained_hash(make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    task = make_task()
    task = task_take_next(worker=worker)
    task = task_release(worker=worker, task_id=task.pk, reason="lunch")
    events = list(TaskEvent.objects.filter(task=task).order_by("version"))
    assert [(e.version, e.action, e.from_state, e.to_state) for e in events] == [
        (1, "receive", "", "queued"),
        (2, "take_next", "queued", "in_progress"),
        (3, "release", "in_progress", "queued"),
    ]
    assert events[2].actor == worker and events[2].reason == "lunch"
    assert events[1].prev_hash == events[0].hash and events[2].prev_hash == events[1].hash
    assert events_verify(task=task) is None



def tamper(events, **changes) -> None:
    """Edit events as a superuser could: past the trigger (replica mode fires none)."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL session_replication_role = replica")
        events.update(**changes)


@pytest.mark.postgres
def test_the_database_refuses_to_change_or_delete_an_event(make_task):
    task = make_task()
    event = TaskEvent.objects.get(task=task)
    for attempt in (lambda: TaskEvent.objects.filter(pk=event.pk).update(reason="edited"),
                    lambda: TaskEvent.objects.filter(pk=event.pk).delete()):
        with pytest.raises(DatabaseError, match="inbox_taskevent is append-only"):
            with transaction.atomic():
                attempt()
    assert TaskEvent.objects.get(pk=event.pk).reason == event.reason
    assert events_verify(task=task) is None

def test_a_tampered_event_is_found(make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    tamper(TaskEvent.objects.filter(task=task, version=1), reason="edited later")
    assert events_verify(task=task) == (
        "event v1 (receive) was altered after it was written")


def test_the_task_row_keeps_the_head_of_its_chain(make_task, make_worker):
    """Each event links to the task's chain head and moves it on: no history read."""
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    task = task_release(worker=worker, task_id=task.pk, reason="lunch")
    latest = TaskEvent.objects.filter(task=task).order_by("-version").first()
    assert task.chain_head == latest.hash
    task.refresh_from_db()
    assert task.chain_head == latest.hash


def test_a_chain_head_that_lost_its_latest_event_is_found(make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    first = TaskEvent.objects.get(task=task, version=1)
    type(task).objects.filter(pk=task.pk).update(chain_head=first.hash)
    assert events_verify(task=task) == (
        "the task's chain head does not name its latest event (v2)")


def test_complete_validates_the_answer_before_anything_changes(make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    with pytest.raises(FormInvalid) as caught:
        task_complete(worker=worker, task_id=task.pk, answer={"decision": "reject"})
    assert caught.value.errors == {"comment": "required when decision is reject"}
    task.refresh_from_db()
    assert task.state == TaskState.IN_PROGRESS and not Outbox.objects.exists()


def test_complete_writes_one_outbox_row_and_a_retry_does_not_double_it(
    make_task, make_worker, django_capture_on_commit_callbacks
):
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        done = task_complete(worker=worker, task_id=task.pk,
                                      answer={"decision": "approve"})
        again = task_complete(worker=worker, task_id=task.pk,
                                       answer={"decision": "approve"})
    assert done.state == again.state == TaskState.COMPLETING
    outbox = Outbox.objects.get()
    assert (outbox.kind, outbox.decision_version) == (OutboxKind.SUCCESS, done.version)
    assert outbox.output["answer"] == {"decision": "approve", "comment": None}
    assert outbox.output["worker"] == str(worker.pk)
    # The row is the callback's message: nothing runs after commit, once or twice.
    assert callbacks == []
    with pytest.raises(Conflict, match="Cannot complete a task that is completing"):
        task_complete(worker=worker, task_id=task.pk,
                               answer={"decision": "reject", "comment": "changed my mind"})


def test_reject_needs_a_reason_and_queues_a_failure(make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    with pytest.raises(Conflict, match="Say why"):
        task_reject(worker=worker, task_id=task.pk, reason="  ")
    task = task_reject(worker=worker, task_id=task.pk, reason="not an invoice")
    assert task.state == TaskState.REJECTING
    outbox = Outbox.objects.get(task=task)
    assert (outbox.kind, outbox.error, outbox.cause) == (
        OutboxKind.FAILURE, "HumanTask.Rejected", "not an invoice")


def test_a_worker_who_does_not_hold_the_task_cannot_complete_it(make_task, make_worker):
    """Ben sees ana's task (its skill is open to the team) but may not act on it."""
    Skill.objects.filter(slug="invoice-review").update(peer_visibility=PeerVisibility.TEAM)
    ana, ben = make_worker({"invoice-review": 3}), make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=ana)
    with pytest.raises(Conflict, match="You do not hold this task"):
        task_complete(worker=ben, task_id=task.pk, answer={"decision": "approve"})


def test_a_stale_version_is_a_conflict(make_task, make_worker):
    worker = make_worker({"invoice-review": 3})
    task = make_task()
    task_claim(worker=worker, task_id=task.pk, expected_version=1)
    with pytest.raises(lifecycle.StaleVersion, match="your version 1, now 2"):
        task_release(worker=worker, task_id=task.pk, expected_version=1)


def test_a_worker_without_the_skill_cannot_see_the_task(make_task, make_worker, approval_skill):
    outsider = make_worker({"finance-approval": 5})
    task = make_task()
    with pytest.raises(NotFound):
        access_task(user=outsider, task_id=task.pk)
    with pytest.raises(NotFound):
        task_claim(worker=outsider, task_id=task.pk)


def test_separation_of_duties_excludes_the_reviewer(make_task, make_worker, approval_skill):
    both = make_worker({"invoice-review": 5, "finance-approval": 5})
    other = make_worker({"finance-approval": 5})
    review = make_task()
    task_claim(worker=both, task_id=review.pk)
    approval = make_task(execution=review.execution_arn, stage="approval",
                         skill="finance-approval", excludeWorkersOf=["review"])
    with pytest.raises(Conflict, match="Separation of duties"):
        task_claim(worker=both, task_id=approval.pk)
    with pytest.raises(NotFound):
        task_take_next(worker=both, skill="finance-approval")
    assert task_take_next(worker=other, skill="finance-approval").pk == approval.pk


def test_push_queue_offers_to_the_least_loaded_worker_and_accept(make_task, make_worker,
                                                                check_skill):
    busy = make_worker({"document-check": 3})
    idle = make_worker({"document-check": 3})
    first = make_task(skill="document-check", stage="check")
    assert task_dispatch(task_id=first.pk).assignee == busy  # both idle: first made
    second = make_task(skill="document-check", stage="check")
    offered = task_dispatch(task_id=second.pk)
    assert (offered.state, offered.assignee) == (TaskState.OFFERED, idle)
    assert offered.offer_deadline is not None
    accepted = task_accept(worker=offered.assignee, task_id=offered.pk)
    assert accepted.state == TaskState.IN_PROGRESS and accepted.work_deadline is not None


def test_a_decliner_is_never_offered_the_task_again(make_task, make_worker, check_skill):
    only = make_worker({"document-check": 3})
    task = make_task(skill="document-check", stage="check")
    offered = task_dispatch(task_id=task.pk)
    assert offered.assignee == only
    with pytest.raises(Conflict, match="Say why you decline"):
        task_decline(worker=only, task_id=task.pk, reason="")
    declined = task_decline(worker=only, task_id=task.pk, reason="conflict of interest")
    assert declined.state == TaskState.QUEUED and declined.assignee is None
    assert task_dispatch(task_id=task.pk) is None
    newcomer = make_worker({"document-check": 1})
    assert task_dispatch(task_id=task.pk).assignee == newcomer


def test_pull_take_next_ignores_push_queues(make_task, make_worker, check_skill):
    worker = make_worker({"document-check": 5})
    make_task(skill="document-check", stage="check")
    with pytest.raises(NotFound, match="no skill with a pull queue"):
        task_take_next(worker=worker)


def test_history_verify_command_names_the_first_broken_link(make_task, make_worker):
    from io import StringIO

    from django.core.management import CommandError, call_command

    worker = make_worker({"invoice-review": 3})
    good, bad = make_task(), make_task()
    task_claim(worker=worker, task_id=bad.pk)
    out = StringIO()
    call_command("history_verify", stdout=out)
    assert "Checked 2 task(s): 0 with a broken history." in out.getvalue()
    tamper(TaskEvent.objects.filter(task=bad, version=2), to_state="completed")
    err = StringIO()
    with pytest.raises(CommandError, match="History verification failed"):
        call_command("history_verify", stdout=StringIO(), stderr=err)
    assert err.getvalue() == f"task {bad.pk}: event v2 (claim) was altered after it was written\n"
    call_command("history_verify", str(good.pk), stdout=StringIO())


def test_a_change_judged_on_a_stale_read_is_judged_again_under_the_lock(
        make_task, make_worker, supervisor):
    """The conditional update names the version seen: after a reassign it changes nothing,
    and the locked read refuses the release of a task its worker no longer holds."""
    from inbox.services.supervisor import task_reassign

    worker, other = make_worker({"invoice-review": 3}), make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    stale = access_task(user=worker, task_id=task.pk)
    task_reassign(supervisor=supervisor, task_id=task.pk, worker=other,
                  reason="Ana is out today.")
    with pytest.raises(Conflict, match="You do not hold this task"):
        lifecycle.transition(task_id=task.pk, action="release", actor=worker, seen=stale)
    fresh = access_task(user=supervisor, task_id=task.pk, action="manage")
    assert (fresh.assignee, fresh.version) == (other, stale.version + 1)
    assert TaskEvent.objects.filter(task=task).order_by("-version").first().action == "reassign"
    assert stale.assignee == worker  # the caller's object is left as it was read


def test_a_change_on_a_read_still_current_needs_no_second_read(make_task, make_worker):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    seen = access_task(user=worker, task_id=task.pk)
    with CaptureQueriesContext(connection) as queries:
        released = lifecycle.transition(task_id=task.pk, action="release", actor=worker,
                                        seen=seen)
    sql = [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]
    assert not any(s.startswith("SELECT") for s in sql), sql
    assert (released.state, released.version, released.assignee) == (
        TaskState.QUEUED, seen.version + 1, None)
    assert events_verify(task=released) is None


def _stored_history(task_id) -> list[tuple]:
    return [(e.version, e.action, e.to_state, e.actor_label, e.at, e.hash)
            for e in TaskEvent.objects.filter(task_id=task_id).order_by("version")]


def _shown_history(task) -> list[tuple]:
    from inbox.selectors import task_history

    return [(e.version, e.action, e.to_state, e.actor_label, e.at, e.hash)
            for e in task_history(task=task)]


@pytest.mark.parametrize("decide", ["complete", "reject"])
def test_a_decision_that_shows_the_history_reads_it_with_its_task(decide, make_task,
                                                                  make_worker):
    """history=True: on PostgreSQL the task's read answers its history, and the decision's
    own event is added to it; nothing more is read to show it, and it is what is stored."""
    from django.test.utils import CaptureQueriesContext

    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    if decide == "complete":
        decided = task_complete(worker=worker, task_id=task.pk,
                                answer={"decision": "approve"}, history=True)
    else:
        decided = task_reject(worker=worker, task_id=task.pk, reason="Wrong vendor.",
                              history=True)
    with CaptureQueriesContext(connection) as queries:
        shown = _shown_history(decided)
    assert len(queries) == (0 if connection.vendor == "postgresql" else 1)
    assert shown == _stored_history(task.pk)
    assert [action for _, action, *_ in shown] == ["receive", "take_next", decide]


def test_a_history_read_with_a_task_that_changed_since_is_not_shown(make_task, make_worker):
    """The version seen is not the task's any more: the change is judged under the lock, on
    the row read again, and the history shown is read again too (not the one seen)."""
    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    seen = access_task(user=worker, task_id=task.pk, history=True)
    task_release(worker=worker, task_id=task.pk)
    task_take_next(worker=worker)  # the same task, two versions later
    completed = lifecycle.transition(task_id=task.pk, action="complete", actor=worker,
                                     seen=seen, answer={"decision": "approve"})
    assert completed.version == seen.version + 3
    shown = _shown_history(completed)
    assert shown == _stored_history(task.pk)
    assert [action for _, action, *_ in shown][-3:] == ["release", "take_next", "complete"]


def test_a_retried_decision_shows_the_history_as_stored_not_as_it_read_it(
        make_task, make_worker, monkeypatch):
    """A retry whose read came before the first decision (a double click, both read at
    once) answers the decision made; the history it shows holds that decision."""
    from inbox.services import worker as worker_service

    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)
    seen = access_task(user=worker, task_id=task.pk, history=True)
    task_complete(worker=worker, task_id=task.pk, answer={"decision": "approve"})
    monkeypatch.setattr(worker_service, "access_task", lambda **kwargs: seen)
    again = task_complete(worker=worker, task_id=task.pk, answer={"decision": "approve"},
                          history=True)
    assert again.decided_before
    assert _shown_history(again) == _stored_history(task.pk)
    assert [action for _, action, *_ in _shown_history(again)][-1] == "complete"
