"""Explicit migration: move executions waiting at a human stage to a newer process version.

An execution stays on the version it started on unless an admin migrates it
(``manage.py process_migrate`` or ``POST /api/inbox/processes/<name>/migrations/``). For each
open task of version N (optionally one stage, or some tasks) ``migrations_start``:

1. refuses, and says why, when version M cannot resume at the task's stage: no such human
   stage in M, compiled before resuming existed (processes/resume.py), another skill or
   another form (the task would change hands or its answer its shape);
2. records a TaskMigration (once per wait and version: asking again finds it), whose new
   execution has the old one's name on M's state machine, so its ARN is known before it
   starts;
3. begins it (``migration_begin``: in the command's process, or in the Celery worker for
   the API, since the web's role never reads a history, which holds tokens): reads the
   state the old execution entered the stage with from its history (the TaskStateEntered
   of the wait whose token is the task's) and starts M with it at the stage
   (StartExecution, idempotent by name and input). A wait that is over, or a state Step
   Functions truncated, makes the migration refused (final).

The new execution enters the stage and sends its envelope through the intake queue like
any other. The intake hands it here (``envelopes_migrated``): the task's ``migrate``
transition gives it the new token, execution and version in one transaction (state,
holder and clocks stay), and after commit ``migrations_finish`` stops the old execution
(StopExecution: its ABORTED status and cause name the new one). When the task was answered
or closed on the old execution first, the new one is stopped instead (superseded). A
redelivered envelope of the old wait is a duplicate (its token's digest is the
migration's).

Recorded in both histories: the task's (the ``migrate`` event: actor, reason, both
executions and versions) and Step Functions' (the new execution's input names the old
one, the old one's stop cause the new one). The history holds task tokens: nothing of it
reaches a log line, an error or a row but the carried state, which becomes the new
execution's input.
"""

import json
import logging
from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import User
from accounts.roles import Role
from accounts.selectors import user_has_role
from config.compiled import CompiledRead, Many
from config.errors import Conflict, ExternalServiceError, Forbidden, InboxError
from inbox import effects
from inbox.lifecycle import IllegalTransition, transition
from inbox.models import OPEN_STATES, MigrationStatus, Task, TaskMigration
from inbox.tokens import token_digest, token_encrypt
from inbox.waits import HISTORY_EVENTS, envelope_token, wait_body, waits_open
from processes import aws
from processes.models import Execution, ProcessVersion
from processes.resume import resumable_stages, resume_input
from processes.selectors import deployed_spec, form_for, process_version_get
from processes.services import execution_arn_for
from processes.spec import HumanStage

logger = logging.getLogger(__name__)

MIGRATED_ERROR = "Inbox.Migrated"
SUPERSEDED_ERROR = "Inbox.MigrationSuperseded"
# What the old execution's history must still show: the stage's entry before its wait.
_ENTERED = "TaskStateEntered"
# Statuses whose new execution may still send the envelope that moves the task.
_WAITING = (MigrationStatus.STARTING, MigrationStatus.STARTED)
# Statuses whose old wait is over for the inbox: its envelope, redelivered, is a duplicate.
_MOVED = (MigrationStatus.MOVED, MigrationStatus.DONE)


class MigrationRefused(Conflict):
    code = "migration_refused"


@dataclass(frozen=True)
class Result:
    """What migrations_start did with one task: "requested" (the worker begins it),
    "started" (begun here), "already" (asked before; status says how far it is),
    "refused" (detail says why), "failed" (begun here, Step Functions failed: asking again
    retries it), "planned" (a dry run)."""

    task_id: str
    execution_arn: str
    stage: str
    outcome: str
    status: str = ""
    detail: str = ""
    to_execution_arn: str = ""


# Asking -----------------------------------------------------------------------------------


def migrations_start(*, actor: User, process_name: str, from_version: int, to_version: int,
                     reason: str, stage: str | None = None, task_ids: list[str] | None = None,
                     dry_run: bool = False, run_now: bool = False) -> list[Result]:
    """Migrate the open tasks of process_name v from_version to v to_version; return each
    task's Result (see the module's docstring).

    run_now begins each migration here (the command, run with the worker's role, which
    reads histories); otherwise the worker begins it after commit (the API: the web's role
    may not).

    Raise Forbidden unless actor is an admin, NotFound for an unknown process or
    version, InboxError for a missing reason or a version that is not newer. A task that
    cannot move is refused on its own ("refused"); with run_now an AWS failure fails that
    task only ("failed").
    """
    if not user_has_role(user=actor, role=Role.ADMIN):
        raise Forbidden("Only admins migrate executions.")
    if not reason.strip():
        raise InboxError("Say why: a migration is recorded with its reason.")
    source = process_version_get(name=process_name, version=from_version)
    target = process_version_get(name=process_name, version=to_version)
    if to_version <= from_version:
        raise InboxError(f"Migrate to a newer version: v{to_version} is not newer than "
                         f"v{from_version}.")
    tasks = Task.objects.filter(process_name=process_name, process_version=from_version,
                                state__in=OPEN_STATES).select_related("skill")
    if stage:
        tasks = tasks.filter(stage=stage)
    if task_ids is not None:
        tasks = tasks.filter(pk__in=task_ids)
    problems: dict[str, str | None] = {}
    results = []
    for task in tasks.order_by("created_at", "pk"):
        if task.stage not in problems:
            problems[task.stage] = stage_problem(source=source, target=target,
                                                 stage=task.stage, skill=task.skill.slug,
                                                 form=task.form)
        problem = problems[task.stage]
        if problem is not None:
            results.append(_result(task, outcome="refused", detail=problem))
        elif dry_run:
            results.append(_result(task, outcome="planned"))
        else:
            results.append(migration_request(task=task, target=target, actor=actor,
                                             reason=reason, run_now=run_now))
    return results


def stage_problem(*, source: ProcessVersion, target: ProcessVersion, stage: str, skill: str,
                  form: str) -> str | None:
    """Return why a task of source at stage cannot move to target, or None if it can."""
    spec = deployed_spec(process_name=target.process.name, process_version=target.version)
    human = spec.stage(stage) if spec is not None else None
    if not isinstance(human, HumanStage):
        return f"{target} has no human stage {stage!r}: finish the task on {source}."
    if stage not in resumable_stages(target.asl):
        return (f"{target} was compiled before executions could resume at a stage: deploy "
                "its spec as a new version and migrate to that.")
    if human.skill != skill:
        return (f"Stage {stage!r} asks for skill {human.skill!r} in {target}, not {skill!r}: "
                "the task would change hands.")
    if form_for(process_name=target.process.name, process_version=target.version,
                form_name=human.form) != form_for(process_name=source.process.name,
                                                  process_version=source.version,
                                                  form_name=form):
        return (f"Stage {stage!r} asks for another form in {target}: an answer begun on "
                f"{source} would not fit it.")
    return None


def migration_request(*, task: Task, target: ProcessVersion, actor: User, reason: str,
                      run_now: bool) -> Result:
    """Record the migration of task's wait to target, then begin it: now (run_now: the
    caller may read histories and start executions, as the command run with the worker's
    role may) or in the worker after commit (the web's role reads no history: it holds
    tokens)."""
    new_arn = execution_arn_for(state_machine_arn=target.state_machine_arn,
                                execution_name=task.execution_arn.rsplit(":", 1)[-1])
    migration, created = TaskMigration.objects.get_or_create(
        from_token_digest=task.token_digest, to_version=target.version,
        defaults={"task": task, "stage": task.stage, "from_version": task.process_version,
                  "from_execution_arn": task.execution_arn, "to_execution_arn": new_arn,
                  "requested_by": actor, "reason": reason})
    if migration.status != MigrationStatus.STARTING:
        return _result(task, outcome="already", status=migration.status,
                       detail=migration.last_error, to_execution_arn=new_arn)
    if not run_now:
        # A lost enqueue is healed by asking again: a row still starting is begun again.
        effects.migration_begin_after_commit(migration_id=migration.pk)
        return _result(task, outcome="requested" if created else "already",
                       status=MigrationStatus.STARTING, to_execution_arn=new_arn)
    try:
        begun = migration_begin(migration_id=migration.pk)
    except ExternalServiceError as exc:
        # This task fails, the others go on; asking again retries it (it is still starting).
        return _result(task, outcome="failed", status=MigrationStatus.STARTING,
                       detail=exc.message, to_execution_arn=new_arn)
    return _result(task, outcome="started" if begun == MigrationStatus.STARTED else begun,
                   status=begun, detail=_last_error(migration.pk), to_execution_arn=new_arn)


def _last_error(migration_id: int) -> str:
    return TaskMigration.objects.filter(pk=migration_id).values_list(
        "last_error", flat=True).first() or ""


def migration_begin(*, migration_id: int) -> str:
    """Start the new execution of a requested migration at its stage; return its status.

    "started"; "refused" (the old execution no longer waits for the task's token, or its
    state cannot be carried: recorded, final); "starting" again after an AWS failure,
    which is recorded and raised (ExternalServiceError: the Celery task retries it).
    """
    migration = TaskMigration.objects.select_related("task").get(pk=migration_id)
    if migration.status != MigrationStatus.STARTING:
        return migration.status
    task = migration.task
    target = ProcessVersion.objects.get(process__name=task.process_name,
                                        version=migration.to_version)
    try:
        state = waiting_state(execution_arn=migration.from_execution_arn,
                              stage=migration.stage, digest=migration.from_token_digest)
        aws_input = json.loads(json.dumps(
            resume_input(stage=migration.stage, state=state,
                         source=migration.from_execution_arn), sort_keys=True))
        _start(state_machine_arn=target.state_machine_arn,
               name=migration.to_execution_arn.rsplit(":", 1)[-1], input=aws_input,
               execution_arn=migration.to_execution_arn)
    except MigrationRefused as exc:
        # Conditional: only a migration still starting becomes refused.
        TaskMigration.objects.filter(pk=migration.pk, status=MigrationStatus.STARTING).update(
            status=MigrationStatus.REFUSED, attempts=migration.attempts + 1,
            last_error=exc.message[:2000])
        logger.warning("Migration of task %s to v%d refused: %s", task.pk,
                       migration.to_version, exc.message)
        return MigrationStatus.REFUSED
    except ExternalServiceError as exc:
        TaskMigration.objects.filter(pk=migration.pk).update(
            attempts=migration.attempts + 1, last_error=exc.message[:2000])
        logger.warning("Migration of task %s to v%d: starting failed: %s", task.pk,
                       migration.to_version, exc.message)
        raise
    # Conditional: the intake may have moved the task already (its envelope came first).
    TaskMigration.objects.filter(pk=migration.pk, status=MigrationStatus.STARTING).update(
        status=MigrationStatus.STARTED, attempts=migration.attempts + 1, last_error="")
    logger.info("Migration: task %s… %s → %s started at %s", str(task.pk)[:8],
                migration.from_execution_arn, migration.to_execution_arn, migration.stage)
    return MigrationStatus.STARTED


def _result(task: Task, **fields: Any) -> Result:
    return Result(task_id=str(task.pk), execution_arn=task.execution_arn, stage=task.stage,
                  **fields)


def waiting_state(*, execution_arn: str, stage: str, digest: str) -> Any:
    """Return the state execution_arn entered stage with, for the wait of the token whose
    digest is digest.

    Raise MigrationRefused when the history shows no such wait (answered meanwhile, or
    older than the HISTORY_EVENTS newest events) or a state Step Functions truncated.
    """
    events = aws.execution_history(execution_arn=execution_arn, max_events=HISTORY_EVENTS,
                                   newest_first=True)
    wait = next((w for w in waits_open(events) if _wait_digest(w) == digest), None)
    if wait is None:
        raise MigrationRefused(
            f"Execution {execution_arn} does not wait for this task's answer any more "
            f"(or waits too far back in its history to read): nothing to move.")
    entered = [event for event in events if event["type"] == _ENTERED
               and event["id"] < wait.event_id
               and event.get("stateEnteredEventDetails", {}).get("name") == stage]
    if not entered:
        raise MigrationRefused(f"Execution {execution_arn}'s history does not show how "
                               f"it entered stage {stage!r}.")
    details = max(entered, key=lambda event: event["id"])["stateEnteredEventDetails"]
    if (details.get("inputDetails") or {}).get("truncated"):
        raise MigrationRefused(f"Step Functions truncated the state execution "
                               f"{execution_arn} entered {stage!r} with: it "
                               "cannot be carried.")
    try:
        return json.loads(details.get("input") or "{}")
    except ValueError:
        raise MigrationRefused(f"The state execution {execution_arn} entered "
                               f"{stage!r} with is not JSON.") from None


def _wait_digest(wait: Any) -> str | None:
    token = envelope_token(wait_body(wait))
    return token_digest(token) if token is not None else None


def _start(*, state_machine_arn: str, name: str, input: dict[str, Any],
           execution_arn: str) -> None:
    """Start the new execution; a retry of the same start (same name, same input) is one."""
    try:
        aws.execution_start(state_machine_arn=state_machine_arn, name=name, input=input)
        return
    except ExternalServiceError as exc:
        if exc.error_code != "ExecutionAlreadyExists":
            raise
    described = aws.execution_describe(execution_arn=execution_arn)
    try:
        same = json.loads(described.get("input") or "null") == input
    except ValueError:
        same = False
    if not same:
        raise MigrationRefused(f"An execution {execution_arn} exists already with other input: "
                               "it is not this migration's; stop it or migrate by hand.")


# The new execution's envelope --------------------------------------------------------------


# What migrations one receive's envelopes may concern: every receive reads it, so the
# statement is compiled once per count of executions and digests (config.compiled).
_ARRIVALS_READ = CompiledRead(
    lambda shape, *, arns, digests: TaskMigration.objects.filter(
        Q(to_execution_arn__in=arns, status__in=_WAITING)
        | Q(from_token_digest__in=digests, status__in=_MOVED)),
    arns=Many(TaskMigration._meta.get_field("to_execution_arn")),
    digests=Many(TaskMigration._meta.get_field("from_token_digest")))


def envelopes_migrated(pending: list[tuple[int, dict[str, Any]]]) -> dict[int, str]:
    """Take the envelopes of pending (index, envelope) that migrations are waiting for, or
    that a migration made stale; return each one's intake outcome by index: "migrated"
    (its task moved to it), "superseded" (its task was closed first: the new execution is
    stopped) or "duplicate" (the old wait's envelope, redelivered, or a move already made).

    One query for the batch; the envelopes it does not return are ordinary.
    """
    if not pending:
        return {}
    digests = {index: token_digest(envelope["taskToken"]) for index, envelope in pending}
    found = _ARRIVALS_READ.run("all", arns=sorted({e["execution"] for _, e in pending}),
                               digests=sorted(set(digests.values())))
    if not found:
        return {}
    stale = {m.from_token_digest for m in found if m.status in _MOVED}
    waiting = {(m.to_execution_arn, m.stage): m for m in found if m.status in _WAITING}
    outcomes: dict[int, str] = {}
    for index, envelope in pending:
        if digests[index] in stale:
            outcomes[index] = "duplicate"
            continue
        migration = waiting.get((envelope["execution"], envelope["stage"]))
        if migration is not None:
            outcomes[index] = _arrived(migration=migration, envelope=envelope,
                                       digest=digests[index])
    return outcomes


def _arrived(*, migration: TaskMigration, envelope: dict[str, Any], digest: str) -> str:
    now = timezone.now()
    with transaction.atomic():
        # Locked: of two deliveries of the new envelope, one moves the task.
        migration = TaskMigration.objects.select_for_update().get(pk=migration.pk)
        if migration.status not in _WAITING:
            return "duplicate"
        try:
            transition(task_id=migration.task_id, action="migrate",
                       actor=migration.requested_by, reason=migration.reason,
                       token_ciphertext=token_encrypt(envelope["taskToken"]),
                       token_digest=digest, execution_arn=envelope["execution"],
                       process_version=envelope["process"]["version"],
                       migration=migration.pk)
        except IllegalTransition:
            # Answered or closed on the old execution first: that one goes on, this stops.
            migration.status = MigrationStatus.SUPERSEDED
            migration.save(update_fields=["status"])
            effects.migration_stop_after_commit(task_id=str(migration.task_id))
            logger.warning("Migration of task %s superseded: it was closed on %s first; "
                           "%s is stopped", migration.task_id, migration.from_execution_arn,
                           migration.to_execution_arn)
            return "superseded"
        migration.status, migration.moved_at = MigrationStatus.MOVED, now
        migration.save(update_fields=["status", "moved_at"])
        # The business key's execution record follows it (processes' view of the key).
        target = ProcessVersion.objects.filter(
            process__name=envelope["process"]["name"],
            version=envelope["process"]["version"]).first()
        if target is not None:
            Execution.objects.filter(execution_arn=migration.from_execution_arn).update(
                version=target, execution_arn=migration.to_execution_arn)
    return "migrated"


# Stopping what was left behind ---------------------------------------------------------------


def moved_away(*, digest: str) -> bool:
    """Return whether the wait of the token whose digest is digest was migrated away (its
    task answers a newer version now); if so, ask again for the old execution's stop (the
    orphan check finds such a wait while its execution still runs: a stop was lost)."""
    task_id = TaskMigration.objects.filter(from_token_digest=digest, status__in=_MOVED
                                           ).values_list("task_id", flat=True).first()
    if task_id is None:
        return False
    effects.migration_stop_after_commit(task_id=str(task_id))
    return True


def migrations_finish(*, task_id: str) -> int:
    """Stop the executions task's migrations left behind: the old one of a move, the new one
    of a superseded migration; return how many were stopped. Raise ExternalServiceError
    (after recording it) when Step Functions fails: the Celery task retries."""
    stopped = 0
    pending = TaskMigration.objects.filter(
        task_id=task_id, finished_at__isnull=True,
        status__in=(MigrationStatus.MOVED, MigrationStatus.SUPERSEDED))
    for migration in pending:
        if migration.status == MigrationStatus.MOVED:
            arn, error = migration.from_execution_arn, MIGRATED_ERROR
            cause = (f"Migrated to v{migration.to_version}: {migration.to_execution_arn} "
                     f"(the inbox's migration {migration.pk}).")
        else:
            arn, error = migration.to_execution_arn, SUPERSEDED_ERROR
            cause = (f"The task was closed on {migration.from_execution_arn} before this "
                     f"execution's envelope arrived (the inbox's migration {migration.pk}).")
        try:
            _stop(execution_arn=arn, error=error, cause=cause)
        except ExternalServiceError as exc:
            TaskMigration.objects.filter(pk=migration.pk).update(
                attempts=migration.attempts + 1, last_error=exc.message[:2000])
            raise
        # Conditional: a second finish of the same migration stops nothing more.
        done = TaskMigration.objects.filter(pk=migration.pk, finished_at__isnull=True).update(
            finished_at=timezone.now(), last_error="",
            status=(MigrationStatus.DONE if migration.status == MigrationStatus.MOVED
                    else MigrationStatus.SUPERSEDED))
        stopped += done
    return stopped


def _stop(*, execution_arn: str, error: str, cause: str) -> None:
    try:
        aws.execution_stop(execution_arn=execution_arn, error=error, cause=cause)
    except ExternalServiceError as exc:
        if exc.error_code != "ExecutionDoesNotExist":
            raise
        # Gone already (the emulator restarted, or it ended and aged out): nothing to stop.

