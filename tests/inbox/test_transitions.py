"""The transition table, walked row by row and state by state.

Every row of inbox.lifecycle.TRANSITIONS is applied to a task in every state: from its
own states it changes the task to its target with exactly one hash-chained event, an
outbox row exactly when it tells Step Functions, and exactly its effects after commit;
from any other state it is refused and changes nothing. The task is put in each state by
updating its row (the one place tests do, to reach every state of the table).
"""

import ast
import datetime
import uuid
from pathlib import Path

import pytest
from django.utils import timezone

from accounts.roles import Role
from config.celery import app
from config.errors import Conflict, InboxError
from inbox import effects
from inbox.effects import TASK_NAMES
from inbox.history import events_verify
from inbox.lifecycle import TRANSITIONS, transition
from inbox.models import HELD_STATES, Outbox, OutboxStatus, Task, TaskEvent, TaskState
from inbox.tokens import token_digest, token_encrypt

ROOT = Path(__file__).resolve().parents[2]
ACTIONS = [action for action in TRANSITIONS if action != "receive"]
# Objects with a state of their own that is not a task's (the board's filter form).
NOT_TASKS = {"filters"}
# Decided by a worker: the task keeps its holder.
DECIDED = [TaskState.COMPLETING, TaskState.REJECTING]


@pytest.fixture(autouse=True)
def quick_passwords(settings):
    """Users are made by the hundred here: hash their passwords cheaply."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def enqueued(monkeypatch) -> list[tuple]:
    """Record what inbox.effects enqueues, by Celery task name, instead of sending it."""
    sent: list[tuple] = []
    monkeypatch.setattr(effects, "enqueue", lambda name, *arguments: sent.append((name,
                                                                                   arguments)))
    return sent


@pytest.fixture
def people(make_worker, check_skill):
    return {
        "holder": make_worker({"document-check": 3}),
        "other": make_worker({"document-check": 3}),
        "boss": make_worker({"document-check": 3}, roles=(Role.SUPERVISOR,)),
    }


def _task_in(state: str, *, make_task, holder) -> Task:
    """Bring a push-queue task in through intake and put it in state, with running clocks."""
    task = make_task(skill="document-check", onTimeout="escalate",
                     timeouts={"offer": 60, "work": 600, "overall": 3600, "escalation": 600})
    later = timezone.now() + datetime.timedelta(minutes=5)
    Task.objects.filter(pk=task.pk).update(
        state=state, assignee=holder if state in HELD_STATES + DECIDED else None,
        offer_deadline=later, work_deadline=later,
    )
    task = Task.objects.get(pk=task.pk)
    if state in DECIDED:
        # Decided by its holder, the callback still inside its undo window (what undo needs).
        Outbox.objects.create(task=task, decision_version=task.version, kind="success",
                              output={}, next_attempt_at=later)
    return task


def _arguments(action: str, people: dict) -> dict:
    """Return who applies the row and the parameters its change needs."""
    row = TRANSITIONS[action]
    if row.holder or action in ("take_next", "claim"):
        actor = people["holder"]
    elif row.needs_reason:
        actor = people["boss"]
    else:
        actor = None
    params = {"offer": {"worker": people["other"]}, "reassign": {"worker": people["other"]},
              "complete": {"answer": {"decision": "approve"}}, "delivered": {"kind": "success"},
              "escalate": {"since": timezone.now()}}.get(action, {})
    if action.startswith("extend_"):
        params = {"seconds": 60}
    if action == "migrate":
        token = f"moved-{uuid.uuid4()}"  # Each call's own: a token has one task.
        params = {"token_ciphertext": token_encrypt(token), "token_digest": token_digest(token),
                  "execution_arn": "arn:aws:states:us-east-1:123456789012:execution:x-v2:e",
                  "process_version": 2, "migration": 1}
    return {"actor": actor, "reason": "Because the table says so.", **params}


@pytest.mark.parametrize("state", list(TaskState))
@pytest.mark.parametrize("action", ACTIONS)
def test_every_row_starts_only_from_its_states_and_has_exactly_its_effects(
    action, state, make_task, people, enqueued, django_capture_on_commit_callbacks
):
    row = TRANSITIONS[action]
    task = _task_in(state, make_task=make_task, holder=people["holder"])
    events_before = TaskEvent.objects.filter(task=task).count()
    outbox_before = Outbox.objects.filter(task=task).count()

    with django_capture_on_commit_callbacks(execute=True):
        if state not in row.sources:
            # IllegalTransition, or (a holder's row, the task held by nobody) a Conflict.
            with pytest.raises(Conflict):
                transition(task_id=task.pk, action=action, **_arguments(action, people))
        else:
            changed = transition(task_id=task.pk, action=action, **_arguments(action, people))

    fresh = Task.objects.get(pk=task.pk)
    events = list(TaskEvent.objects.filter(task=task).order_by("version"))
    if state not in row.sources:
        assert (fresh.state, fresh.version) == (task.state, task.version)
        assert len(events) == events_before
        assert Outbox.objects.filter(task=task).count() == outbox_before
        assert enqueued == []
        return
    assert changed.version == fresh.version == task.version + 1
    assert fresh.state == row.target_from(state)
    assert len(events) == events_before + 1
    last = events[-1]
    assert (last.action, last.from_state, last.to_state, last.version) == (
        action, state, fresh.state, fresh.version)
    assert events_verify(task=fresh) is None
    assert Outbox.objects.filter(task=task).count() == outbox_before + (1 if row.callback else 0)
    # A callback has no message: its pending outbox row is what the sender sends.
    assert [name for name, _ in enqueued] == [TASK_NAMES[e] for e in row.all_effects
                                              if e != effects.Effect.CALLBACK]
    if row.callback:
        assert Outbox.objects.filter(task=task, status=OutboxStatus.PENDING).count() == 1


def test_receive_is_the_first_row_and_offers_a_push_task_after_commit(
    make_task, check_skill, enqueued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        task = make_task(skill="document-check")
    events = list(TaskEvent.objects.filter(task=task))
    assert [(e.version, e.action, e.from_state, e.to_state) for e in events] == [
        (1, "receive", "", TaskState.QUEUED)]
    assert events_verify(task=task) is None
    assert enqueued == [(TASK_NAMES[effects.Effect.DISPATCH], (str(task.pk),))]


def test_a_pull_queue_task_back_in_its_queue_is_not_dispatched(
    make_task, worker, enqueued, django_capture_on_commit_callbacks
):
    """The dispatch effect is for push queues; a released pull task waits for a take."""
    task = make_task()
    with django_capture_on_commit_callbacks(execute=True):
        transition(task_id=task.pk, action="claim", actor=worker)
        transition(task_id=task.pk, action="release", actor=worker)
    assert enqueued == []


def test_each_row_states_its_callback_as_its_first_effect():
    for row in TRANSITIONS.values():
        assert (effects.Effect.CALLBACK in row.all_effects) == (row.callback is not None)
        assert effects.Effect.CALLBACK not in row.effects, row.action


def _state_assignments(path: Path) -> list[int]:
    """Return the lines of path that assign a task's state (attribute or update/create)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        if any(isinstance(t, ast.Attribute) and t.attr == "state"
               and ast.unparse(t.value) not in NOT_TASKS for t in targets):
            lines.append(node.lineno)
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("update", "create", "get_or_create", "update_or_create",
                                       "bulk_create")
                and any(k.arg == "state" for k in node.keywords)):
            lines.append(node.lineno)
    return lines


def test_nothing_but_the_lifecycle_assigns_a_task_state():
    offenders = {}
    for room in ("inbox", "processes", "accounts", "config"):
        for path in (ROOT / room).rglob("*.py"):
            if "migrations" in path.parts or path == ROOT / "inbox" / "lifecycle.py":
                continue
            found = _state_assignments(path)
            if found:
                offenders[str(path.relative_to(ROOT))] = found
    assert offenders == {}


def test_the_state_check_finds_an_assignment(tmp_path):
    """The check above can fail: it sees both ways of writing a state."""
    sample = tmp_path / "sample.py"
    sample.write_text("task.state = 'queued'\nTask.objects.filter(pk=1).update(state='x')\n"
                      "filters.state = ''\n")
    assert _state_assignments(sample) == [1, 2]


# The table as docs/ARCHITECTURE.md shows it ----------------------------------------------


def _states(values: tuple[str, ...]) -> str:
    closed = {TaskState.COMPLETED, TaskState.REJECTED, TaskState.TIMED_OUT,
              TaskState.EXPIRED, TaskState.CANCELLED}
    if set(values) == set(TaskState) - closed:
        return "any not closed"
    if set(values) == {TaskState.QUEUED, TaskState.OFFERED, TaskState.IN_PROGRESS,
                       TaskState.ESCALATED}:
        return "open"
    return ", ".join(values) or "(new)"


def transitions_markdown() -> str:
    """Render TRANSITIONS as the Markdown table docs/ARCHITECTURE.md holds."""
    lines = ["| action | from | to | who | change | effects after commit |",
             "|---|---|---|---|---|---|"]
    for row in TRANSITIONS.values():
        if row.target is None:
            target = "(same)"
        elif isinstance(row.target, dict):
            target = ", ".join(f"{a} → {b}" for a, b in row.target.items())
        else:
            target = str(row.target)
        who = ("the holder" if row.holder else "an admin" if row.system == "migration"
               else "a supervisor" if row.needs_reason
               else row.system if row.system != "system" else "the worker")
        change = (row.change.__doc__ or "").strip().splitlines()[0] if row.change.__doc__ \
            else row.change.__name__.strip("_").replace("_", " ")
        effects_text = ", ".join(e.value for e in row.all_effects) or "-"
        lines.append(f"| `{row.action}` | {_states(row.sources)} | {target} | {who} | "
                     f"{change} | {effects_text} |")
    return "\n".join(lines)


def test_the_architecture_doc_shows_the_transition_table_as_the_code_has_it():
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    table = transitions_markdown()
    assert table in doc, f"docs/ARCHITECTURE.md should hold this table:\n\n{table}\n"


def _rows_of(task: Task) -> dict:
    """Return what a change wrote of a task, its history, outbox and passes, without times."""
    from inbox.models import TaskPass

    fresh = Task.objects.get(pk=task.pk)
    last = TaskEvent.objects.filter(task=task).order_by("-version").first()
    clocks = ("offer_deadline", "work_deadline", "overall_deadline", "next_heartbeat_at",
              "closed_at")
    return {
        "task": (fresh.state, fresh.version, fresh.assignee_id, fresh.answer, fresh.reason,
                 *(getattr(fresh, clock) is None for clock in clocks)),
        "event": (last.action, last.from_state, last.to_state, last.actor_label, last.reason,
                  {key: value for key, value in last.data.items()
                   if not key.endswith(("deadline", "At"))}),
        "outbox": sorted((row.kind, row.error, row.cause, sorted(row.output or {}))
                         for row in Outbox.objects.filter(task=task)),
        "passes": sorted(TaskPass.objects.filter(task=task).values_list("why", "reason",
                                                                        "worker_id")),
        "verified": events_verify(task=fresh),
    }


@pytest.mark.parametrize("action", ACTIONS)
def test_a_batch_writes_what_one_transition_at_a_time_writes(
    action, make_task, people, enqueued, django_capture_on_commit_callbacks
):
    """transitions_apply (the clocks' set-based form) applies the same row the same way."""
    from django.db import transaction

    from inbox.lifecycle import transitions_apply

    row = TRANSITIONS[action]
    state = row.sources[0]
    one, twin, refused = (_task_in(s, make_task=make_task, holder=people["holder"])
                          for s in (state, state, TaskState.CANCELLED))
    arguments = _arguments(action, people)
    if action == "migrate":
        # Its event names the execution the task leaves: make it the same for both.
        Task.objects.filter(pk=twin.pk).update(execution_arn=one.execution_arn)
    with django_capture_on_commit_callbacks(execute=True):
        transition(task_id=one.pk, action=action, **arguments)
    singly, enqueued[:] = list(enqueued), []
    if action == "migrate":
        arguments = _arguments(action, people)  # Another token: a token has one task.
    reason = arguments.pop("reason")
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        locked = list(Task.objects.select_for_update().filter(pk__in=[twin.pk, refused.pk])
                      .order_by("created_at"))
        batch = transitions_apply(action=action, tasks=locked, reason=reason, **arguments)
    assert [task.pk for task in batch.applied] == [twin.pk]
    assert list(batch.refused) == [refused.pk]
    assert _rows_of(twin) == _rows_of(one)
    assert _rows_of(twin)["verified"] is None
    assert [name for name, _ in enqueued] == [name for name, _ in singly]
    assert Task.objects.get(pk=refused.pk).version == refused.version


@pytest.mark.parametrize("action", ["offer_timeout", "work_timeout", "overall_timeout"])
def test_a_batch_costs_the_same_statements_whatever_its_size(
    action, make_task, people, enqueued
):
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from inbox.lifecycle import transitions_apply

    state = TRANSITIONS[action].sources[0]
    counts = []
    for size in (2, 6):
        tasks = [_task_in(state, make_task=make_task, holder=people["holder"])
                 for _ in range(size)]
        with transaction.atomic():
            locked = list(Task.objects.select_for_update()
                          .filter(pk__in=[task.pk for task in tasks]))
            with CaptureQueriesContext(connection) as queries:
                batch = transitions_apply(action=action, tasks=locked, reason="Ran out.")
        assert len(batch.applied) == size
        counts.append(len(queries))
    assert counts[0] == counts[1] <= 5, counts


def test_a_batch_writes_each_task_its_own_values(make_task, people):
    """Tasks at different versions, clocks and reasons: each gets its own row back (the
    PostgreSQL path writes them from one array per column), and each chain verifies."""
    from django.db import transaction

    from inbox.lifecycle import transitions_apply

    tasks = [_task_in(state, make_task=make_task, holder=people["holder"])
             for state in (TaskState.QUEUED, TaskState.IN_PROGRESS, TaskState.OFFERED)]
    boss = people["boss"]
    transition(task_id=tasks[1].pk, action="extend_overall", actor=boss, reason="More.",
               seconds=3600)
    for _ in range(2):
        transition(task_id=tasks[2].pk, action="extend_overall", actor=boss,
                   reason="More.", seconds=7200)
    before = {task.pk: Task.objects.get(pk=task.pk) for task in tasks}
    with transaction.atomic():
        locked = list(Task.objects.select_for_update().filter(pk__in=before))
        batch = transitions_apply(action="extend_overall", tasks=locked, actor=boss,
                                  reason=lambda task: f"Version {task.version}.", seconds=60)
    assert len(batch.applied) == 3
    for pk, was in before.items():
        now = Task.objects.get(pk=pk)
        assert (now.version, now.state, now.assignee_id) == (
            was.version + 1, was.state, was.assignee_id)
        assert now.overall_deadline == was.overall_deadline + datetime.timedelta(seconds=60)
        assert TaskEvent.objects.get(task_id=pk, version=now.version).reason == (
            f"Version {was.version}.")
        assert events_verify(task=now) is None
    assert sorted(was.version for was in before.values()) == [1, 2, 3]


def test_a_batch_enqueues_over_one_connection_and_one_failed_enqueue_stops_no_other(
    make_task, monkeypatch, caplog, django_capture_on_commit_callbacks
):
    """One on-commit hook for the batch's messages, one broker connection for them all; a
    message the broker refuses (patched: the broker is up here) is logged, the rest go."""
    tasks = [make_task() for _ in range(3)]
    seen: list[tuple] = []

    def enqueue(name, *arguments):
        seen.append((name, arguments, effects._producer.get()))
        if len(seen) == 1:
            raise OSError("the broker went away")

    monkeypatch.setattr(effects, "enqueue", enqueue)
    with django_capture_on_commit_callbacks(execute=True) as hooks:
        effects.after_commit_many(
            (task, (effects.Effect.NOTIFY_ESCALATED,)) for task in tasks)
    assert len(hooks) == 1
    assert [(name, arguments) for name, arguments, _ in seen] == [
        ("inbox.tasks.notify_task", ("escalated", str(task.pk))) for task in tasks]
    producers = {id(producer) for _, _, producer in seen}
    assert len(producers) == 1 and seen[0][2] is not None
    assert [record.getMessage() for record in caplog.records if record.levelname == "ERROR"
            ] == [f"Enqueueing inbox.tasks.notify_task('escalated', '{tasks[0].pk}') failed"]
    assert effects._producer.get() is None


def test_batched_groups_a_batchs_offers_and_sends_one_relay():
    """One message per BATCH_MAX of the same task; one alone stays as it is; argument-less
    messages (the signal relay) once; the others untouched, in order."""
    dispatch = effects.TASK_NAMES[effects.Effect.DISPATCH]
    relay, notify = effects.TASK_NAMES[effects.Effect.SIGNAL], "inbox.tasks.notify_task"
    count = effects.BATCH_MAX + 5
    messages = [(dispatch, (f"t{n}",)) for n in range(count)]
    messages += [(relay, ()), (notify, ("escalated", "a")), (relay, ()),
                 (notify, ("escalated", "b"))]

    out = effects.batched(messages)

    ids = [f"t{n}" for n in range(count)]
    assert out == [
        (relay, ()), (notify, ("escalated", "a")), (notify, ("escalated", "b")),
        ("inbox.tasks.dispatch_many_task", (ids[:effects.BATCH_MAX],)),
        ("inbox.tasks.dispatch_many_task", (ids[effects.BATCH_MAX:],))]
    assert effects.batched([(dispatch, ("only",))]) == [(dispatch, ("only",))]
    assert set(effects.BATCH_NAMES.values()) <= set(app.tasks)
    # A callback is never a message: the sender sends its outbox row.
    assert effects.Effect.CALLBACK not in effects.TASK_NAMES


def test_offering_a_batch_tries_every_task_and_then_says_what_failed(
    make_task, monkeypatch, caplog
):
    """tasks_dispatch: a task that fails to be offered is logged and the others are still
    tried; then the first failure is raised (beat's dispatch_pending offers it again)."""
    from inbox.services import dispatcher

    tried = []

    def task_dispatch(*, task_id):
        tried.append(task_id)
        if task_id == "b":
            raise RuntimeError("the database went away")
        return object() if task_id != "c" else None

    monkeypatch.setattr(dispatcher, "task_dispatch", task_dispatch)
    with pytest.raises(InboxError, match="1 of 4 offers failed; the first: the database"):
        dispatcher.tasks_dispatch(task_ids=["a", "b", "c", "d"])
    assert tried == ["a", "b", "c", "d"]
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        "Offering task b failed"]
    monkeypatch.setattr(dispatcher, "task_dispatch", lambda *, task_id: object())
    assert dispatcher.tasks_dispatch(task_ids=["a", "b"]) == 2
