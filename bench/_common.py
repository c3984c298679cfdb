"""Shared helpers of the bench scripts: a scratch PostgreSQL database, settings that send
nothing anywhere, bulk-loaded tasks and workers, percentiles, tables and the machine.

Call bench_environment() before importing anything of Django, then scratch_database():

    from _common import bench_environment, scratch_database
    bench_environment()
    with scratch_database("inbox_bench_mine") as url:
        ...   # django is set up and migrated on a fresh database named inbox_bench_mine

Benchmarks print figures and assert nothing about time (docs/BENCHMARKS.md).
"""

import argparse
import contextlib
import math
import os
import platform
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The task columns a bulk insert must fill, and the SQL expression of each (n is the row
# number from generate_series). tasks_insert() takes overrides of any of them.
TASK_DEFAULTS: dict[str, str] = {
    "id": "gen_random_uuid()",
    "state": "'queued'",
    "version": "1",
    "token_ciphertext": "'\\x00'::bytea",
    # Unique, 64 characters, like a real keyed digest.
    "token_digest": "replace(gen_random_uuid()::text, '-', '') "
                    "|| replace(gen_random_uuid()::text, '-', '')",
    "execution_arn": "'arn:aws:states:us-east-1:123456789012:execution:bench:' || n",
    "stage": "'review'",
    "process_name": "'bench'",
    "process_version": "1",
    "skill_id": "NULL",
    "min_proficiency": "1",
    "title": "'Task ' || n",
    "form": "'approve-reject'",
    "input": "'{}'::jsonb",
    "priority": "n % 100",
    "exclude_workers_of": "'[]'::jsonb",
    "offer_seconds": "300",
    "work_seconds": "1800",
    "overall_seconds": "86400",
    "on_timeout": "'abort'",
    "entered_at": "now()",
    # Distinct creation times, oldest first, so queue order is well defined.
    "created_at": "now() - interval '1 day' + n * interval '1 millisecond'",
    "assignee_id": "NULL",
    "offer_deadline": "NULL",
    "work_deadline": "NULL",
    "overall_deadline": "now() + interval '1 day'",
    "reason": "''",
}


def bench_environment(*, broker: str = "memory://localhost/") -> None:
    """Set the environment the bench processes (and any gunicorn they start) run with.

    Production-like settings (DEBUG off: no query log), throwaway keys, a Celery broker
    that delivers nothing (kombu's in-process memory transport: a .delay() after commit
    lands in this process's memory and no worker ever runs it) and a Step Functions
    endpoint where nothing listens, so an accidental AWS call fails loudly instead of
    reaching an emulator or AWS.
    """
    env = os.environ
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    env["DJANGO_DEBUG"] = "false"
    env.setdefault("DJANGO_SECRET_KEY", secrets.token_urlsafe(50))
    env.setdefault("INBOX_TOKEN_KEYS", _fernet_key())
    env.setdefault("INBOX_TOKEN_DIGEST_KEY", secrets.token_urlsafe(32))
    env["DJANGO_ALLOWED_HOSTS"] = "127.0.0.1,localhost"
    env["DJANGO_SECURE_SSL_REDIRECT"] = "false"
    env["DJANGO_SECURE_COOKIES"] = "false"
    env["INBOX_STATIC_MANIFEST"] = "false"
    env["CELERY_BROKER_URL"] = broker
    env["INBOX_EMULATOR"] = "true"
    env["INBOX_EMULATOR_PORT"] = str(closed_port())
    env.setdefault("LOG_LEVEL", "WARNING")
    env.setdefault("INBOX_VAR_DIR", str(ROOT / "var" / "bench"))
    # STATIC_ROOT: render and ui collect the static files into it; the other benches serve
    # none, and without the directory each web worker they start warns that it is missing.
    (Path(env["INBOX_VAR_DIR"]) / "static").mkdir(parents=True, exist_ok=True)


def _fernet_key() -> str:
    import base64

    return base64.urlsafe_b64encode(secrets.token_bytes(32)).decode()


def closed_port() -> int:
    """Return a local TCP port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port() -> int:
    return closed_port()


# The web servers a bench can start under gunicorn: (application, worker class,
# environment). asgi is production's (docs/OPERATIONS.md: uvicorn's worker, ASGI for the
# live stream, a pool of connections per process); wsgi is gunicorn's sync workers.
WEB_SERVERS = {
    "asgi": ("config.asgi:application", "uvicorn_worker.UvicornWorker",
             {"DATABASE_POOL_MAX": "20"}),
    "wsgi": ("config.wsgi:application", "sync", {}),
}


def web_wait(port: int, web: subprocess.Popen, *, seconds: float = 60.0) -> None:
    """Wait until the web server started as web accepts connections on port (a slow
    machine takes more than a few seconds to import Django); exit if it ended or never
    listens."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if web.poll() is not None:
            raise SystemExit(f"The web server exited with {web.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"The web server did not listen on port {port} within {seconds:.0f} s")


def server_url() -> str:
    """Return DATABASE_URL, which must name a PostgreSQL server; exit otherwise."""
    url = os.environ.get("DATABASE_URL", "")
    if urlsplit(url).scheme not in ("postgres", "postgresql", "pgsql"):
        sys.exit("The benchmarks run on PostgreSQL only: set DATABASE_URL=postgres://"
                 "user@host:5432/anydb (its server is used; the database is not touched).")
    return url


def database_url(name: str) -> str:
    """Return DATABASE_URL with its database name replaced by name."""
    parts = urlsplit(server_url())
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _admin_connect() -> "object":
    import psycopg

    return psycopg.connect(_libpq_url(database_url("postgres")), autocommit=True)


def _libpq_url(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, parts.query, parts.fragment))


def libpq_url() -> str:
    """Return the current DATABASE_URL in a form psycopg.connect() accepts."""
    return _libpq_url(os.environ["DATABASE_URL"])


def database_create(name: str) -> None:
    """Create database name, dropping it first if a previous run left it unused.

    Exit if someone is connected to it: another bench run is using it, and dropping it
    would end that run.
    """
    if not name.startswith("inbox_bench"):
        raise ValueError(f"Refusing to (re)create {name!r}: bench databases are inbox_bench*.")
    with _admin_connect() as conn:
        (users,) = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                [name]).fetchone()
        if users:
            sys.exit(f"Database {name} is in use ({users} connection(s)): another bench run? "
                     "Wait for it to finish; bench runs of one script cannot overlap.")
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def database_drop(name: str) -> None:
    if not name.startswith("inbox_bench"):
        raise ValueError(f"Refusing to drop {name!r}: bench databases are inbox_bench*.")
    with _admin_connect() as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextlib.contextmanager
def scratch_database(name: str, *, keep: bool = False) -> Iterator[str]:
    """Create database name on DATABASE_URL's server, point Django at it, migrate it.

    Yield its URL (also left in os.environ["DATABASE_URL"] for subprocesses); drop the
    database afterwards unless keep.
    """
    url = database_url(name)
    database_create(name)
    os.environ["DATABASE_URL"] = url
    try:
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", verbosity=0, interactive=False)
        yield url
    finally:
        from django.db import connections

        connections.close_all()
        if not keep:
            database_drop(name)


# Bulk loading ---------------------------------------------------------------------------


def checkpoint() -> None:
    """Flush what a load (or a phase before) left dirty, before the next measured phase.

    Loading 1M tasks writes about ten times the WAL of loading 100k: without this, the
    checkpoints it sets off (every max_wal_size of WAL) went on writing through the phases
    measured after it (PostgreSQL's log, 2026-12-07: one ran for 42 s across the sweeper's
    steady phase at 1M, none at 100k), so a phase measured the load's leftovers, and two
    phases run one after the other did not meet the same disk.
    """
    from django.db import connection
    from django.db.utils import DatabaseError

    try:
        with connection.cursor() as cursor:
            cursor.execute("CHECKPOINT")
    except DatabaseError as exc:
        # Needs a superuser or the pg_checkpoint role.
        print(f"CHECKPOINT refused ({exc}): the load's writes may still be flushing while "
              f"the next phase is measured")


def tasks_insert(cursor: "object", *, count: int, start: int = 1, history: bool = False,
                 **columns: str) -> None:
    """Insert count tasks with one INSERT ... SELECT generate_series(start, start+count-1).

    Each keyword overrides a column's SQL expression of TASK_DEFAULTS (n is the row
    number); skill_id has no usable default and must be given.

    history: each task also gets the "receive" event intake writes (PostgreSQL only),
    hash-chained as inbox.history.event_hash chains it and named by the task's chain
    head, so inbox.history.events_verify accepts it. A bench whose takes read a task's
    history needs this: in production every task has its events, and a planner that
    sees an empty event table plans a sequential scan of it, which the session's plan
    cache then keeps while the table grows under the bench.
    """
    unknown = set(columns) - set(TASK_DEFAULTS)
    if unknown:
        raise ValueError(f"Not task columns: {sorted(unknown)}")
    expressions = {**TASK_DEFAULTS, **columns}
    if expressions["skill_id"] == "NULL":
        raise ValueError("tasks_insert needs skill_id (an SQL expression of n).")
    rows = f"generate_series({int(start)}::bigint, {int(start) + int(count) - 1}::bigint) AS n"
    if history:
        if expressions["version"] != "1" or expressions["state"] != "'queued'":
            raise ValueError("history=True seeds each task's receive event: the tasks "
                             "must be queued at version 1.")
        # The hashed columns, computed once per row, so the head and the event agree.
        hashed = {"id": "id", "created_at": "created_at",
                  "overall_deadline": "overall_deadline"}
        rows = (f"(SELECT n, {expressions['id']} AS id, {expressions['created_at']} AS "
                f"created_at, {expressions['overall_deadline']} AS overall_deadline "
                f"FROM {rows}) AS g")
        expressions = {**expressions, **hashed, "chain_head": _receive_hash()}
    names = ", ".join(expressions)
    values = ",\n       ".join(expressions.values())
    # No query parameters: the expressions may use % (modulo) freely.
    cursor.execute(f"INSERT INTO inbox_task ({names})\nSELECT {values}\nFROM {rows}")
    if history:
        from inbox.models import GENESIS_HASH

        # The tasks just inserted: a head but no event yet (start may add to a table).
        cursor.execute(
            "INSERT INTO inbox_taskevent (task_id, version, action, from_state, to_state, "
            "actor_id, actor_label, reason, data, at, prev_hash, hash) "
            "SELECT t.id, 1, 'receive', '', 'queued', NULL, 'intake', '', "
            "jsonb_build_object('overall_deadline', inbox_isoformat(t.overall_deadline)), "
            "t.created_at, %s, t.chain_head FROM inbox_task t "
            "WHERE t.chain_head <> %s "
            "AND NOT EXISTS (SELECT 1 FROM inbox_taskevent e WHERE e.task_id = t.id)",
            [GENESIS_HASH, GENESIS_HASH])


def _receive_hash() -> str:
    """inbox.history.event_hash of a task's receive event, in SQL over the task's columns
    (as migration 0012 hashes a take): [prev, task, version, action, from, to, actor,
    reason, data, at] as compact JSON."""
    from inbox.models import GENESIS_HASH

    return (
        "encode(sha256(convert_to('[\"" + GENESIS_HASH + "\",\"' || id::text || "
        "'\",1,\"receive\",\"\",\"queued\",\"intake\",\"\",{\"overall_deadline\":\"' || "
        "inbox_isoformat(overall_deadline) || '\"},\"' || inbox_isoformat(created_at) || "
        "'\"]', 'UTF8')), 'hex')")


# The process version TASK_DEFAULTS' tasks name (process "bench" v1, stage "review"): as in
# production, every task comes from a deployed version, whose spec a task's page and API
# answer read (once per process, processes.selectors.deployed_spec).
BENCH_SPEC = """
process: bench
version: 1
description: The benches' one human stage.
stages:
  - id: review
    kind: human
    skill: bench-000
    title: "Review"
    show: [ref]
    form: approve-reject
    timeouts: {offer: 300, work: 1800, overall: 86400}
    on_timeout: abort
    if_rejected: rejected
  - id: approved
    kind: succeed
  - id: rejected
    kind: fail
    error: Bench.Rejected
    cause: A reviewer rejected it.
"""


def bench_version_record() -> None:
    """Record BENCH_SPEC as deployed, as processes.services.process_deploy would, but
    without creating its state machine (nor asking SQS for the intake queue's address):
    the benches that use it start no execution and talk to no AWS endpoint."""
    import hashlib

    from processes.compiler import Target, compile_spec, state_machine_name
    from processes.models import Process, ProcessVersion
    from processes.spec import spec_parse

    spec = spec_parse(BENCH_SPEC, source="bench")
    name = state_machine_name(spec.name, spec.version)
    prefix = "arn:aws:states:us-east-1:123456789012:stateMachine:"
    target = Target(intake_queue_url="http://127.0.0.1/123456789012/inbox-intake",
                    state_machine_arn_prefix=prefix)
    process, _ = Process.objects.get_or_create(name=spec.name)
    ProcessVersion.objects.create(
        process=process, version=spec.version, description=spec.description,
        spec_text=BENCH_SPEC, spec_sha256=hashlib.sha256(BENCH_SPEC.encode()).hexdigest(),
        asl=compile_spec(spec, target=target), state_machine_name=name,
        state_machine_arn=prefix + name)


def cycle(ids: Sequence[int], by: str = "n") -> str:
    """Return the SQL expression of ids[by % len(ids)] (spread rows over skills, workers)."""
    array = ",".join(str(int(i)) for i in ids)
    return f"(ARRAY[{array}]::bigint[])[1 + ({by}) % {len(ids)}]"


def skills_create(count: int, *, dispatch: str = "pull", prefix: str = "bench") -> list[int]:
    """Create count skills named prefix-000...; return their ids in order."""
    from accounts.models import Skill

    skills = Skill.objects.bulk_create(
        Skill(slug=f"{prefix}-{i:03d}", name=f"Bench skill {i}", dispatch=dispatch)
        for i in range(count)
    )
    return [skill.pk for skill in skills]


def workers_create(count: int, *, skills_of: "object", prefix: str = "worker",
                   capacity: int = 100, proficiency: int = 3,
                   api_tokens: bool = False) -> list[int]:
    """Create count workers (worker role, unusable password); return their ids in order.

    skills_of(i) returns the skill ids worker i holds. With api_tokens, each gets a
    work-scoped API token whose secret is api_token(prefix, i) (REST API sign-in), stored
    as the service stores one (knox's digest), in bulk.
    """
    import datetime

    from django.contrib.auth.hashers import make_password
    from django.contrib.auth.models import Group
    from django.utils import timezone
    from knox.crypto import hash_token
    from knox.settings import CONSTANTS

    from accounts.models import ApiScope, ApiToken, User, WorkerSkill
    from accounts.roles import Role

    unusable = make_password(None)
    users = User.objects.bulk_create(
        User(email=f"{prefix}{i}@bench.example.com", password=unusable, capacity=capacity)
        for i in range(count)
    )
    group = Group.objects.get(name=Role.WORKER)
    User.groups.through.objects.bulk_create(
        User.groups.through(user_id=user.pk, group_id=group.pk) for user in users
    )
    WorkerSkill.objects.bulk_create(
        WorkerSkill(worker_id=user.pk, skill_id=skill_id, proficiency=proficiency)
        for i, user in enumerate(users) for skill_id in skills_of(i)
    )
    if api_tokens:
        now = timezone.now()
        expiry = now + datetime.timedelta(days=1)
        secrets = [api_token(prefix, i) for i in range(len(users))]
        # Each noted as just used, as a token in steady use is: its next uses write no
        # note for a minute (accounts.api_auth.LAST_USED_EVERY), whatever few calls the
        # bench makes with it.
        ApiToken.objects.bulk_create(
            ApiToken(digest=hash_token(secret), token_key=secret[:CONSTANTS.TOKEN_KEY_LENGTH],
                     user_id=user.pk, created_by_id=user.pk, expiry=expiry, name="bench",
                     scope=ApiScope.WORK, last_used_at=now)
            for secret, user in zip(secrets, users, strict=True)
        )
    return [user.pk for user in users]


def sessions_signed_in(user_ids: Sequence[int]) -> list[str]:
    """Return a signed-in session key per user, in the order given (a browser's cookie),
    with what a sign-in writes in it (accounts.sessions: its clocks), so that a request
    finds it as it would after a real sign-in and does not save it again."""
    from types import SimpleNamespace

    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    from accounts.models import User
    from accounts.sessions import session_mark_signed_in

    users = User.objects.in_bulk(list(user_ids))
    keys = []
    for user_id in user_ids:
        user = users[user_id]
        session = SessionStore()
        session[SESSION_KEY] = str(user.pk)
        session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
        session[HASH_SESSION_KEY] = user.get_session_auth_hash()
        session_mark_signed_in(None, SimpleNamespace(session=session), user)
        session.create()
        keys.append(session.session_key)
    return keys


def api_token(prefix: str, i: int) -> str:
    """Return the API token secret of worker i (knox's shape: 64 hex digits, deterministic)."""
    import hashlib

    return "inbox_" + hashlib.sha256(f"{prefix}-token-{i}".encode()).hexdigest()


# Figures --------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Return the p-th percentile (nearest rank) of values; nan when empty."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def turns_arguments(description: str, *, calls_help: str) -> argparse.Namespace:
    """Parse the options of a bench whose ways take turns round by round: --calls per way
    and round (2,000), --rounds (5), and --quick (300 calls, 3 rounds: a smoke check)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--calls", type=int, default=2000, help=calls_help)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="300 calls, 3 rounds")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.rounds = 300, 3
    return args


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Return rows as a Markdown table (readable as plain text too)."""
    cells = [[str(h) for h in headers]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
             for row in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:,.1f}" if value >= 100 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


TICKS = os.sysconf("SC_CLK_TCK")  # /proc's CPU times are in these


def proc_stats() -> dict[int, tuple[int, int]]:
    """Return {pid: (parent pid, CPU ticks)} of every process; reaped children included.

    A process's ticks are its own user + sys plus cutime + cstime, the ticks of its
    children that exited and were waited for (so a pool process that ended still counts).
    """
    stats = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            text = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # The command name (field 2) may hold spaces: split after its closing parenthesis.
        fields = text[text.rindex(")") + 2:].split()
        stats[int(entry.name)] = (int(fields[1]), sum(int(f) for f in fields[11:15]))
    return stats


def tree_cpu_ms(roots: Sequence[int], stats: dict[int, tuple[int, int]]) -> float:
    """Return the CPU ms so far of the processes roots and every descendant of theirs, from
    proc_stats()' stats (a process gone before stats were read counts nothing)."""
    kids: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        kids.setdefault(parent, []).append(pid)
    total, stack, seen = 0, list(roots), set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += stats.get(pid, (0, 0))[1]
        stack.extend(kids.get(pid, []))
    return total * 1000 / TICKS


def machine_cpu_ms() -> tuple[float, float]:
    """Return the whole machine's (busy, idle) CPU ms so far, every core added (/proc/stat;
    waiting for I/O counts as idle)."""
    fields = [int(f) for f in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    # user nice system idle iowait irq softirq steal; guest time is already in user's.
    return (sum(fields[:8]) - idle) * 1000 / TICKS, idle * 1000 / TICKS


def machine() -> list[tuple[str, str]]:
    """Return what the figures depend on: CPU, cores, RAM, PostgreSQL, Python, load."""
    cpu = platform.processor() or "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    postgres = "unknown (no DATABASE_URL)"
    if os.environ.get("DATABASE_URL"):
        import psycopg

        try:
            with psycopg.connect(_libpq_url(database_url("postgres"))) as conn:
                postgres = conn.execute("SHOW server_version").fetchone()[0]
        except psycopg.Error as exc:
            postgres = f"unreachable: {exc}".splitlines()[0]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return [
        ("CPU", cpu),
        ("cores", str(os.cpu_count())),
        ("RAM", ram),
        ("PostgreSQL", postgres),
        ("Python", platform.python_version()),
        ("OS", f"{platform.system()} {platform.release()}"),
        ("load average (1, 5, 15 min)", load),
        ("git commit", _git_commit()),
    ]


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip()


def machine_print() -> None:
    for name, value in machine():
        print(f"{name}: {value}")


def goal_print(what: str, value: float, goal: float, *, unit: str = "",
               most: bool = False) -> None:
    """Print one goal of issue 15 as a line bench/run_all gathers: the figure, the goal, met.

    most: the goal is a ceiling (at most goal), else a floor (at least goal).
    """
    met = value <= goal if most else value >= goal
    sign = "<=" if most else ">="
    print(f"GOAL {what}: {goal_figure(value, goal)}{unit} (goal {sign} {goal:g}{unit}): "
          f"{'met' if met else 'NOT met'}")


def goal_figure(value: float, goal: float) -> str:
    """Return value with two decimals, or as many more (up to six) as it takes to tell it
    from goal: 0.498 against 0.5 printed "0.50" beside "NOT met" (bench/take_next.py,
    2026-12-07), a figure that read as the goal itself."""
    for decimals in range(2, 7):
        figure = f"{value:,.{decimals}f}"
        if value == goal or float(figure.replace(",", "")) != goal:
            return figure
    return figure
