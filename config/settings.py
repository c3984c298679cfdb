"""Settings for the inbox, read once from the environment.

Embedded defaults (nothing set): SQLite, a filesystem Celery broker and the
local Step Functions emulator. DATABASE_URL, REDIS_URL and INBOX_EMULATOR=false
switch the same code to PostgreSQL, Redis and real AWS. docs/CONFIGURATION.md
lists every variable.
"""

import base64
import datetime
import hashlib
import hmac
import re
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_choice, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("INBOX_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DJANGO_DEBUG", False)

# Development only: a fixed key so a local checkout works with nothing set.
_DEV_SECRET_KEY = "django-insecure-local-development-only-never-in-production"  # noqa: S105
SECRET_KEY = env_str("DJANGO_SECRET_KEY", _DEV_SECRET_KEY if DEBUG else None)
if SECRET_KEY is None:
    raise ImproperlyConfigured(
        "DJANGO_SECRET_KEY is required when DJANGO_DEBUG is off. Generate one with: "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))'"
    )

ALLOWED_HOSTS = env_list(
    "DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else []
)
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS")

INSTALLED_APPS = [
    # Django's admin on the inbox's site: signs in through allauth, asks for the password
    # again before a change (config.admin.InboxAdminSite).
    "config.apps.InboxAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "allauth",
    "allauth.account",
    "allauth.socialaccount",
    "rest_framework",
    "knox",
    "drf_spectacular",
    "accounts",
    "processes",
    "inbox",
    # Failed sign-ins counted per account and per client address (accounts.throttle).
    "axes",
]
INSTALLED_APPS += [
    f"allauth.socialaccount.providers.{provider}"
    for provider in env_list("INBOX_SOCIAL_PROVIDERS")
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.middleware.ContentSecurityPolicyMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    # After the messages (it leaves one for the sign-in page); before any view runs.
    "config.middleware.SessionIdleTimeoutMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    # Last: turns a sign-in that axes refused into the lockout page (accounts.throttle).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.signup",
                "accounts.context_processors.roles",
            ],
        },
    },
]

# Database ------------------------------------------------------------------

_database_url = env_str("DATABASE_URL", None)
if _database_url:
    try:
        _database = dj_database_url.parse(
            _database_url,
            conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60, minimum=0),
            conn_health_checks=True,
        )
    except ValueError as exc:
        # The message of dj_database_url names the scheme, never the password.
        raise ImproperlyConfigured(f"DATABASE_URL is not usable: {exc}") from None
    if _database["ENGINE"].endswith("postgresql"):
        # Django's backend with timestamps parsed by psycopg's C loader (config.postgresql).
        _database["ENGINE"] = "config.postgresql"
        # An unreachable server fails a request (and /readyz) in seconds, not after the
        # operating system's TCP timeout; ?connect_timeout= in DATABASE_URL wins.
        _database.setdefault("OPTIONS", {}).setdefault("connect_timeout", 5)
        # Parameters bound on the server, not quoted into the text, and a statement a
        # connection runs again and again (every hot path's) prepared from its fifth run
        # on (psycopg's prepare_threshold; Django turns preparing off unless asked), so
        # PostgreSQL no longer parses and plans it each time. DATABASE_SERVER_SIDE_BINDING=0
        # goes back to Django's default (client-side binding, nothing prepared): behind a
        # pooler that cannot keep prepared statements (PgBouncer in transaction mode
        # before 1.21).
        if env_bool("DATABASE_SERVER_SIDE_BINDING", True):
            _database["OPTIONS"]["server_side_binding"] = True
            _database["OPTIONS"]["prepare_threshold"] = 5
        # A pool per process (psycopg's), for the ASGI web: there every request runs in a
        # thread of its own, and a burst of them (every open page reconnecting its live
        # stream after a restart) would otherwise open a connection each, past the
        # server's max_connections. Requests wait for a free one instead (at most 10 s).
        _pool_max = env_int("DATABASE_POOL_MAX", 0, minimum=0)
        if _pool_max:
            _database["CONN_MAX_AGE"] = 0  # the pool keeps the connections instead
            _database["OPTIONS"]["pool"] = {"min_size": 1, "max_size": _pool_max,
                                            "timeout": 10}
else:
    # SQLite creates its file, not its folder: a fresh clone has no var/ yet.
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    _database = {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": VAR_DIR / "db.sqlite3",
        "OPTIONS": {
            # Concurrent writers (web, worker, beat) wait for the lock instead
            # of failing with "database is locked" on upgrade from a read.
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Redis, cache and Celery ----------------------------------------------------

REDIS_URL = env_str("REDIS_URL", None)
if REDIS_URL:
    CACHES = {
        "default": {
            # Django's, each connection pool's client made once (config/cache.py).
            "BACKEND": "config.cache.RedisCache",
            "LOCATION": REDIS_URL,
        }
    }
else:
    # Shared by every local process (web, worker, beat), unlike LocMemCache.
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": VAR_DIR / "cache",
        }
    }

CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL or "filesystem://")
CELERY_BROKER_FOLDER = VAR_DIR / "celery-broker"
if CELERY_BROKER_URL == "filesystem://":
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(CELERY_BROKER_FOLDER),
        "data_folder_out": str(CELERY_BROKER_FOLDER),
        "processed_folder": str(VAR_DIR / "celery-processed"),
        # Broadcasts (worker remote control) go here, not to ./control in the checkout.
        "control_folder": str(VAR_DIR / "celery-control"),
        "store_processed": False,
    }
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")
CELERY_TASK_ALWAYS_EAGER = False


def _every(seconds: float, task: str, *, expires: float) -> dict:
    """Return a beat entry: task every seconds, dropped if not started within expires."""
    return {"task": task, "schedule": seconds, "options": {"expires": expires}}


# Orphaned waits (inbox.services.orphans): how often beat runs the check, the AWS calls
# (ListExecutions pages, GetExecutionHistory) all processes together may make per period,
# how long a checked execution is left alone, and how old a wait must be to be judged (its
# intake message may still be on the queue: above the intake's redrive, 5 receives).
INBOX_ORPHANS_CHECK_EVERY_SECONDS = env_int("INBOX_ORPHANS_CHECK_EVERY_SECONDS", 60,
                                            minimum=10)
INBOX_ORPHANS_CHECK_CALLS = env_int("INBOX_ORPHANS_CHECK_CALLS", 60, minimum=0)
INBOX_ORPHANS_RECHECK_SECONDS = env_int("INBOX_ORPHANS_RECHECK_SECONDS", 1800, minimum=0)
INBOX_ORPHANS_GRACE_SECONDS = env_int("INBOX_ORPHANS_GRACE_SECONDS", 600, minimum=0)

# Each entry "expires" before its next tick, so a backlog (worker down) runs once.
CELERY_BEAT_SCHEDULE = {
    # Long-polls the intake queue; a cache lock keeps one poll at a time.
    "intake-poll": _every(10.0, "inbox.tasks.intake_poll_task", expires=9),
    # The clocks (timeouts, heartbeats, upstream checks) are not here: they run in their
    # own process (manage.py clock_run), where no other work can hold them up.
    # Sends callbacks that are due and that no sender (manage.py callbacks_run) sent.
    "outbox-drain": _every(5.0, "inbox.tasks.outbox_drain_task", expires=4),
    # Offers queued push-queue tasks nobody was available for when they arrived.
    "dispatch-pending": _every(15.0, "inbox.tasks.dispatch_pending_task", expires=14),
    # Relays change signals whose on-commit relay was lost or failed (none without a bus).
    "signals-relay": _every(5.0, "inbox.tasks.signals_relay_task", expires=4),
    # Keeps execution records current from DescribeExecution (and notices lost ones).
    "executions-reconcile": _every(30.0, "processes.tasks.executions_reconcile_task",
                                   expires=25),
    # Finds executions waiting at a human stage with no task and takes their envelope in.
    "orphans-check": _every(float(INBOX_ORPHANS_CHECK_EVERY_SECONDS),
                            "inbox.tasks.orphans_check_task",
                            expires=max(1, INBOX_ORPHANS_CHECK_EVERY_SECONDS - 5)),
}

# AWS: Step Functions and SQS ------------------------------------------------

INBOX_EMULATOR = env_bool("INBOX_EMULATOR", True)
INBOX_EMULATOR_HOST = "127.0.0.1"
INBOX_EMULATOR_PORT = env_int("INBOX_EMULATOR_PORT", 5005, minimum=1, maximum=65535)
if INBOX_EMULATOR:
    AWS_ENDPOINT_URL = f"http://{INBOX_EMULATOR_HOST}:{INBOX_EMULATOR_PORT}"
    AWS_REGION = env_str("AWS_REGION", "us-east-1")
else:
    AWS_ENDPOINT_URL = None
    AWS_REGION = env_str("AWS_REGION", None)
    if AWS_REGION is None:
        raise ImproperlyConfigured(
            "AWS_REGION is required when INBOX_EMULATOR is off (real AWS)."
        )
INBOX_INTAKE_QUEUE = env_str("INBOX_INTAKE_QUEUE", "inbox-intake")
INBOX_INTAKE_DLQ = env_str("INBOX_INTAKE_DLQ", f"{INBOX_INTAKE_QUEUE}-dlq")
INBOX_INTAKE_MAX_RECEIVES = env_int("INBOX_INTAKE_MAX_RECEIVES", 5, minimum=1)
# After a receive of the intake or the status queue that was not full, wait this long
# before the next, so that messages arriving at a trickle share a receive (Lambda's
# batching window for SQS; processes.aws.messages_receive_batches). 0: receive at once.
INBOX_RECEIVE_WINDOW_MS = env_int("INBOX_RECEIVE_WINDOW_MS", 200, minimum=0, maximum=5000)
# Where EventBridge puts "Step Functions Execution Status Change" events for the inbox
# (manage.py aws_bootstrap creates the rule, the queue and its dead-letter queue).
INBOX_STATUS_QUEUE = env_str("INBOX_STATUS_QUEUE", "inbox-execution-status")
INBOX_STATUS_DLQ = env_str("INBOX_STATUS_DLQ", f"{INBOX_STATUS_QUEUE}-dlq")
INBOX_STATUS_RULE = env_str("INBOX_STATUS_RULE", "inbox-execution-status")
# Change signals for other systems: every task event is relayed to this EventBridge bus
# (name or ARN; empty: none are written) as source INBOX_SIGNALS_SOURCE.
INBOX_SIGNALS_BUS = env_str("INBOX_SIGNALS_BUS", "")
INBOX_SIGNALS_SOURCE = env_str("INBOX_SIGNALS_SOURCE", "inbox.tasks")
# Role assumed by deployed state machines; the emulator accepts any well-formed ARN.
INBOX_STATES_ROLE_ARN = env_str(
    "INBOX_STATES_ROLE_ARN",
    "arn:aws:iam::123456789012:role/inbox-states" if INBOX_EMULATOR else None,
)
# With the CloudFormation template (manage.py infra_template) the stack creates the state
# machines: a deploy then records the version and its ARN and never calls Step Functions.
INBOX_STATE_MACHINES_FROM_TEMPLATE = env_bool("INBOX_STATE_MACHINES_FROM_TEMPLATE", False)
# What state machines log to CloudWatch Logs (never their execution data: a task token is
# in it), and how long their log groups keep it (a value CloudWatch Logs allows).
INBOX_STATES_LOG_LEVEL = env_choice("INBOX_STATES_LOG_LEVEL", "ERROR", ("ERROR", "FATAL", "ALL"))
INBOX_STATES_LOG_RETENTION_DAYS = int(env_choice(
    "INBOX_STATES_LOG_RETENTION_DAYS", "90",
    ("1", "3", "5", "7", "14", "30", "60", "90", "120", "150", "180", "365", "400", "545",
     "731", "1096", "1827", "2192", "2557", "2922", "3288", "3653"),
))
# The first part of every name the template gives (roles, policies, log groups, alarms,
# the alarm topic): two installations in one account need two prefixes.
INBOX_INFRA_PREFIX = env_str("INBOX_INFRA_PREFIX", "inbox")
if not re.fullmatch(r"[a-z][a-z0-9-]{0,19}", INBOX_INFRA_PREFIX):
    raise ImproperlyConfigured(
        f"INBOX_INFRA_PREFIX={INBOX_INFRA_PREFIX!r} is not 1 to 20 lowercase letters, digits "
        "and dashes starting with a letter (it starts IAM role and log group names)."
    )

# Where people reach the site, for links in notifications.
INBOX_BASE_URL = env_str("INBOX_BASE_URL", "http://127.0.0.1:8000").rstrip("/")

# Callbacks to Step Functions: SendTask* calls per second across all workers (the quota
# refills at 300/s in smaller regions, 500/s in the largest), and attempts before a
# callback is dead (visible to admins, requeueable).
INBOX_SENDTASK_RATE = env_int("INBOX_SENDTASK_RATE", 250, minimum=0)
# Heartbeats share that budget but come after answers: they are sent only while less than
# this share of the second's budget is taken, so the rest is always there for answers.
INBOX_HEARTBEAT_SHARE_PERCENT = env_int("INBOX_HEARTBEAT_SHARE_PERCENT", 50, minimum=0,
                                        maximum=100)
INBOX_CALLBACK_MAX_ATTEMPTS = env_int("INBOX_CALLBACK_MAX_ATTEMPTS", 8, minimum=1, maximum=50)
# Drains that run at once on a backlog: a drain whose first batch comes full asks the
# Celery worker's other processes for this many minus one more (helpers, which ask for
# none), so the backlog's sends use more than one process's share of the CPU; all within
# the one SendTask budget. 1: one drain at a time.
INBOX_OUTBOX_DRAINS = env_int("INBOX_OUTBOX_DRAINS", 2, minimum=1, maximum=16)
# Threads with which one outbox drain sends its batch at once (each within that budget).
INBOX_CALLBACK_SENDERS = env_int("INBOX_CALLBACK_SENDERS", 8, minimum=1, maximum=32)
# A worker's complete or reject waits this many seconds before it is sent, and until then
# they may take it back (undo); 0 sends at once and turns undo off.
INBOX_UNDO_SECONDS = env_int("INBOX_UNDO_SECONDS", 5, minimum=0, maximum=60)
# The callbacks' sender (manage.py callbacks_run): the longest it sleeps between rounds when
# no pending row falls due sooner (in milliseconds: a row due at once, a requeue or an
# abort's, is sent within it; a decision's is sent as its undo window closes). On
# PostgreSQL the sender is woken by NOTIFY when a row is written (inbox.wakeup) and this
# applies only while its listening connection is down.
INBOX_CALLBACKS_MAX_WAIT_SECONDS = env_int("INBOX_CALLBACKS_MAX_WAIT_MS", 250, minimum=10,
                                           maximum=60_000) / 1000

# The clock process (manage.py clock_run): the longest it sleeps between sweeps when no
# deadline is nearer (in milliseconds: a deadline set elsewhere is seen within it), and how
# often it sends due heartbeats and checks open tasks' executions upstream (seconds).
INBOX_CLOCK_MAX_WAIT_SECONDS = env_int("INBOX_CLOCK_MAX_WAIT_MS", 500, minimum=10,
                                       maximum=60_000) / 1000
INBOX_HEARTBEATS_EVERY_SECONDS = env_int("INBOX_HEARTBEATS_EVERY_SECONDS", 1, minimum=1)
# The clock process's niceness (-20..19): below 0 it gets the CPU before the web, workers
# and database on a busy machine (needs the privilege to raise priority; see OPERATIONS).
INBOX_CLOCK_NICE = env_int("INBOX_CLOCK_NICE", 0, minimum=-20, maximum=19)
INBOX_EXECUTIONS_CHECK_EVERY_SECONDS = env_int("INBOX_EXECUTIONS_CHECK_EVERY_SECONDS", 30,
                                               minimum=1)
# The backstop behind the status events: DescribeExecution calls per second it may make
# (each round checks this many per second of its period, least recently checked first).
INBOX_EXECUTIONS_CHECK_RATE = env_int("INBOX_EXECUTIONS_CHECK_RATE", 2, minimum=1)

# Task token vault ------------------------------------------------------------


def _dev_fernet_key(purpose: str) -> str:
    digest = hmac.new(SECRET_KEY.encode(), purpose.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode()


def _fernet_keys(name: str) -> list[str]:
    keys = env_list(name)
    if not keys:
        if not DEBUG:
            raise ImproperlyConfigured(
                f"{name} is required when DJANGO_DEBUG is off: a comma-separated list "
                "of Fernet keys, newest first. Generate one with: python -c 'from "
                "cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
            )
        return [_dev_fernet_key(name)]
    for position, key in enumerate(keys, start=1):
        try:
            raw = base64.urlsafe_b64decode(key.encode())
        except ValueError:
            raw = b""
        if len(raw) != 32:
            # Never echo the value: it is a secret.
            raise ImproperlyConfigured(
                f"{name} item {position} is not a Fernet key "
                "(32 bytes, url-safe base64, 44 characters)."
            )
    return keys


INBOX_TOKEN_KEYS = _fernet_keys("INBOX_TOKEN_KEYS")
INBOX_TOKEN_DIGEST_KEY = env_str(
    "INBOX_TOKEN_DIGEST_KEY", _dev_fernet_key("INBOX_TOKEN_DIGEST_KEY") if DEBUG else None
)
if INBOX_TOKEN_DIGEST_KEY is None:
    raise ImproperlyConfigured(
        "INBOX_TOKEN_DIGEST_KEY is required when DJANGO_DEBUG is off: a long random "
        "string used to fingerprint task tokens (keep it stable; it is not rotated)."
    )

# Accounts and sign-in -----------------------------------------------------------

AUTH_USER_MODEL = "accounts.User"
AUTHENTICATION_BACKENDS = [
    # First: refuses a locked-out account or address before any password is checked.
    "accounts.throttle.SignInThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "account_login"
LOGIN_REDIRECT_URL = "inbox:home"
ACCOUNT_LOGIN_METHODS = {"email"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_USER_MODEL_USERNAME_FIELD = None
ACCOUNT_EMAIL_VERIFICATION = env_choice(
    "ACCOUNT_EMAIL_VERIFICATION", "none", ["none", "optional", "mandatory"]
)
ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
ACCOUNT_FORMS = {"login": "accounts.forms.LoginForm",
                 "reauthenticate": "accounts.forms.ReauthenticateForm"}
ACCOUNT_LOGOUT_ON_GET = False
ACCOUNT_SESSION_REMEMBER = None

# The client's address. Behind a load balancer every request comes from its address, so a
# per-address limit would lock out everyone at once: trust the last N X-Forwarded-For
# entries (the ones your proxies add), or one header your proxy sets and clients cannot.
# allauth reads these; accounts.audit.client_ip gives its answer to axes and the audit log.
ALLAUTH_TRUSTED_PROXY_COUNT = env_int("INBOX_TRUSTED_PROXY_COUNT", 0, minimum=0, maximum=10)
ALLAUTH_TRUSTED_CLIENT_IP_HEADER = env_str("INBOX_TRUSTED_CLIENT_IP_HEADER", None)

# Failed sign-ins, counted by django-axes in the database per account (the e-mail as typed,
# lower-cased) and per client address, separately: either reaching the limit within the
# lockout time refuses every password for it until that time has passed since the failure
# that reached it (attempts during the lockout are refused without being counted, so the
# time on the lockout page holds). Every authenticate() with a request goes through it.
AXES_FAILURE_LIMIT = env_int("INBOX_SIGNIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("INBOX_SIGNIN_LOCKOUT_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_USERNAME_CALLABLE = "accounts.throttle.signin_username"
AXES_CLIENT_IP_CALLABLE = "accounts.audit.client_ip"
AXES_LOCKOUT_CALLABLE = "accounts.throttle.lockout_response"
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
# A success must not wipe the count: it would wipe the address's count too, and let anyone
# with an account reset it between guesses at another's password.
AXES_RESET_ON_SUCCESS = False
# Sign-ins and sign-outs are in the audit log (accounts.audit); axes keeps only attempts.
AXES_DISABLE_ACCESS_LOG = True
AXES_VERBOSE = False  # no banner at every process start; lockouts are in the audit log
# allauth's own limits stay for everything else (password reset, sign-up, sign-in posts per
# address...), by the same client address; failed sign-ins are axes' alone, so one counter
# decides a lockout and the page can say until when.
ACCOUNT_RATE_LIMITS = {"login_failed": False}

# Sessions: they end after INBOX_SESSION_IDLE_SECONDS without anything the user did (the
# live stream and the pages' background refreshes do not count; config.middleware) and
# INBOX_SESSION_MAX_SECONDS after sign-in whatever happens.
INBOX_SESSION_IDLE_SECONDS = env_int("INBOX_SESSION_IDLE_SECONDS", 8 * 3600, minimum=60)
INBOX_SESSION_MAX_SECONDS = env_int("INBOX_SESSION_MAX_SECONDS", 12 * 3600, minimum=60)
if INBOX_SESSION_IDLE_SECONDS > INBOX_SESSION_MAX_SECONDS:
    raise ImproperlyConfigured(
        f"INBOX_SESSION_IDLE_SECONDS={INBOX_SESSION_IDLE_SECONDS} is longer than "
        f"INBOX_SESSION_MAX_SECONDS={INBOX_SESSION_MAX_SECONDS}: a session would always end "
        "at the cap first. Lower the idle timeout or raise the cap."
    )
SESSION_COOKIE_AGE = INBOX_SESSION_MAX_SECONDS
# Admin changes (the Django admin, the team pages, API tokens) need a sign-in or a password
# confirmation this recent; allauth's own sensitive pages use the same window.
ACCOUNT_REAUTHENTICATION_TIMEOUT = env_int("INBOX_REAUTHENTICATE_SECONDS", 15 * 60, minimum=60)

SOCIALACCOUNT_ADAPTER = "accounts.adapter.SocialAccountAdapter"
# Off by default: an admin creates or invites every user.
INBOX_OPEN_SIGNUP = env_bool("INBOX_OPEN_SIGNUP", False)
# A user an admin created signs in through the identity provider when the
# provider vouches for the same (verified) email address.
SOCIALACCOUNT_EMAIL_AUTHENTICATION = True
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = True
SOCIALACCOUNT_PROVIDERS: dict = {}
_oidc_provider_id = env_str("INBOX_OIDC_PROVIDER_ID", None)
if _oidc_provider_id:
    SOCIALACCOUNT_PROVIDERS["openid_connect"] = {
        "APPS": [
            {
                "provider_id": _oidc_provider_id,
                "name": env_str("INBOX_OIDC_NAME", _oidc_provider_id),
                "client_id": env_str("INBOX_OIDC_CLIENT_ID"),
                "secret": env_str("INBOX_OIDC_CLIENT_SECRET"),
                "settings": {"server_url": env_str("INBOX_OIDC_SERVER_URL")},
            }
        ]
    }

# REST API ---------------------------------------------------------------------

# API tokens are django-rest-knox's, in our own model (a name, a scope, who made it, last
# use): knox keeps only a SHA-512 digest of each. Every token expires; its user picks the
# lifetime, from 1 day up to INBOX_API_TOKEN_MAX_DAYS (docs/API.md).
KNOX_TOKEN_MODEL = "accounts.ApiToken"  # noqa: S105 (a model name)
# knox's migrations create its own token table whatever the setting says; ours replaces it.
MIGRATION_MODULES = {"knox": None}
INBOX_API_TOKEN_MAX_DAYS = env_int("INBOX_API_TOKEN_MAX_DAYS", 365, minimum=1, maximum=365)
INBOX_API_TOKEN_DAYS = env_int("INBOX_API_TOKEN_DAYS", min(90, INBOX_API_TOKEN_MAX_DAYS),
                               minimum=1, maximum=INBOX_API_TOKEN_MAX_DAYS)
REST_KNOX = {
    "TOKEN_TTL": datetime.timedelta(days=INBOX_API_TOKEN_DAYS),
    "AUTH_HEADER_PREFIX": "Token",
    # Recognisable in a leaked file or log (secret scanners, grep); not part of the check.
    "TOKEN_PREFIX": "inbox_",
    "AUTO_REFRESH": False,
}
REST_FRAMEWORK = {
    # The token class first: it names the scheme of a 401's WWW-Authenticate header. The
    # session serves the pages' own fetches, with Django's CSRF check.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "accounts.api_auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    # A view that declares no token_scope needs an admin-scoped token (fail closed).
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "accounts.api_auth.HasTokenScope",
    ],
    # JSON only; DRF's browsable pages (forms for every endpoint) in development alone.
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        *(["rest_framework.renderers.BrowsableAPIRenderer"] if DEBUG else []),
    ],
    # JSON bodies only, bounded in size and depth (config.api.JSONParser).
    "DEFAULT_PARSER_CLASSES": ["config.api.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "config.api.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Inbox API",
    "DESCRIPTION": "Human tasks for AWS Step Functions.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    # Any signed-in caller may read the schema, with a token of any scope.
    "SERVE_PERMISSIONS": [
        "rest_framework.permissions.IsAuthenticated",
        "accounts.api_auth.HasTokenScopeRead",
    ],
    # Every operation's errors, documented in the one shape (config/openapi.py).
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.openapi.error_responses",
    ],
}

# Internationalisation, static files ---------------------------------------------

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        # Hashed names (cacheable forever) need collectstatic; the tests' live
        # server serves through the finders, so the test run turns them off.
        "BACKEND": (
            "whitenoise.storage.CompressedManifestStaticFilesStorage"
            if env_bool("INBOX_STATIC_MANIFEST", not DEBUG)
            else "django.contrib.staticfiles.storage.StaticFilesStorage"
        )
    },
}
WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", DEBUG)

# E-mail ---------------------------------------------------------------------------

EMAIL_BACKEND = env_str(
    "DJANGO_EMAIL_BACKEND",
    "django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
# Where django.core.mail.backends.filebased.EmailBackend writes (./dev run's quiet mode).
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "inbox@localhost")

# Security -------------------------------------------------------------------------

SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT", not DEBUG)
# Load balancers probe over plain HTTP; a redirect would read as "unhealthy".
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SESSION_COOKIE_HTTPONLY = True
SECURE_HSTS_SECONDS = env_int("DJANGO_HSTS_SECONDS", 0 if DEBUG else 31536000, minimum=0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_HSTS_INCLUDE_SUBDOMAINS", True)
SECURE_HSTS_PRELOAD = env_bool("DJANGO_HSTS_PRELOAD", True)
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# No inline script or style anywhere (config.middleware sends it). Sign-in through an
# identity provider posts a form that redirects to the provider's sign-in page, which
# form-action must allow: INBOX_CSP_FORM_ACTION lists such origins.
_csp_form_action = env_list("INBOX_CSP_FORM_ACTION")
for _origin in _csp_form_action:
    if not re.fullmatch(r"https?://[A-Za-z0-9.\-]+(:[0-9]+)?", _origin):
        raise ImproperlyConfigured(
            f"INBOX_CSP_FORM_ACTION item {_origin!r} is not an origin such as "
            "https://login.example.com."
        )
INBOX_CSP = "; ".join([
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    "img-src 'self' data:",
    "frame-ancestors 'none'",
    " ".join(["form-action 'self'", *_csp_form_action]),
    "base-uri 'self'",
])
if env_bool("DJANGO_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Operations ----------------------------------------------------------------------

# Bearer token a Prometheus scraper sends for /metrics; unset, only signed-in staff read it.
INBOX_METRICS_TOKEN = env_str("INBOX_METRICS_TOKEN", None)
if INBOX_METRICS_TOKEN is not None and len(INBOX_METRICS_TOKEN) < 32:
    # Never echo the value: it is a secret.
    raise ImproperlyConfigured(
        "INBOX_METRICS_TOKEN is too short: use at least 32 characters, e.g. "
        "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    )

# Logging ----------------------------------------------------------------------------

LOG_LEVEL_NAMES = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def _log_levels(name: str) -> dict[str, dict[str, str]]:
    """Read "logger=LEVEL,..." (e.g. celery.beat=WARNING) into LOGGING's loggers."""
    loggers: dict[str, dict[str, str]] = {}
    for item in env_list(name):
        logger, _, level = (part.strip() for part in item.partition("="))
        if not logger or level.upper() not in LOG_LEVEL_NAMES:
            raise ImproperlyConfigured(
                f"{name}: {item!r} is not logger=LEVEL with LEVEL one of "
                f"{', '.join(LOG_LEVEL_NAMES)} (e.g. {name}=celery.beat=WARNING)."
            )
        loggers[logger] = {"level": level.upper()}
    return loggers


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "filters": {"redact_tokens": {"()": "inbox.redaction.RedactTokens"}},
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "filters": ["redact_tokens"],
        },
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        "botocore": {"level": "WARNING"},
        "urllib3": {"level": "WARNING"},
        "werkzeug": {"level": "WARNING"},
        # Per logger, over the root's level (./dev run sets them for its quiet output).
        **_log_levels("LOG_LEVELS"),
    },
}
