"""Writes for processes: deploy versions, start executions, keep execution records current.

Calls to Step Functions and SQS are slow and can hang for seconds, so every one of them
runs outside database transactions; the transactions here are short and only write rows.
"""

import hashlib
import json
import logging
import re
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import User
from config.errors import Conflict, ExternalServiceError, InboxError
from config.rows import update_where
from processes import aws
from processes.compiler import Target, compile_spec, state_machine_name
from processes.models import Execution, ExecutionStatus, Process, ProcessVersion
from processes.resume import RESUME_KEY
from processes.selectors import (
    execution_find,
    process_get,
    process_version_find,
    process_version_get,
    process_version_latest,
)
from processes.spec import ProcessSpec, SpecError, heartbeat_budget_warnings, spec_parse
from processes.states_logging import log_group_name, states_logging

logger = logging.getLogger(__name__)

BUSINESS_KEY_MAX = 200
# Step Functions execution names: 1-80 characters; these are safe everywhere (also in
# CloudWatch Logs and X-Ray, which reject some characters names may otherwise hold).
_NAME_MAX = 80
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
# 64 bits of the key's sha256: two different keys never share an execution name in practice.
_NAME_DIGEST_CHARS = 16


# Target ------------------------------------------------------------------------------


def target_current() -> Target:
    """Return where compiled state machines live now: the intake queue and the ARN prefix.

    The partition, region and account come from the intake queue's own ARN, so no STS
    call (and no extra permission) is needed, and the emulator answers the same way.
    """
    name = settings.INBOX_INTAKE_QUEUE
    try:
        url = aws.queue_url(name=name)
        queue_arn = aws.queue_attributes(url=url)["QueueArn"]
    except ExternalServiceError as exc:
        raise ExternalServiceError(
            f"The intake queue {name!r} is not usable: {exc.message}. Create it with "
            "manage.py aws_bootstrap (the emulator command creates it on start).",
            retryable=exc.retryable,
            error_code=exc.error_code,
        ) from exc
    parts = queue_arn.split(":")
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "sqs":
        raise ExternalServiceError(
            f"The intake queue's ARN {queue_arn!r} is not an SQS queue ARN.", retryable=False
        )
    partition, region, account = parts[1], parts[3], parts[4]
    return Target(
        intake_queue_url=url,
        state_machine_arn_prefix=f"arn:{partition}:states:{region}:{account}:stateMachine:",
    )


# Deploy ------------------------------------------------------------------------------


def process_deploy(
    *, text: str, source: str, user: User | None = None
) -> tuple[ProcessVersion, bool]:
    """Deploy the spec in text as a new immutable version; return it and whether it is new.

    Redeploying a deployed version with the same text changes no row, but makes sure its
    state machine exists (the emulator forgets everything on restart). Raise SpecError
    for an invalid spec, Conflict for a changed spec under a deployed version, a version
    below the latest, or a child process that is not deployed yet.
    """
    sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    # A version deployed before a rule for new versions (a human stage's show) may be
    # redeployed as it is: read as deployed, its text is found unchanged and only its
    # state machine is ensured. Anything else is read with every rule.
    same = deployed_unchanged(text=text, source=source)
    if same is not None:
        _state_machine_ensure(version=same)
        return same, False
    spec = spec_parse(text, source=source)
    for warning in heartbeat_budget_warnings(
            spec, source=source, rate=settings.INBOX_SENDTASK_RATE,
            share_percent=settings.INBOX_HEARTBEAT_SHARE_PERCENT):
        logger.warning("Deploying %s v%s: %s", spec.name, spec.version, warning)
    deployed = _deploy_check(spec=spec, sha256=sha256)
    if deployed is not None:
        _state_machine_ensure(version=deployed)
        return deployed, False

    target = target_current()
    asl = compile_spec(spec, target=target, children=child_ceilings(spec=spec))
    machine_name = state_machine_name(spec.name, spec.version)
    if settings.INBOX_STATE_MACHINES_FROM_TEMPLATE:
        # The CloudFormation stack creates it (manage.py infra_template) under this ARN.
        arn = target.state_machine_arn_prefix + machine_name
    else:
        # Before the row: a crash in between leaves a state machine no row points to, and
        # the retry simply updates it. The reverse order would leave a row without a machine.
        arn = aws.state_machine_create_or_update(
            name=machine_name, definition=asl, role_arn=settings.INBOX_STATES_ROLE_ARN,
            logging=_states_logging(process=spec.name, machine_arn=target.state_machine_arn_prefix),
        )
    with transaction.atomic():
        process, _ = Process.objects.get_or_create(name=spec.name)
        # Serialises deploys of one process, so the checks below see every committed
        # version: two racing deploys cannot both create the same version, or go down.
        Process.objects.select_for_update().filter(pk=process.pk).get()
        winner = process.versions.filter(version=spec.version).first()
        if winner is None:
            _deploy_check(spec=spec, sha256=sha256)
            version = ProcessVersion.objects.create(
                process=process,
                version=spec.version,
                description=spec.description,
                spec_text=text,
                spec_sha256=sha256,
                asl=asl,
                state_machine_name=machine_name,
                state_machine_arn=arn,
                deployed_by=user,
            )
            return version, True
    # A concurrent deploy of the same version committed first, and our call above may
    # have replaced its definition: put back the winner's, which the row promises.
    _state_machine_ensure(version=winner)
    if winner.spec_sha256 != sha256:
        raise _changed_version_conflict(spec=spec, process=process)
    return winner, False


def deployed_unchanged(*, text: str, source: str) -> ProcessVersion | None:
    """Return the deployed version whose spec is exactly text, or None.

    text is read as deployed (processes.spec.spec_parse), so a version deployed before a
    rule for new versions is found too.
    """
    try:
        as_deployed = spec_parse(text, source=source, deployed=True)
    except SpecError:
        return None  # Not a deployed text: the full parse names every problem.
    same = process_version_find(name=as_deployed.name, version=as_deployed.version)
    sha256 = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return same if same is not None and same.spec_sha256 == sha256 else None


def _deploy_check(*, spec: ProcessSpec, sha256: str) -> ProcessVersion | None:
    """Return the deployed version spec names if it has the same text, or None if it is new.

    Raise Conflict if the version is deployed with other text, is below the latest, or
    starts a child process version that is not deployed.
    """
    process = Process.objects.filter(name=spec.name).first()
    if process is not None:
        same = process.versions.filter(version=spec.version).first()
        if same is not None:
            if same.spec_sha256 == sha256:
                return same
            raise _changed_version_conflict(spec=spec, process=process)
        latest = process_version_latest(process=process)
        if latest is not None and spec.version < latest.version:
            raise Conflict(
                f"Cannot deploy {spec.name} v{spec.version}: versions only go up; "
                f"latest is {latest.version}."
            )
    missing = [
        f"{name} v{version}"
        for name, version in spec.children
        if process_version_find(name=name, version=version) is None
    ]
    if missing:
        raise Conflict(
            f"{spec.name} v{spec.version} starts child process {', '.join(missing)}, not "
            "deployed yet: deploy the child first."
        )
    return None


def child_ceilings(
    *, spec: ProcessSpec, compiled: Mapping[tuple[str, int], int] | None = None
) -> dict[tuple[str, int], int]:
    """Return the execution ceilings of the child versions spec starts, by (name, version).

    A child's ceiling is its state machine's TimeoutSeconds: from compiled (children
    compiled in the same batch, not deployed yet), else from its deployed version. A
    child found in neither is left out: compile_spec then names it. Raise Conflict for a
    child deployed before state machines had a ceiling: its executions may run for the
    year Step Functions allows, so nothing bounds the stage that starts it.
    """
    known = dict(compiled or {})
    ceilings: dict[tuple[str, int], int] = {}
    for name, version in spec.children:
        if (name, version) in known:
            ceilings[(name, version)] = known[(name, version)]
            continue
        deployed = process_version_find(name=name, version=version)
        if deployed is None:
            continue
        ceiling = deployed.asl.get("TimeoutSeconds")
        if not isinstance(ceiling, int):
            raise Conflict(
                f"{spec.name} v{spec.version} starts {name} v{version}, which was deployed "
                "without an execution ceiling (TimeoutSeconds): deploy a new version of "
                f"{name} and start that one."
            )
        ceilings[(name, version)] = ceiling
    return ceilings


def _changed_version_conflict(*, spec: ProcessSpec, process: Process) -> Conflict:
    latest = process_version_latest(process=process)
    following = latest.version + 1 if latest else spec.version + 1
    return Conflict(
        f"{spec.name} v{spec.version} is already deployed with a different spec. Deployed "
        f"versions never change: raise the version (to {following}) to deploy this one."
    )


def _state_machine_ensure(*, version: ProcessVersion) -> None:
    """Create or update version's state machine with its stored ASL, which never changes.

    With INBOX_STATE_MACHINES_FROM_TEMPLATE the stack owns it: nothing is called.
    """
    if settings.INBOX_STATE_MACHINES_FROM_TEMPLATE:
        return
    arn = aws.state_machine_create_or_update(
        name=version.state_machine_name,
        definition=version.asl,
        role_arn=settings.INBOX_STATES_ROLE_ARN,
        logging=_states_logging(process=version.process.name,
                                machine_arn=version.state_machine_arn),
    )
    if arn != version.state_machine_arn:
        raise Conflict(
            f"{version} was deployed as {version.state_machine_arn}, but Step Functions now "
            f"names it {arn}: the settings point at another account or region than the one "
            "this database was deployed to."
        )


def _states_logging(*, process: str, machine_arn: str) -> dict[str, Any]:
    """Make sure the process's log group exists; return the loggingConfiguration to deploy with.

    machine_arn: a state machine ARN (or the ARN prefix) of the account and region.
    The same log group, level and retention as the CloudFormation template's
    (processes/infra.py), and never execution data: it holds the task tokens.
    """
    _arn, partition, _states, region, account = machine_arn.split(":")[:5]
    group = log_group_name(prefix=settings.INBOX_INFRA_PREFIX, process=process)
    aws.log_group_ensure(name=group, retention_days=settings.INBOX_STATES_LOG_RETENTION_DAYS)
    return states_logging(
        log_group_arn=f"arn:{partition}:logs:{region}:{account}:log-group:{group}:*",
        level=settings.INBOX_STATES_LOG_LEVEL,
    )


# Start -------------------------------------------------------------------------------


def execution_name_for(*, business_key: str) -> str:
    """Return the Step Functions execution name for business_key: the same key, the same name.

    The readable part keeps the safe characters of the key; the sha256 suffix keeps
    keys apart that differ only in unsafe characters or beyond the length limit.
    """
    digest = hashlib.sha256(business_key.encode("utf-8")).hexdigest()[:_NAME_DIGEST_CHARS]
    readable = _NAME_UNSAFE.sub("-", business_key).strip("-")
    readable = readable[: _NAME_MAX - _NAME_DIGEST_CHARS - 1].rstrip("-")
    return f"{readable}-{digest}" if readable else digest


def process_start(
    *,
    name: str,
    input: dict[str, Any],
    business_key: str,
    user: User | None = None,
    version: int | None = None,
) -> tuple[Execution, bool]:
    """Start the process for business_key (latest version unless given); return it, and if new.

    The key makes the execution name, so starting twice starts once: the second call
    returns the first execution without calling AWS. Raise Conflict if the key was
    already used with other input or on another version.
    """
    _business_key_check(business_key=business_key)
    data = _input_canonical(input=input)
    process = process_get(name=name)
    existing = execution_find(process=process, business_key=business_key)
    if existing is not None:
        _execution_same_check(execution=existing, input=data, version=version)
        return existing, False

    process_version = process_version_get(name=name, version=version)
    execution_name = execution_name_for(business_key=business_key)
    try:
        # The row reserves the key before AWS is called, in a transaction that commits after
        # the call: a racing start of the same key waits at its insert (the unique index on
        # PostgreSQL, the write lock on SQLite), then fails it and finds this row, so one key
        # makes one StartExecution. A failed call rolls the reservation back.
        with transaction.atomic():
            execution = Execution.objects.create(
                process=process,
                version=process_version,
                business_key=business_key,
                name=execution_name,
                execution_arn=execution_arn_for(
                    state_machine_arn=process_version.state_machine_arn,
                    execution_name=execution_name,
                ),
                input=data,
                started_by=user,
            )
            execution_arn = _execution_start_aws(
                version=process_version, execution_name=execution_name, input=data
            )
            if execution_arn != execution.execution_arn:
                raise ExternalServiceError(
                    f"Step Functions started {execution_name!r} of {process_version} as "
                    f"{execution_arn}, not {execution.execution_arn} as the inbox expects; "
                    "nothing was recorded.",
                    retryable=False,
                )
    except IntegrityError:
        # A start of the same key committed first; its row is the one execution.
        winner = execution_find(process=process, business_key=business_key)
        if winner is None:
            raise
        _execution_same_check(execution=winner, input=data, version=version)
        return winner, False
    return execution, True


def _business_key_check(*, business_key: str) -> None:
    if not isinstance(business_key, str) or not business_key.strip():
        raise InboxError("A business key is required (1 to 200 characters).")
    if len(business_key) > BUSINESS_KEY_MAX:
        raise InboxError(
            f"The business key has {len(business_key)} characters; at most "
            f"{BUSINESS_KEY_MAX} are allowed."
        )


def _input_canonical(*, input: Any) -> dict[str, Any]:
    """Return input with its keys sorted, or raise InboxError if it is not a JSON object.

    Sorted keys make a retry send byte-identical input: AWS compares the input text
    when it decides that a second StartExecution of the same name is the same start.
    """
    if not isinstance(input, dict):
        raise InboxError(f"The input must be a JSON object, not {type(input).__name__}.")
    if RESUME_KEY in input:
        # The router would take it for a migration's resume (processes/resume.py).
        raise InboxError(f"The input's key {RESUME_KEY!r} is reserved for migrations; "
                         "rename it.")
    try:
        return json.loads(json.dumps(input, sort_keys=True, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InboxError(f"The input is not valid JSON: {exc}.") from None


def _execution_same_check(
    *, execution: Execution, input: dict[str, Any], version: int | None
) -> None:
    """Raise Conflict unless a second start with these arguments is the same as execution."""
    key = execution.business_key
    if execution.input != input:
        raise Conflict(
            f"Business key {key!r} was already used to start {execution.process.name} with "
            "other input; a key starts one execution only. Use a new key for a new execution."
        )
    if version is not None and execution.version.version != version:
        raise Conflict(
            f"Business key {key!r} already started {execution.process.name} "
            f"v{execution.version.version}, not v{version}."
        )


def _execution_start_aws(
    *, version: ProcessVersion, execution_name: str, input: dict[str, Any]
) -> str:
    """Start the execution in Step Functions (idempotent by name); return its ARN."""
    try:
        return aws.execution_start(
            state_machine_arn=version.state_machine_arn, name=execution_name, input=input
        )
    except ExternalServiceError as exc:
        if exc.error_code == "StateMachineDoesNotExist":
            how = (
                "deploy the CloudFormation stack with a template made since it was deployed "
                "(manage.py infra_template)"
                if settings.INBOX_STATE_MACHINES_FROM_TEMPLATE
                else "deploy the spec again (manage.py process_deploy)"
            )
            raise ExternalServiceError(
                f"The state machine of {version} is missing in Step Functions (did the "
                f"emulator restart, or is the stack behind?): {how}.",
                retryable=False,
                error_code=exc.error_code,
            ) from exc
        if exc.error_code != "ExecutionAlreadyExists":
            raise
    # AWS answers ExecutionAlreadyExists for the same name with other input, and also for
    # the same input once that execution has finished: a start whose row was lost (a
    # crash after the AWS call) and is retried late. The second case is ours to record.
    execution_arn = execution_arn_for(
        state_machine_arn=version.state_machine_arn, execution_name=execution_name
    )
    described = aws.execution_describe(execution_arn=execution_arn)
    if _json_or_text(described.get("input")) != input:
        raise Conflict(
            f"Business key of execution {execution_name!r} was already used to start "
            f"{version} with other input; use a new key for a new execution."
        )
    return execution_arn


def execution_arn_for(*, state_machine_arn: str, execution_name: str) -> str:
    """Return the ARN Step Functions gives an execution called execution_name."""
    return state_machine_arn.replace(":stateMachine:", ":execution:", 1) + ":" + execution_name


# Execution records ----------------------------------------------------------------------

_FINAL_STATUSES = {
    ExecutionStatus.SUCCEEDED,
    ExecutionStatus.FAILED,
    ExecutionStatus.TIMED_OUT,
    ExecutionStatus.ABORTED,
}


def execution_refresh(*, execution: Execution) -> Execution:
    """Bring execution's status, output and error up to date from DescribeExecution.

    An execution Step Functions no longer knows (the emulator restarted) becomes MISSING.
    Return the execution as stored afterwards.
    """
    now = timezone.now()
    try:
        described = aws.execution_describe(execution_arn=execution.execution_arn)
    except ExternalServiceError as exc:
        if exc.error_code != "ExecutionDoesNotExist":
            raise ExternalServiceError(
                f"Refreshing execution {execution.name} of {execution.process.name} failed: "
                f"{exc.message}",
                retryable=exc.retryable,
                error_code=exc.error_code,
            ) from exc
        changes: dict[str, Any] = {
            "status": ExecutionStatus.MISSING,
            "error": "ExecutionDoesNotExist: Step Functions does not know this execution "
            "(the emulator restarted, or the execution is older than AWS keeps them).",
        }
    else:
        changes = _changes_described(described=described)
    # Conditional on the status read: a concurrent refresh that recorded a final state
    # first is never overwritten with an older answer.
    Execution.objects.filter(pk=execution.pk, status=execution.status).update(
        checked_at=now, **changes
    )
    execution.refresh_from_db()
    return execution


def execution_described_record(*, execution_arn: str, described: dict[str, Any]) -> bool:
    """Record what a DescribeExecution made for another reason said of a running execution.

    The timeline's reads (inbox.timeline) pass theirs, so the executions list is as fresh
    as the last timeline read, at no extra call. Return whether a row changed: only a
    RUNNING row of the inbox's own is written (a final status is never rewritten).
    """
    changes = {**_changes_described(described=described), "checked_at": timezone.now()}
    # Conditional on RUNNING, as in execution_refresh: a final state recorded first stays.
    # Written without the ORM's compile of that update on each call: it was most of the
    # clock's CPU for an ended execution's status event (a py-spy of bench/cost_per_task.py).
    return bool(update_where(Execution, changes, {"execution_arn": execution_arn,
                                                  "status": str(ExecutionStatus.RUNNING)}))


def _changes_described(*, described: dict[str, Any]) -> dict[str, Any]:
    """Return the Execution fields DescribeExecution's answer sets."""
    aws_status = described.get("status", "")
    # PENDING_REDRIVE (a failed execution being redriven) is running again.
    status = ExecutionStatus(aws_status) if aws_status in _FINAL_STATUSES else None
    if status is None:
        return {"status": ExecutionStatus.RUNNING}
    return {
        "status": status,
        "output": _json_or_text(described.get("output")),
        "error": described.get("error", ""),
        "cause": described.get("cause", ""),
        "finished_at": described.get("stopDate") or timezone.now(),
    }


def _json_or_text(value: str | None) -> Any:
    """Return the JSON in value, or value itself when it is not JSON (the emulator allows it)."""
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return value


def executions_reconcile(*, batch: int = 100) -> int:
    """Refresh up to batch RUNNING executions, least recently checked first; return how many.

    Each execution is claimed, asked about and written in short transactions of its own,
    so a reconciler holds no lock while it waits for AWS.
    """
    candidates = list(
        Execution.objects.filter(status=ExecutionStatus.RUNNING)
        .order_by(F("checked_at").asc(nulls_first=True), "id")
        .values_list("pk", "checked_at")[:batch]
    )
    checked = 0
    for pk, checked_at in candidates:
        # Claim: of two reconcilers that read the same row, only the one that moves
        # checked_at from the value both read asks AWS; the other skips the row.
        claimed = Execution.objects.filter(
            pk=pk, status=ExecutionStatus.RUNNING, checked_at=checked_at
        ).update(checked_at=timezone.now())
        if claimed != 1:
            continue
        execution = Execution.objects.select_related("process").get(pk=pk)
        execution_refresh(execution=execution)
        checked += 1
    return checked
