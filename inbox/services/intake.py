"""Intake: turn the messages on the SQS intake queue into tasks.

A human stage puts a ``human-task/v1`` envelope on the intake queue and waits for its
token to come back. ``intake_poll`` long-polls the queue; ``intake_message`` handles one
message in one transaction: a valid envelope becomes a queued task (its token encrypted,
with a keyed digest that makes redeliveries harmless), a ``process-failure/v1`` notice is
recorded and mailed to the admins (``inbox.process_failures``), and anything else is
recorded as an IntakeError and left on the queue, whose redrive policy moves it to the
dead-letter queue after a few receives (an admin moves them back once the cause is
fixed: inbox.services.admin.intake_redrive).

Message bodies hold task tokens: no body, token or envelope value reaches a log line, an
exception message or an IntakeError; problems name the field and the rule only.
"""

import datetime
import functools
import logging
import re
import traceback
import uuid
from enum import StrEnum
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Skill
from config.errors import ExternalServiceError
from inbox.display import key_order
from inbox.lifecycle import task_receive
from inbox.models import IntakeError, Task
from inbox.process_failures import process_failure_record
from inbox.redaction import REDACTED, redact
from inbox.services.clock import heartbeat_interval
from inbox.tokens import token_digest, token_encrypt
from processes import aws
from processes.contract import HUMAN_TASK, PROCESS_FAILURE
from processes.envelope import envelope_problems, envelope_read
from processes.selectors import form_for
from processes.spec import MAX_SECONDS

logger = logging.getLogger(__name__)

# The schema's own pattern: a readable execution ARN is worth keeping on an IntakeError.
_EXECUTION_ARN = re.compile(r"^arn:aws[a-zA-Z-]*:states:[^:]+:[0-9]{12}:execution:[^:]+:[^:]+$")
_EXECUTION_MAX = 2048
_STAGE_MAX = 80
_UNEXPECTED_MAX = 500
# What an IntakeError keeps of a refused message's problems (and its log line shows).
_PROBLEMS_MAX = 20
_PROBLEM_MAX = 500
POLL_LOCK_KEY = "inbox:intake-poll"
# Above the poll's budget (25 s) plus an SQS read timeout (30 s), so a live poller never
# loses its lock; a crashed one's lock lapses and the next beat tick polls again.
POLL_LOCK_SECONDS = 120


class Outcome(StrEnum):
    CREATED = "created"
    DUPLICATE = "duplicate"
    RECORDED = "recorded"
    INVALID = "invalid"
    # An unexpected exception; recorded as an IntakeError, the message is left for redrive.
    ERROR = "error"


# Outcomes whose message is done with: it is deleted from the queue after commit.
_DONE = frozenset({Outcome.CREATED, Outcome.DUPLICATE, Outcome.RECORDED})


# One message ----------------------------------------------------------------------------


def intake_message(*, message: dict) -> str:
    """Handle one SQS message (Body, MessageId, Attributes); return its Outcome.

    Return "created" for a new task, "duplicate" when a task with the same token exists,
    "recorded" for a process-failure notice, "invalid" when the message was refused and
    recorded as an IntakeError. Unexpected errors propagate; see ``intake_poll``.
    """
    message_id = str(message.get("MessageId") or "")
    receive_count = _receive_count(message)
    envelope, unreadable = envelope_read(message.get("Body") or "")
    if unreadable:
        return _invalid(message_id=message_id, receive_count=receive_count, envelope=None,
                        problems=unreadable)
    problems = envelope_problems(envelope)
    if not problems and envelope["kind"] == HUMAN_TASK:
        problems = _task_problems(envelope)
    if problems:
        return _invalid(
            message_id=message_id, receive_count=receive_count, envelope=envelope,
            problems=problems,
        )
    if envelope["kind"] == HUMAN_TASK:
        outcome = _task_create(envelope=envelope)
    elif envelope["kind"] == PROCESS_FAILURE:
        process_failure_record(envelope=envelope, message_id=message_id)
        outcome = Outcome.RECORDED
    else:
        # A kind the schemas know and this intake does not handle yet.
        return _invalid(
            message_id=message_id, receive_count=receive_count, envelope=envelope,
            problems=["kind: not handled by this version of the inbox"],
        )
    if receive_count > 1 and message_id:
        # Refused before (e.g. an unexpected error), taken now: not an intake error any more.
        IntakeError.objects.filter(message_id=message_id).delete()
    return outcome


def _receive_count(message: dict) -> int:
    try:
        return max(1, int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1)))
    except (TypeError, ValueError):
        return 1


def _task_problems(envelope: dict[str, Any]) -> list[str]:
    """Return what the schema cannot check: the skill, the form, the entry time."""
    problems = []
    if len(envelope["execution"]) > _EXECUTION_MAX:
        problems.append(f"execution: must be at most {_EXECUTION_MAX} characters")
    # Step Functions runs an execution for at most a year; longer clocks cannot be meant.
    clocks = {f"timeouts.{name}": value for name, value in envelope["timeouts"].items()}
    clocks["heartbeatSeconds"] = envelope.get("heartbeatSeconds", 0)
    problems.extend(
        f"{where}: must be at most {MAX_SECONDS}" for where, value in clocks.items()
        if value > MAX_SECONDS
    )
    if envelope["onTimeout"] == "escalate" and not envelope["timeouts"].get("escalation"):
        problems.append("timeouts.escalation: required with onTimeout escalate")
    if _entered_at(envelope["enteredAt"]) is None:
        problems.append("enteredAt: must be an ISO 8601 date and time")
    if not Skill.objects.filter(slug=envelope["skill"]).exists():
        problems.append(
            "skill: no skill with this slug exists (an admin creates it, then redrives "
            "the dead letters)"
        )
    process = envelope["process"]
    if form_for(process_name=process["name"], process_version=process["version"],
                form_name=envelope["form"]) is None:
        problems.append(
            "form: neither the deployed spec of this process version nor the built-in "
            "forms define it"
        )
    return problems


def _entered_at(value: str) -> datetime.datetime | None:
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        return None
    if timezone.is_naive(moment):
        # Step Functions times are UTC; a time without an offset is read as UTC.
        moment = moment.replace(tzinfo=datetime.UTC)
    return moment


def _task_create(*, envelope: dict[str, Any]) -> str:
    token = envelope["taskToken"]
    digest = token_digest(token)
    timeouts = envelope["timeouts"]
    now = timezone.now()
    try:
        with transaction.atomic():
            if Task.objects.filter(token_digest=digest).exists():
                return Outcome.DUPLICATE
            # The receive row of the transition table: queued, its first event, and an
            # offer after commit for a push queue (robust: dispatch_pending heals a lost
            # enqueue; the task stands).
            task = task_receive(
                token_ciphertext=token_encrypt(token),
                token_digest=digest,
                execution_arn=envelope["execution"],
                stage=envelope["stage"],
                process_name=envelope["process"]["name"],
                process_version=envelope["process"]["version"],
                skill=Skill.objects.get(slug=envelope["skill"]),
                min_proficiency=envelope.get("minProficiency", 1),
                title=envelope["title"],
                form=envelope["form"],
                input=envelope["input"],
                input_order=key_order(envelope["input"]),
                priority=envelope["priority"],
                exclude_workers_of=envelope.get("excludeWorkersOf", []),
                offer_seconds=timeouts["offer"],
                work_seconds=timeouts["work"],
                overall_seconds=timeouts["overall"],
                escalation_seconds=timeouts.get("escalation"),
                on_timeout=envelope["onTimeout"],
                heartbeat_seconds=envelope.get("heartbeatSeconds"),
                entered_at=_entered_at(envelope["enteredAt"]),
                # The overall clock runs from when the task entered the inbox.
                overall_deadline=now + datetime.timedelta(seconds=timeouts["overall"]),
                # Step Functions' heartbeat clock runs from when the stage started.
                next_heartbeat_at=(now + heartbeat_interval(envelope["heartbeatSeconds"])
                                   if envelope.get("heartbeatSeconds") else None),
            )
    except IntegrityError:
        # Two deliveries of one envelope handled at once (a redelivery after a visibility
        # timeout, or two pollers): both saw no task, the unique digest let one insert win.
        if Task.objects.filter(token_digest=digest).exists():
            return Outcome.DUPLICATE
        raise
    logger.info(
        "Intake: task %s queued for skill %s (%s v%s, stage %s)",
        task.pk, task.skill.slug, task.process_name, task.process_version, task.stage,
    )
    return Outcome.CREATED


# Refused messages ------------------------------------------------------------------------


def _invalid(*, message_id: str, receive_count: int, envelope: Any,
             problems: list[str]) -> str:
    token = _token_of(envelope)
    problems = _problems_cut([_problem_scrub(problem, token) for problem in problems])
    _intake_error_record(message_id=message_id, receive_count=receive_count,
                         envelope=envelope, token=token, problems=problems)
    logger.warning(
        "Intake: refused message %s (receive %d): %s",
        message_id, receive_count, "; ".join(problems),
    )
    return Outcome.INVALID


def _problems_cut(problems: list[str]) -> list[str]:
    """Return at most _PROBLEMS_MAX problems of at most _PROBLEM_MAX characters each.

    A problem may name fields of the message (unknown ones, input keys): a hostile
    envelope could make its row and its log line as large as itself.
    """
    cut = [problem if len(problem) <= _PROBLEM_MAX else f"{problem[:_PROBLEM_MAX]}… (cut)"
           for problem in problems[:_PROBLEMS_MAX]]
    if len(problems) > _PROBLEMS_MAX:
        cut.append(f"(more): {len(problems) - _PROBLEMS_MAX} more problem(s) not kept")
    return cut


def _intake_error_record(*, message_id: str, receive_count: int, envelope: Any,
                         token: str | None, problems: list[str]) -> None:
    """Record a refused message, one row per message id, kept current on each receive."""
    execution_arn, stage = _where(envelope, token)
    fields = {"receive_count": receive_count, "problems": problems,
              "execution_arn": execution_arn, "stage": stage}
    with transaction.atomic():
        updated = 0
        if message_id:
            updated = IntakeError.objects.filter(message_id=message_id).update(**fields)
        if not updated:
            IntakeError.objects.create(message_id=message_id, **fields)


def _token_of(envelope: Any) -> str | None:
    if isinstance(envelope, dict):
        token = envelope.get("taskToken")
        if isinstance(token, str) and token:
            return token
    return None


def _where(envelope: Any, token: str | None) -> tuple[str, str]:
    """Return the execution ARN and stage of an envelope where they are readable and safe."""
    if not isinstance(envelope, dict):
        return "", ""
    execution, stage = envelope.get("execution"), envelope.get("stage")
    if not (isinstance(execution, str) and len(execution) <= _EXECUTION_MAX
            and _EXECUTION_ARN.match(execution)):
        execution = ""
    if not (isinstance(stage, str) and len(stage) <= _STAGE_MAX):
        stage = ""
    # A malformed envelope may carry its token (or something like one) in the wrong field.
    if _scrub(execution, token) != execution:
        execution = ""
    if _scrub(stage, token) != stage:
        stage = ""
    return execution, stage


def _problem_scrub(problem: str, token: str | None) -> str:
    """Scrub a "field: rule" problem; its field and rule apart, so "taskToken: must be..."
    does not read as a token's value and lose its rule."""
    field, colon, rule = problem.partition(": ")
    return _scrub(field, token) + colon + _scrub(rule, token)


def _scrub(text: str, token: str | None) -> str:
    """Return text without the token and without anything token-shaped."""
    if token:
        # A placeholder redact() leaves alone, so "[redacted]" is not redacted once more.
        text = text.replace(token, "\x00")
    return redact(text).replace("\x00", REDACTED)


def _unexpected_record(*, message: dict, exc: Exception) -> None:
    """Record and log an unexpected error on one message, without the token or the body."""
    envelope, _ = envelope_read(message.get("Body") or "")
    token = _token_of(envelope)
    what = _scrub(f"{type(exc).__name__}: {exc}", token)[:_UNEXPECTED_MAX]
    message_id = str(message.get("MessageId") or "")
    # The frames only (file, line, source): the exception text is logged scrubbed above.
    frames = "".join(traceback.format_tb(exc.__traceback__))
    logger.error("Intake: unexpected error on message %s: %s\n%s", message_id, what, frames)
    try:
        _intake_error_record(
            message_id=message_id, receive_count=_receive_count(message), envelope=envelope,
            token=token, problems=[f"(unexpected): {what}"],
        )
    except Exception as record_exc:
        logger.error("Intake: could not record the error on message %s: %s", message_id,
                     type(record_exc).__name__)


# The queue ------------------------------------------------------------------------------


def intake_poll(
    *,
    max_messages: int = 10,
    wait_seconds: int = 20,
    budget_seconds: float = 25,
    visibility_timeout: int | None = None,
) -> dict[str, int]:
    """Long-poll the intake queue and handle each message; return counts per Outcome.

    Receive until a receive comes back empty or budget_seconds are used. Each message is
    handled on its own: an unexpected error on one is recorded and the rest go on. A
    message is deleted after its transaction committed, and only when it is done with
    (created, duplicate, recorded); the others stay, and the queue's redrive policy moves
    them to the dead-letter queue. visibility_timeout overrides the queue's own for the
    received messages (None keeps it). Raise ExternalServiceError if SQS cannot be read.
    """
    url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    counts = dict.fromkeys(Outcome, 0)
    for messages in aws.messages_receive_batches(
            url=url, wait_seconds=wait_seconds, budget_seconds=budget_seconds,
            max_messages=max_messages, visibility_timeout=visibility_timeout):
        done = []
        for message in messages:
            try:
                outcome = Outcome(intake_message(message=message))
            except Exception as exc:
                _unexpected_record(message=message, exc=exc)
                outcome = Outcome.ERROR
            counts[outcome] += 1
            if outcome in _DONE:
                done.append(message)
        if done:
            # One DeleteMessageBatch per receive. Outside a transaction (how the poller
            # runs) it deletes at once, after each intake_message committed; inside one it
            # waits for the commit, so a rollback leaves the messages to be delivered again.
            transaction.on_commit(functools.partial(messages_done_delete, url=url,
                                                    messages=done, queue="Intake"))
    return {str(outcome): count for outcome, count in counts.items()}


def intake_poll_once() -> dict[str, int] | None:
    """Poll the intake queue once, unless another poller holds the lock; return the counts.

    The lock only saves work: two pollers at once are harmless (SQS hides a received
    message from the other, and a redelivered envelope is a duplicate).
    """
    owner = uuid.uuid4().hex
    if not cache.add(POLL_LOCK_KEY, owner, timeout=POLL_LOCK_SECONDS):
        return None
    try:
        counts = intake_poll()
    finally:
        # Only our own lock: after a stall past POLL_LOCK_SECONDS another poller holds it.
        # The get-then-delete is not atomic; losing that race costs one extra poller, not
        # data.
        if cache.get(POLL_LOCK_KEY) == owner:
            cache.delete(POLL_LOCK_KEY)
    if any(counts.values()):
        logger.info("Intake: %s", ", ".join(f"{n} {o}" for o, n in counts.items() if n))
    return counts


def messages_done_delete(*, url: str, messages: list[dict], queue: str) -> None:
    """Delete the handled messages of a queue; one that stays is harmless, so log it.

    A message not deleted comes back after its visibility timeout and is then a duplicate
    (an envelope, a recorded notice, an execution already handled), deleted on that
    receive. queue names the consumer in the log lines ("Intake", "Upstream").
    """
    try:
        failed = set(aws.messages_delete(
            url=url, receipt_handles=[message["ReceiptHandle"] for message in messages]))
    except ExternalServiceError as exc:
        logger.warning("%s: could not delete %d handled message(s): %s", queue,
                       len(messages), exc.message)
        return
    for message in messages:
        if message["ReceiptHandle"] in failed:
            logger.warning("%s: could not delete message %s; it comes back as a "
                           "duplicate", queue, message.get("MessageId", ""))
