"""Tasks, their append-only history, the callback outbox and intake errors."""

import uuid

from django.conf import settings
from django.db import models


class TaskState(models.TextChoices):
    QUEUED = "queued", "Queued"
    OFFERED = "offered", "Offered"
    IN_PROGRESS = "in_progress", "In progress"
    ESCALATED = "escalated", "Escalated"
    COMPLETING = "completing", "Completing"
    COMPLETED = "completed", "Completed"
    REJECTING = "rejecting", "Rejecting"
    REJECTED = "rejected", "Rejected"
    ABORTING = "aborting", "Aborting"
    TIMED_OUT = "timed_out", "Timed out"
    EXPIRED = "expired", "Expired"
    CANCELLED = "cancelled", "Cancelled"


# The hash before a task's first event (inbox.history chains each event to the one before).
GENESIS_HASH = "0" * 64

# The state groups, defined here once (lists, as the index conditions below need them).
# Open: a worker or supervisor can act on it; its clocks run.
OPEN_STATES = [TaskState.QUEUED, TaskState.OFFERED, TaskState.IN_PROGRESS, TaskState.ESCALATED]
# Held: reserved for one worker (its assignee), who counts it against their capacity.
HELD_STATES = [TaskState.OFFERED, TaskState.IN_PROGRESS]
# Sending: decided; the outbox is telling Step Functions.
SENDING_STATES = [TaskState.COMPLETING, TaskState.REJECTING, TaskState.ABORTING]
# Closed: over; nothing changes it any more.
CLOSED_STATES = [
    TaskState.COMPLETED, TaskState.REJECTED, TaskState.TIMED_OUT, TaskState.EXPIRED,
    TaskState.CANCELLED,
]


class Task(models.Model):
    """One human stage of one execution, waiting for a worker's answer."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    state = models.CharField(max_length=16, choices=TaskState.choices, default=TaskState.QUEUED)
    version = models.PositiveIntegerField(default=1)

    # The token: encrypted, and a keyed digest that makes a duplicate delivery a no-op.
    token_ciphertext = models.BinaryField(editable=False)
    token_digest = models.CharField(max_length=64, unique=True, editable=False)

    execution_arn = models.CharField(max_length=2048)
    stage = models.CharField(max_length=80)
    process_name = models.CharField(max_length=48)
    process_version = models.PositiveIntegerField()
    skill = models.ForeignKey("accounts.Skill", on_delete=models.PROTECT, related_name="tasks")
    min_proficiency = models.PositiveSmallIntegerField(default=1)
    title = models.CharField(max_length=300)
    form = models.CharField(max_length=64)
    input = models.JSONField(default=dict)
    # The input's key order (inbox.display.key_order): jsonb keeps none. None: not recorded.
    input_order = models.JSONField(null=True, blank=True, editable=False)
    priority = models.PositiveSmallIntegerField(default=50)
    exclude_workers_of = models.JSONField(default=list)

    offer_seconds = models.PositiveIntegerField()
    work_seconds = models.PositiveIntegerField()
    overall_seconds = models.PositiveIntegerField()
    escalation_seconds = models.PositiveIntegerField(null=True, blank=True)
    on_timeout = models.CharField(max_length=16, default="abort")
    heartbeat_seconds = models.PositiveIntegerField(null=True, blank=True)

    entered_at = models.DateTimeField(help_text="When the execution entered the stage.")
    created_at = models.DateTimeField(auto_now_add=True)
    # No index of its own: task_by_assignee (assignee, state) serves every lookup by
    # assignee, and one index fewer is one fewer to write on each change of hands.
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
        related_name="held_tasks", db_index=False,
    )
    offer_deadline = models.DateTimeField(null=True, blank=True)
    work_deadline = models.DateTimeField(null=True, blank=True)
    overall_deadline = models.DateTimeField()
    next_heartbeat_at = models.DateTimeField(null=True, blank=True)
    execution_checked_at = models.DateTimeField(
        null=True, blank=True, help_text="When the execution was last seen running."
    )
    answer = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # The hash of the task's latest event (the head of its chain, inbox.history): the next
    # event links to it without reading the history. Written with every event.
    chain_head = models.CharField(max_length=64, default=GENESIS_HASH,
                                  db_default=GENESIS_HASH, editable=False)

    class Meta:
        indexes = [
            # Take next: a skill's queued tasks, highest priority first, then oldest.
            models.Index(
                fields=["skill", "-priority", "created_at"],
                name="task_queue_order",
                condition=models.Q(state=TaskState.QUEUED),
            ),
            models.Index(fields=["assignee", "state"], name="task_by_assignee"),
            models.Index(fields=["execution_arn", "stage"], name="task_by_execution"),
            # The sweeper's indexes: each holds only the rows whose clock is running, so
            # finding what is due costs what is due, not what is stored.
            # Escalated tasks run on the same column: escalating moves it to the end of
            # the escalation clock.
            models.Index(
                fields=["overall_deadline"], name="task_overall_running",
                condition=models.Q(state__in=OPEN_STATES),
            ),
            models.Index(
                fields=["offer_deadline"], name="task_offer_due",
                condition=models.Q(state=TaskState.OFFERED),
            ),
            models.Index(
                fields=["work_deadline"], name="task_work_due",
                condition=models.Q(state=TaskState.IN_PROGRESS),
            ),
            models.Index(
                fields=["execution_checked_at"], name="task_execution_check",
                condition=models.Q(state__in=OPEN_STATES),
            ),
            models.Index(
                fields=["next_heartbeat_at"], name="task_heartbeat_due",
                condition=models.Q(next_heartbeat_at__isnull=False),
            ),
            # The supervisor board's orders of the open tasks, by creation and by priority
            # (ties by id), read from the page's cursor on (by deadline: task_overall_running).
            models.Index(
                fields=["created_at", "id"], name="task_open_by_created",
                condition=models.Q(state__in=OPEN_STATES),
            ),
            models.Index(
                fields=["priority", "id"], name="task_open_by_priority",
                condition=models.Q(state__in=OPEN_STATES),
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(priority__lte=100), name="task_priority_0_to_100"
            ),
            models.CheckConstraint(
                condition=~models.Q(state__in=HELD_STATES)
                | models.Q(assignee__isnull=False),
                name="task_offered_or_in_progress_has_assignee",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.title} ({self.state})"

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_STATES


class TaskEvent(models.Model):
    """One state change of a task; append-only, each hash chained to the one before."""

    # No index of its own: task_event_version_unique (task, version) serves every lookup
    # by task, and each event appended writes one index fewer.
    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="events",
                             db_index=False)
    version = models.PositiveIntegerField(help_text="The task's version after this change.")
    action = models.CharField(max_length=32)
    from_state = models.CharField(max_length=16, blank=True)
    to_state = models.CharField(max_length=16)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
        related_name="task_events",
    )
    actor_label = models.CharField(max_length=254, help_text="Who, as a string kept forever.")
    reason = models.TextField(blank=True)
    data = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)

    class Meta:
        ordering = ["task", "version"]
        constraints = [
            models.UniqueConstraint(fields=["task", "version"], name="task_event_version_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} v{self.version} {self.action}"


class OutboxKind(models.TextChoices):
    SUCCESS = "success", "SendTaskSuccess"
    FAILURE = "failure", "SendTaskFailure"


class OutboxStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    SENT = "sent", "Sent"
    RECONCILED = "reconciled", "Reconciled"
    DEAD = "dead", "Dead"
    # Taken back by its worker within the undo window: never sent, kept for the record.
    WITHDRAWN = "withdrawn", "Withdrawn"


class Outbox(models.Model):
    """A callback to Step Functions, written in the transaction that decided it."""

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="callbacks")
    decision_version = models.PositiveIntegerField(
        help_text="The task version that made the decision; one callback per decision."
    )
    kind = models.CharField(max_length=16, choices=OutboxKind.choices)
    output = models.JSONField(null=True, blank=True)
    error = models.CharField(max_length=256, blank=True)
    cause = models.TextField(blank=True)
    status = models.CharField(
        max_length=16, choices=OutboxStatus.choices, default=OutboxStatus.PENDING
    )
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["next_attempt_at"], name="outbox_due",
                condition=models.Q(status="pending"),
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["task", "decision_version"], name="outbox_one_callback_per_decision"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} for {self.task_id} ({self.status})"


class Received(models.Model):
    """A message of the intake queue kept for the admins, newest first."""

    received_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        abstract = True
        ordering = ["-received_at"]


class IntakeError(Received):
    """A message the intake refused: what was wrong (never the token), left to redrive."""

    message_id = models.CharField(max_length=128, db_index=True)
    receive_count = models.PositiveIntegerField(default=1)
    problems = models.JSONField(default=list)
    execution_arn = models.CharField(max_length=2048, blank=True)
    stage = models.CharField(max_length=80, blank=True)

    def __str__(self) -> str:
        return f"{self.message_id}: {'; '.join(self.problems)[:80]}"


class ProcessFailure(Received):
    """An execution that took its failure branch, as the state machine reported it."""

    execution_arn = models.CharField(max_length=2048)
    process_name = models.CharField(max_length=48)
    process_version = models.PositiveIntegerField()
    error = models.CharField(max_length=256)
    cause = models.TextField(blank=True)
    message_id = models.CharField(max_length=128, unique=True)

    def __str__(self) -> str:
        return f"{self.process_name} v{self.process_version}: {self.error}"


class TaskPass(models.Model):
    """A worker let an offer go (declined it, or let its clock run out): no re-offer."""

    class Why(models.TextChoices):
        DECLINED = "declined", "Declined"
        LAPSED = "lapsed", "Offer lapsed"

    task = models.ForeignKey(Task, on_delete=models.CASCADE, related_name="passes")
    worker = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="task_passes"
    )
    why = models.CharField(max_length=16, choices=Why.choices)
    reason = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["task", "worker"], name="task_pass_once_per_worker"),
        ]

    def __str__(self) -> str:
        return f"{self.worker} {self.why} {self.task_id}"


class ExecutionTimeline(models.Model):
    """The stages an execution passed, reduced from its Step Functions history for supervisors.

    Written only by the Celery worker (inbox.timeline.timeline_refresh). Holds state names,
    types, times and outcomes: nothing else of the history, which carries task tokens.
    """

    execution_arn = models.CharField(max_length=2048, unique=True)
    checked_at = models.DateTimeField(
        help_text="When the history was last asked for, whatever came back."
    )
    fetched_at = models.DateTimeField(
        null=True, blank=True, help_text="When the stages below were read."
    )
    status = models.CharField(max_length=16, blank=True, help_text="The execution's status.")
    stages = models.JSONField(default=list, blank=True)
    truncated = models.BooleanField(
        default=False, help_text="Only the latest events were read; earlier stages are missing."
    )
    error_code = models.CharField(max_length=128, blank=True)
    error = models.TextField(blank=True, help_text="Why the last read failed.")

    def __str__(self) -> str:
        return f"{self.execution_arn.rsplit(':', 1)[-1]} ({self.status or self.error_code})"


class SignalOutbox(models.Model):
    """A task event to relay to the EventBridge bus as a change signal (at least once).

    Written in the transaction of the event itself when settings.INBOX_SIGNALS_BUS is set;
    the relay (inbox.services.signals) sends it after commit and keeps the row, with when.
    """

    event = models.OneToOneField(TaskEvent, on_delete=models.PROTECT, related_name="signal")
    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="signals")
    version = models.PositiveIntegerField()
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["next_attempt_at"], name="signal_due",
                         condition=models.Q(sent_at__isnull=True)),
            models.Index(fields=["task", "version"], name="signal_pending_by_task",
                         condition=models.Q(sent_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"signal {self.task_id} v{self.version} ({'sent' if self.sent_at else 'pending'})"


class MigrationStatus(models.TextChoices):
    # Asked for; the new execution's ARN is known (its name is the old one's) and is being
    # started, or starting failed (last_error) and the next run of the command retries.
    STARTING = "starting", "Starting"
    # The new execution runs; the intake moves the task when its envelope arrives.
    STARTED = "started", "Started"
    # The task holds the new token; the old execution is being stopped.
    MOVED = "moved", "Moved"
    # The old execution is stopped: done.
    DONE = "done", "Done"
    # The task was answered (or closed) on the old execution first; the new one is stopped.
    SUPERSEDED = "superseded", "Superseded"
    # Could not begin: the old execution no longer waited for the task's token, or its
    # state could not be carried (last_error says which). Nothing was started.
    REFUSED = "refused", "Refused"


class TaskMigration(models.Model):
    """One task's execution moved to a newer process version at the same human stage.

    inbox.services.migration writes it; the intake matches a new execution's envelope to
    it (by to_execution_arn), and a redelivered envelope of the old wait (by
    from_token_digest, the old token's keyed digest) is known for a duplicate by it.
    """

    task = models.ForeignKey(Task, on_delete=models.PROTECT, related_name="migrations")
    stage = models.CharField(max_length=80)
    from_version = models.PositiveIntegerField()
    to_version = models.PositiveIntegerField()
    from_execution_arn = models.CharField(max_length=2048)
    to_execution_arn = models.CharField(max_length=2048, db_index=True)
    from_token_digest = models.CharField(max_length=64, db_index=True, editable=False)
    status = models.CharField(max_length=16, choices=MigrationStatus.choices,
                              default=MigrationStatus.STARTING)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True,
                                     on_delete=models.PROTECT, related_name="+")
    requested_at = models.DateTimeField(auto_now_add=True)
    reason = models.TextField(help_text="Why, as the admin said it; the task's event keeps it.")
    moved_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            # One migration of one wait to one version: asking again finds it.
            models.UniqueConstraint(fields=["from_token_digest", "to_version"],
                                    name="migration_once_per_wait_and_version"),
        ]

    def __str__(self) -> str:
        return f"{self.task_id} v{self.from_version}→v{self.to_version} ({self.status})"
