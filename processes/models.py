"""Processes, their immutable deployed versions, and the executions started from them."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class Process(models.Model):
    """A business process, known by its name; its behaviour lives in its versions."""

    name = models.SlugField(max_length=64, unique=True, help_text="e.g. invoice-approval")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "processes"

    def __str__(self) -> str:
        return self.name


class ProcessVersion(models.Model):
    """One deployed version of a process: spec, compiled ASL and state machine, never edited.

    Each version has its own state machine, so executions started on it keep running
    on it after a newer version is deployed.
    """

    process = models.ForeignKey(Process, on_delete=models.PROTECT, related_name="versions")
    version = models.PositiveIntegerField()
    description = models.TextField(blank=True)
    spec_text = models.TextField(help_text="The YAML spec exactly as deployed.")
    spec_sha256 = models.CharField(max_length=64)
    asl = models.JSONField(help_text="The compiled Amazon States Language definition.")
    state_machine_name = models.CharField(max_length=80)
    state_machine_arn = models.CharField(max_length=512)
    deployed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )
    deployed_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["process_id", "-version"]
        constraints = [
            models.UniqueConstraint(
                fields=["process", "version"], name="process_version_unique"
            ),
            models.CheckConstraint(
                condition=models.Q(version__gte=1), name="process_version_at_least_1"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.process.name} v{self.version}"


class ExecutionStatus(models.TextChoices):
    RUNNING = "RUNNING", "Running"
    SUCCEEDED = "SUCCEEDED", "Succeeded"
    FAILED = "FAILED", "Failed"
    TIMED_OUT = "TIMED_OUT", "Timed out"
    ABORTED = "ABORTED", "Aborted"
    # Step Functions no longer knows the execution (e.g. the emulator restarted).
    MISSING = "MISSING", "Missing"


class Execution(models.Model):
    """One started execution of a process version, kept current by the reconciler."""

    # Denormalised from version.process so a business key is unique per process.
    process = models.ForeignKey(Process, on_delete=models.PROTECT, related_name="executions")
    version = models.ForeignKey(
        ProcessVersion, on_delete=models.PROTECT, related_name="executions"
    )
    business_key = models.CharField(max_length=200)
    name = models.CharField(max_length=80, help_text="The Step Functions execution name.")
    execution_arn = models.CharField(max_length=512, unique=True)
    status = models.CharField(
        max_length=16, choices=ExecutionStatus.choices, default=ExecutionStatus.RUNNING
    )
    input = models.JSONField(default=dict)
    output = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    cause = models.TextField(blank=True)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(
        null=True, blank=True, help_text="When the reconciler last asked Step Functions."
    )
    started_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["process", "business_key"], name="execution_business_key_unique"
            ),
        ]
        indexes = [
            models.Index(fields=["status", "checked_at"], name="execution_reconcile"),
            models.Index(fields=["process", "-started_at"], name="execution_by_process"),
        ]

    def __str__(self) -> str:
        return f"{self.process.name} {self.business_key}"

    @property
    def is_finished(self) -> bool:
        return self.status != ExecutionStatus.RUNNING
