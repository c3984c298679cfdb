"""Intake: turn the messages on the SQS intake queue into tasks.

A human stage puts a ``human-task/v1`` envelope on the intake queue and waits for its
token to come back. ``intake_poll`` long-polls the queue; ``intake_messages`` handles one
receive (up to ten messages), the tasks of its valid envelopes in one transaction, and
``intake_message`` one message in one transaction: a valid envelope becomes a queued task
(its token encrypted, with a keyed digest that makes redeliveries harmless), a
``process-failure/v1`` notice is recorded and mailed to the admins
(``inbox.process_failures``), and anything else is recorded as an IntakeError and left on
the queue, whose redrive policy moves it to the dead-letter queue after a few receives
(an admin moves them back once the cause is fixed: inbox.services.admin.intake_redrive).

Message bodies hold task tokens: no body, token or envelope value reaches a log line, an
exception message or an IntakeError; problems name the field and the rule only.
"""

import datetime
import functools
import logging
import re
import threading
import time
import traceback
import uuid
from enum import StrEnum
from queue import Empty, Queue
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Skill
from config.compiled import CompiledRead, Many
from config.errors import ExternalServiceError
from inbox.display import key_order
from inbox.lifecycle import task_receive, tasks_receive
from inbox.models import IntakeError, Task
from inbox.process_failures import process_failure_record
from inbox.redaction import REDACTED, redact
from inbox.services.clock import heartbeat_interval
from inbox.services.migration import envelopes_migrated
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
    # A migrated execution's envelope: its task moved to it (inbox.services.migration).
    MIGRATED = "migrated"
    # A migrated execution's envelope whose task was closed first: that execution stops.
    SUPERSEDED = "superseded"


# Outcomes whose message is done with: it is deleted from the queue after commit.
_DONE = frozenset({Outcome.CREATED, Outcome.DUPLICATE, Outcome.RECORDED, Outcome.MIGRATED,
                   Outcome.SUPERSEDED})


# One message ----------------------------------------------------------------------------


def intake_message(*, message: dict) -> str:
    """Handle one SQS message (Body, MessageId, Attributes); return its Outcome.

    Return "created" for a new task, "duplicate" when a task with the same token exists,
    "recorded" for a process-failure notice, "invalid" when the message was refused and
    recorded as an IntakeError. Unexpected errors propagate; see ``intake_messages``.
    """
    envelope, problems = _read(message)
    lookups = _Lookups([] if problems else [envelope])
    outcome = _checked(message=message, envelope=envelope, problems=problems, lookups=lookups)
    if outcome is None:
        moved = envelopes_migrated([(0, envelope)])
        outcome = Outcome(moved[0]) if moved else _task_create(
            envelope=envelope, skill=lookups.skills[envelope["skill"]])
    if outcome != Outcome.INVALID:
        _refusals_clear([message])
    return outcome


def _read(message: dict) -> tuple[Any, list[str]]:
    """Return a message's envelope and what its schema finds wrong with it."""
    envelope, unreadable = envelope_read(message.get("Body") or "")
    if unreadable:
        return None, unreadable
    return envelope, envelope_problems(envelope)


def _checked(*, message: dict, envelope: Any, problems: list[str],
             lookups: "_Lookups") -> Outcome | None:
    """Refuse or record a read message; return its Outcome, or None for a task to create."""
    if not problems and envelope["kind"] == HUMAN_TASK:
        problems = _task_problems(envelope, lookups)
    if problems:
        return _invalid(
            message_id=_message_id(message), receive_count=_receive_count(message),
            envelope=envelope, problems=problems,
        )
    if envelope["kind"] == HUMAN_TASK:
        return None
    if envelope["kind"] == PROCESS_FAILURE:
        process_failure_record(envelope=envelope, message_id=_message_id(message))
        return Outcome.RECORDED
    # A kind the schemas know and this intake does not handle yet.
    return _invalid(
        message_id=_message_id(message), receive_count=_receive_count(message),
        envelope=envelope, problems=["kind: not handled by this version of the inbox"],
    )


def _refusals_clear(messages: list[dict]) -> None:
    """Delete the IntakeErrors of messages refused before (e.g. an unexpected error) and
    taken now: they are not intake errors any more."""
    ids = [_message_id(message) for message in messages
           if _receive_count(message) > 1 and _message_id(message)]
    if ids:
        IntakeError.objects.filter(message_id__in=ids).delete()


def _message_id(message: dict) -> str:
    return str(message.get("MessageId") or "")


def _receive_count(message: dict) -> int:
    try:
        return max(1, int(message.get("Attributes", {}).get("ApproximateReceiveCount", 1)))
    except (TypeError, ValueError):
        return 1


# The skills one receive's envelopes name: every receive reads them, so the statement is
# compiled once per count of skills (config.compiled), not by the ORM per receive.
_SKILLS_READ = CompiledRead(lambda shape, *, slugs: Skill.objects.filter(slug__in=slugs),
                            slugs=Many(Skill._meta.get_field("slug")))


class _Lookups:
    """The skills and forms that the envelopes of one receive name, each read once."""

    def __init__(self, envelopes: list[Any]) -> None:
        slugs = {envelope["skill"] for envelope in envelopes if envelope["kind"] == HUMAN_TASK}
        self.skills: dict[str, Skill] = {
            skill.slug: skill for skill in _SKILLS_READ.run("all", slugs=sorted(slugs))
        } if slugs else {}
        self._forms: dict[tuple[str, int, str], bool] = {}

    def form_known(self, *, process: dict[str, Any], form: str) -> bool:
        """Return whether the process version's spec or the built-in forms define form.

        Asked once per receive for each process version and form (a receive's envelopes
        mostly share both); a version not deployed here costs its query each time.
        """
        key = (process["name"], process["version"], form)
        if key not in self._forms:
            self._forms[key] = form_for(process_name=key[0], process_version=key[1],
                                        form_name=form) is not None
        return self._forms[key]


def _task_problems(envelope: dict[str, Any], lookups: _Lookups) -> list[str]:
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
    if envelope["skill"] not in lookups.skills:
        problems.append(
            "skill: no skill with this slug exists (an admin creates it, then redrives "
            "the dead letters)"
        )
    if not lookups.form_known(process=envelope["process"], form=envelope["form"]):
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


def _task_fields(*, envelope: dict[str, Any], skill: Skill, digest: str,
                 now: datetime.datetime) -> dict[str, Any]:
    """Return the fields of the task a valid envelope becomes (the receive row's input)."""
    timeouts = envelope["timeouts"]
    return {
        "token_ciphertext": token_encrypt(envelope["taskToken"]),
        "token_digest": digest,
        "execution_arn": envelope["execution"],
        "stage": envelope["stage"],
        "process_name": envelope["process"]["name"],
        "process_version": envelope["process"]["version"],
        "skill": skill,
        "min_proficiency": envelope.get("minProficiency", 1),
        "title": envelope["title"],
        "form": envelope["form"],
        "input": envelope["input"],
        "input_order": key_order(envelope["input"]),
        "priority": envelope["priority"],
        "exclude_workers_of": envelope.get("excludeWorkersOf", []),
        "offer_seconds": timeouts["offer"],
        "work_seconds": timeouts["work"],
        "overall_seconds": timeouts["overall"],
        "escalation_seconds": timeouts.get("escalation"),
        "on_timeout": envelope["onTimeout"],
        "heartbeat_seconds": envelope.get("heartbeatSeconds"),
        "entered_at": _entered_at(envelope["enteredAt"]),
        # The overall clock runs from when the task entered the inbox.
        "overall_deadline": now + datetime.timedelta(seconds=timeouts["overall"]),
        # Step Functions' heartbeat clock runs from when the stage started.
        "next_heartbeat_at": (now + heartbeat_interval(envelope["heartbeatSeconds"])
                              if envelope.get("heartbeatSeconds") else None),
    }


def _task_create(*, envelope: dict[str, Any], skill: Skill) -> str:
    digest = token_digest(envelope["taskToken"])
    try:
        with transaction.atomic():
            if Task.objects.filter(token_digest=digest).exists():
                return Outcome.DUPLICATE
            # The receive row of the transition table: queued, its first event, and an
            # offer after commit for a push queue (robust: dispatch_pending heals a lost
            # enqueue; the task stands).
            task = task_receive(**_task_fields(envelope=envelope, skill=skill, digest=digest,
                                               now=timezone.now()))
    except IntegrityError:
        # Two deliveries of one envelope handled at once (a redelivery after a visibility
        # timeout, or two pollers): both saw no task, the unique digest let one insert win.
        if Task.objects.filter(token_digest=digest).exists():
            return Outcome.DUPLICATE
        raise
    _created_log(task)
    return Outcome.CREATED


def _created_log(task: Task) -> None:
    logger.info(
        "Intake: task %s queued for skill %s (%s v%s, stage %s)",
        task.pk, task.skill.slug, task.process_name, task.process_version, task.stage,
    )


# One receive ----------------------------------------------------------------------------


def intake_messages(*, messages: list[dict]) -> list[Outcome]:
    """Handle the messages of one receive (up to ten); return each one's Outcome, in order.

    The valid envelopes become tasks in one transaction (one INSERT of the tasks and one
    of their events, lifecycle.tasks_receive); a refused message is recorded on its own as
    intake_message records it, and a process-failure notice too. An unexpected error on
    one message is recorded as an IntakeError ("error") and the others go on: when the
    batch's transaction fails, each of its envelopes is created on its own instead.
    """
    outcomes: dict[int, Outcome] = {}
    read: dict[int, tuple[Any, list[str]]] = {}
    for index, message in enumerate(messages):
        try:
            read[index] = _read(message)
        except Exception as exc:
            _unexpected_record(message=message, exc=exc)
            outcomes[index] = Outcome.ERROR
    try:
        lookups = _Lookups([envelope for envelope, problems in read.values() if not problems])
    except Exception as exc:
        for index in read:
            _unexpected_record(message=messages[index], exc=exc)
            outcomes[index] = Outcome.ERROR
        read = {}
    pending: list[tuple[int, dict[str, Any]]] = []
    for index, (envelope, problems) in read.items():
        try:
            outcome = _checked(message=messages[index], envelope=envelope, problems=problems,
                               lookups=lookups)
            if outcome == Outcome.RECORDED:
                _refusals_clear([messages[index]])
        except Exception as exc:
            _unexpected_record(message=messages[index], exc=exc)
            outcome = Outcome.ERROR
        if outcome is None:
            pending.append((index, envelope))
        else:
            outcomes[index] = outcome
    if pending:
        pending = _migrations_take(messages=messages, pending=pending, outcomes=outcomes)
    if pending:
        outcomes.update(_tasks_create(messages=messages, pending=pending, lookups=lookups))
    return [outcomes[index] for index in range(len(messages))]


def _migrations_take(*, messages: list[dict], pending: list[tuple[int, dict[str, Any]]],
                     outcomes: dict[int, Outcome]) -> list[tuple[int, dict[str, Any]]]:
    """Hand the envelopes migrations wait for (or made stale) to inbox.services.migration;
    return the others. One query for the receive; a failure fails those messages only."""
    try:
        moved = envelopes_migrated(pending)
    except Exception as exc:
        for index, _ in pending:
            _unexpected_record(message=messages[index], exc=exc)
            outcomes[index] = Outcome.ERROR
        return []
    for index, outcome in moved.items():
        outcomes[index] = Outcome(outcome)
    _refusals_clear([messages[index] for index in moved])
    return [(index, envelope) for index, envelope in pending if index not in moved]


def _tasks_create(*, messages: list[dict], pending: list[tuple[int, dict[str, Any]]],
                  lookups: _Lookups) -> dict[int, Outcome]:
    """Create the tasks of a receive's valid envelopes in one transaction; return the
    Outcome of each (by its index in messages): "created", or "duplicate" for a token
    that has a task already, or comes earlier in the same receive."""
    digests = [token_digest(envelope["taskToken"]) for _, envelope in pending]
    outcomes: dict[int, Outcome] = {}
    try:
        with transaction.atomic():
            # Read in the transaction, but it locks nothing: a concurrent poller may insert
            # one of these digests, not yet committed, after this read. The INSERT below
            # then waits for that transaction, and fails on the unique digest once it
            # commits (IntegrityError): the whole batch rolls back and each envelope is
            # created on its own, where the digest it lost to is a duplicate.
            taken = set(Task.objects.filter(token_digest__in=digests)
                        .values_list("token_digest", flat=True))
            now = timezone.now()
            rows = []
            for (index, envelope), digest in zip(pending, digests, strict=True):
                if digest in taken:
                    outcomes[index] = Outcome.DUPLICATE
                    continue
                taken.add(digest)
                rows.append(_task_fields(envelope=envelope, skill=lookups.skills[
                    envelope["skill"]], digest=digest, now=now))
                outcomes[index] = Outcome.CREATED
            tasks = tasks_receive(rows)
            _refusals_clear([messages[index] for index, _ in pending])
    except Exception as exc:
        # Loud: the batch's failure is logged here (its type only: a database's message may
        # quote a value), and each envelope's own failure, if any, is recorded below.
        logger.warning("Intake: the batch of %d task(s) failed (%s); creating each on its own",
                       len(pending), type(exc).__name__)
        return _tasks_create_each(messages=messages, pending=pending, lookups=lookups)
    for task in tasks:
        _created_log(task)
    return outcomes


def _tasks_create_each(*, messages: list[dict], pending: list[tuple[int, dict[str, Any]]],
                       lookups: _Lookups) -> dict[int, Outcome]:
    """Create each envelope's task in a transaction of its own, as intake_message does."""
    outcomes: dict[int, Outcome] = {}
    for index, envelope in pending:
        try:
            outcomes[index] = Outcome(_task_create(
                envelope=envelope, skill=lookups.skills[envelope["skill"]]))
            _refusals_clear([messages[index]])
        except Exception as exc:
            _unexpected_record(message=messages[index], exc=exc)
            outcomes[index] = Outcome.ERROR
    return outcomes


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

    Receive until a receive comes back empty or budget_seconds are used. Each receive is
    handled by intake_messages: its valid envelopes become tasks in one transaction, and
    an unexpected error on one message is recorded and the rest go on. A message is
    deleted after its transaction committed, and only when it is done with (created,
    duplicate, recorded); the others stay, and the queue's redrive policy moves them to
    the dead-letter queue. visibility_timeout overrides the queue's own for the
    received messages (None keeps it). Raise ExternalServiceError if SQS cannot be read.
    """
    url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    counts = dict.fromkeys(Outcome, 0)
    # Outside a transaction (how the poller runs) SQS's round trips overlap the work: the
    # next receive is in flight while a receive is handled, and its delete runs behind.
    outside = not transaction.get_connection().in_atomic_block
    deleter = None
    if outside:
        # The wait stays a tenth of the visibility timeout in effect: a visibility
        # timeout of 0 (a redrive test, a drill) deletes each receive's messages at once.
        wait = DELETE_WAIT_SECONDS
        if visibility_timeout is not None:
            wait = min(wait, visibility_timeout / 10)
        deleter = MessageDeleter(url=url, queue="Intake", wait=wait)
    try:
        for messages in aws.messages_receive_batches(
                url=url, wait_seconds=wait_seconds, budget_seconds=budget_seconds,
                max_messages=max_messages, visibility_timeout=visibility_timeout,
                ahead=outside, window_seconds=settings.INBOX_RECEIVE_WINDOW_MS / 1000):
            done = []
            for message, outcome in zip(messages, intake_messages(messages=messages),
                                        strict=True):
                counts[outcome] += 1
                if outcome in _DONE:
                    done.append(message)
            if not done:
                continue
            if deleter is not None:
                # The receive's transactions committed: its messages join the deletes
                # gathered from the receives before it (MessageDeleter).
                deleter.add(done)
            else:
                # One DeleteMessageBatch per receive, once the caller's transaction
                # commits, so a rollback leaves the messages to be delivered again.
                transaction.on_commit(functools.partial(
                    messages_done_delete, url=url, messages=done, queue="Intake"))
    finally:
        if deleter is not None:
            # Every handled message deleted before the poll returns; a delete that
            # crashed (not one SQS refused: that is logged) fails the poll.
            deleter.close()
    return {str(outcome): count for outcome, count in counts.items()}


# How long a handled message may wait for others to share its DeleteMessageBatch: far
# below the intake queue's visibility timeout (processes.aws, 60 s), so a message is never
# handed out again only because its delete waited.
DELETE_WAIT_SECONDS = 1.0
_DELETE_BATCH = 10  # SQS's most per DeleteMessageBatch
_CLOSE = object()


class MessageDeleter:
    """Deletes a queue's handled messages behind its consumer, in batches of up to ten.

    At a trickle each receive holds one or two messages; a DeleteMessageBatch per receive
    then cost the intake about as much CPU as the receive itself (a py-spy of the worker
    in bench/cost_per_task.py; docs/DECISIONS.md). Here the
    messages of several receives share one: a batch goes when it holds ten, or when its
    first message has waited wait seconds (0: at once), whichever comes first; close()
    sends what is left and waits for it. The deletes run in a thread of their own, so the
    consumer's next receive never waits for one. A message whose delete was lost (the
    process killed meanwhile) comes back after its visibility timeout as a duplicate.
    """

    def __init__(self, *, url: str, queue: str, wait: float) -> None:
        self.url, self.queue, self.wait = url, queue, wait
        self._inbox: Queue[Any] = Queue()
        self._crash: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="intake-delete", daemon=True)
        self._thread.start()

    def add(self, messages: list[dict]) -> None:
        self._inbox.put(messages)

    def close(self) -> None:
        """Send what is waiting, wait for every delete; raise what crashed one."""
        self._inbox.put(_CLOSE)
        self._thread.join()
        if self._crash is not None:
            raise self._crash

    def _run(self) -> None:
        waiting: list[dict] = []
        due = 0.0
        while True:
            try:
                item = self._inbox.get(
                    timeout=max(0.0, due - time.monotonic()) if waiting else None)
            except Empty:  # the first waiting message's time is up
                item = None
            if item is _CLOSE or item is None:
                self._send(waiting)
                waiting = []
                if item is _CLOSE:
                    return
                continue
            if not waiting:
                due = time.monotonic() + self.wait
            waiting.extend(item)
            while len(waiting) >= _DELETE_BATCH or (waiting and self.wait <= 0):
                self._send(waiting[:_DELETE_BATCH])
                waiting = waiting[_DELETE_BATCH:]
                due = time.monotonic() + self.wait

    def _send(self, messages: list[dict]) -> None:
        if not messages or self._crash is not None:
            return
        try:
            messages_done_delete(url=self.url, messages=messages, queue=self.queue)
        except BaseException as exc:  # kept for close(), which raises it in the consumer
            self._crash = exc


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
