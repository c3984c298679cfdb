"""Users, skills and what each worker holds of them."""

from django.contrib.auth.models import AbstractUser, BaseUserManager
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from knox.models import AbstractAuthToken
from knox.settings import CONSTANTS

PROFICIENCY_MIN = 1
PROFICIENCY_MAX = 5
# A worker seen (accounts.sessions) this recently counts as online on the supervisor board.
ONLINE_SECONDS = 5 * 60


class UserManager(BaseUserManager["User"]):
    use_in_migrations = True

    def _create_user(self, email: str, password: str | None, **extra: object) -> "User":
        if not email:
            raise ValueError("A user needs an email address.")
        user = self.model(email=self.normalize_email(email), **extra)
        user.set_password(password)
        user.save(using=self._db)
        return user

    def create_user(self, email: str, password: str | None = None, **extra: object) -> "User":
        extra.setdefault("is_staff", False)
        extra.setdefault("is_superuser", False)
        return self._create_user(email, password, **extra)

    def create_superuser(self, email: str, password: str | None = None, **extra: object) -> "User":
        extra.setdefault("is_staff", True)
        extra.setdefault("is_superuser", True)
        if extra["is_staff"] is not True or extra["is_superuser"] is not True:
            raise ValueError("A superuser needs is_staff and is_superuser.")
        return self._create_user(email, password, **extra)


class Availability(models.TextChoices):
    AVAILABLE = "available", "Available"
    AWAY = "away", "Away"


class User(AbstractUser):
    """A person who signs in with an email address; a worker when they hold skills."""

    username = None
    email = models.EmailField("email address", unique=True)
    availability = models.CharField(
        max_length=16, choices=Availability.choices, default=Availability.AVAILABLE
    )
    capacity = models.PositiveSmallIntegerField(
        default=3,
        validators=[MinValueValidator(0), MaxValueValidator(100)],
        help_text="Most capacity units this worker may hold at once (0: none); a task "
                  "uses its skill's weight in units.",
    )
    # When the worker last did something (accounts.sessions: at most once a minute); online
    # means within ONLINE_SECONDS. None: signed out, or never seen.
    last_seen = models.DateTimeField(null=True, blank=True)

    USERNAME_FIELD = "email"
    REQUIRED_FIELDS: list[str] = []

    objects = UserManager()

    class Meta:
        ordering = ["email"]
        permissions = [
            ("work_tasks", "Can take and work on tasks of held skills"),
            ("supervise_tasks", "Can watch and manage tasks of held skills"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(capacity__lte=100), name="user_capacity_at_most_100"
            ),
        ]

    def __str__(self) -> str:
        return self.email

    @property
    def display_name(self) -> str:
        return self.get_full_name() or self.email


class Dispatch(models.TextChoices):
    PULL = "pull", "Pull: workers take the next task"
    PUSH = "push", "Push: each task is offered to one worker at a time"


class PeerVisibility(models.TextChoices):
    OWN = "own", "Own: a worker sees what they may take, hold or held"
    TEAM = "team", "Team: every worker of the skill sees all its tasks, read-only"


class Skill(models.Model):
    """A kind of work and its queue; every task needs exactly one skill."""

    slug = models.SlugField(max_length=64, unique=True, help_text="e.g. invoice-review")
    name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    dispatch = models.CharField(max_length=8, choices=Dispatch.choices, default=Dispatch.PULL)
    peer_visibility = models.CharField(
        max_length=8, choices=PeerVisibility.choices, default=PeerVisibility.OWN,
        help_text="Which of the skill's tasks its workers see (supervisors see them all).",
    )
    weight = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Capacity units one task of this skill uses (1: it counts as one task).",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=models.Q(weight__gte=1, weight__lte=100),
                                   name="skill_weight_1_to_100"),
        ]

    def __str__(self) -> str:
        return self.slug


class WorkerSkill(models.Model):
    """A worker holds a skill at a proficiency from 1 (novice) to 5 (expert)."""

    worker = models.ForeignKey(User, on_delete=models.CASCADE, related_name="worker_skills")
    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="worker_skills")
    proficiency = models.PositiveSmallIntegerField(
        default=PROFICIENCY_MIN,
        validators=[MinValueValidator(PROFICIENCY_MIN), MaxValueValidator(PROFICIENCY_MAX)],
    )
    granted_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["skill__slug", "-proficiency"]
        constraints = [
            models.UniqueConstraint(fields=["worker", "skill"], name="worker_skill_unique"),
            models.CheckConstraint(
                condition=models.Q(
                    proficiency__gte=PROFICIENCY_MIN, proficiency__lte=PROFICIENCY_MAX
                ),
                name="worker_skill_proficiency_1_to_5",
            ),
        ]
        indexes = [models.Index(fields=["skill", "proficiency"], name="worker_skill_by_skill")]

    def __str__(self) -> str:
        return f"{self.worker} {self.skill} ({self.proficiency})"


class AuditAction(models.TextChoices):
    SIGN_IN = "sign_in", "Signed in"
    SIGN_IN_FAILED = "sign_in_failed", "Sign-in failed"
    LOCKED_OUT = "locked_out", "Locked out"
    SIGN_OUT = "sign_out", "Signed out"
    REAUTHENTICATED = "reauthenticated", "Confirmed their password"
    SESSION_EXPIRED = "session_expired", "Session ended (idle)"
    TOKEN_CREATED = "token_created", "API token created"
    TOKEN_REVOKED = "token_revoked", "API token revoked"
    TOKEN_REFUSED = "token_refused", "API token refused"
    USER_CREATED = "user_created", "User created"
    ROLES_CHANGED = "roles_changed", "Roles changed"
    SKILL_GRANTED = "skill_granted", "Skill granted"
    SKILL_CHANGED = "skill_changed", "Proficiency changed"
    SKILL_REMOVED = "skill_removed", "Skill removed"
    ACCESS_CHANGED = "access_changed", "Account access changed"
    SKILL_CREATED = "skill_created", "Skill created"
    SKILL_EDITED = "skill_edited", "Skill settings changed"
    CAPACITY_CHANGED = "capacity_changed", "Capacity changed"
    AVAILABILITY_CHANGED = "availability_changed", "Availability changed"
    TASK_ACTION_REFUSED = "task_action_refused", "Task action refused"


class AuditEvent(models.Model):
    """One entry of the append-only audit log (accounts.audit.audit_record writes it).

    The actor is kept by id and e-mail, not as a foreign key: deleting a user must
    neither rewrite nor remove what they did.
    """

    at = models.DateTimeField(auto_now_add=True, db_index=True)
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    actor_id = models.BigIntegerField(null=True, blank=True)
    actor_email = models.CharField(max_length=254, blank=True)
    subject = models.CharField(max_length=254, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["action", "-at"], name="audit_by_action")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.action} {self.actor_email} {self.subject}"


class ApiScope(models.TextChoices):
    """What an API token may do, each scope covering the ones before it."""

    READ = "read", "Read: look at what I may see, change nothing"
    WORK = "work", "Work: read, and take and answer my tasks"
    SUPERVISE = "supervise", "Supervise: work, and manage the tasks I supervise"
    ADMIN = "admin", "Admin: everything I may do, processes included"


class ApiToken(AbstractAuthToken):
    """A credential for the REST API (django-rest-knox's token, KNOX_TOKEN_MODEL).

    Only a SHA-512 digest of the secret is kept, with the first characters of the secret
    (token_key) to find the row; the secret itself is shown once, when it is made.
    accounts.api_tokens creates and revokes tokens; accounts.api_auth checks them.
    """

    id = models.BigAutoField(primary_key=True)
    # Not the primary key (knox's default): pages and URLs name a token by its id, and
    # the digest appears nowhere but here.
    digest = models.CharField(max_length=CONSTANTS.DIGEST_LENGTH, unique=True)
    expiry = models.DateTimeField(help_text="After this, the token is refused.")
    name = models.CharField(max_length=64, help_text="Its user's label, e.g. ci or laptop.")
    scope = models.CharField(max_length=16, choices=ApiScope.choices, default=ApiScope.READ)
    created_by = models.ForeignKey(
        User, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Who made it: its user, an admin, or nobody (a command).",
    )
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name = "API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.scope}) of {self.user}"
