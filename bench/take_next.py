"""Take next at scale: claims per second and latency of the service call, the HTTP
endpoint and the raw SQL limit, side by side, with the same concurrency in the same run.

Usage (PostgreSQL only; makes and drops its own database, inbox_bench_take_next):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python \
        bench/take_next.py [--tasks 1000000] [--skills 100] [--takers 32] [--seconds 15]

Loads --tasks queued tasks spread over --skills pull queues with one INSERT ... SELECT
generate_series (then VACUUM ANALYZE and a CHECKPOINT: no phase meets the load's
flushing), then runs three phases of --seconds each (after --warmup seconds that
are not counted), one after the other on the same database:

- raw: a plain SQL loop, one autocommit statement per claim
  (UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id);
- service: inbox.services.worker_service.task_take_next(worker=...) called in-process;
- http: POST /api/inbox/tasks/next/ (API token sign-in) to the web server production runs
  (docs/OPERATIONS.md: gunicorn with uvicorn's worker serving config.asgi, a pool of 20
  database connections per process), started here with --http-workers processes on the
  same database; --http-server wsgi runs gunicorn's sync workers on config.wsgi instead.
  Each HTTP taker keeps its connection open where the server keeps it (HTTP/1.1).
- http-signin: GET /api/me/ with the same kind of API token to the same server: the
  cheapest request that signs in (Django, DRF, the token's one statement, a small
  answer), the take's request without the take;
- http-floor: GET /healthz (no database, no sign-in) to the same server: what the web
  stack costs before the take does anything. Printed beside the take as ceilings: the
  HTTP take's rate if it cost only the service call plus the floor, and plus the
  signed-in floor.

Every taker is its own OS process with its own database connection (or HTTP
connection): threads would serialise the service call's Python on the GIL and measure
the interpreter, not the inbox. Takers share queues (--share takers per skill), so
SKIP LOCKED is exercised. A worker holds at most their capacity (--capacity: the
product's default, 3, unless asked), so each service or HTTP taker goes through a pool of
its own workers, moving to the next one when the last is full; nobody completes or
releases. A take weighs what its worker already holds, so the capacity decides what a
take costs (--capacity 100, the ceiling, was the bench's setting until 2026-12-03).
Everything (PostgreSQL, gunicorn, the takers) runs on this machine: the figures are
those of the whole box, load generator included.
"""

import argparse
import http.client
import json
import multiprocessing
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    ROOT,
    WEB_SERVERS,
    api_token,
    bench_environment,
    bench_version_record,
    checkpoint,
    cycle,
    free_port,
    goal_print,
    libpq_url,
    machine_cpu_ms,
    machine_print,
    percentile,
    proc_stats,
    scratch_database,
    skills_create,
    table,
    tasks_insert,
    tree_cpu_ms,
    web_wait,
    workers_create,
)

DATABASE = "inbox_bench_take_next"
# Claims each service or HTTP taker may make per phase before its pool of workers is
# full (closed loop on 2 cores: about 1,000 per taker; --quick: 8 takers for 5 s).
CLAIMS_PER_TAKER = 1_500

RAW_TAKE = """
UPDATE inbox_task
   SET state = 'in_progress', assignee_id = %(worker)s, version = version + 1,
       work_deadline = now() + interval '30 minutes'
 WHERE id = (SELECT id FROM inbox_task
              WHERE skill_id = %(skill)s AND state = 'queued' AND min_proficiency <= 3
              ORDER BY priority DESC, created_at
              LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id
"""

# --quick: small sizes for a smoke check in a minute or two (bench/run_all --quick).
QUICK = {"tasks": 100_000, "skills": 4, "takers": 8, "seconds": 5.0, "warmup": 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--skills", type=int, default=100)
    parser.add_argument("--takers", type=int, default=32)
    parser.add_argument("--share", type=int, default=2,
                        help="takers per queue (skill); the takers use takers/share skills")
    parser.add_argument("--seconds", type=float, default=15.0, help="measured, per phase")
    parser.add_argument("--warmup", type=float, default=2.0, help="not counted, per phase")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="claims/s offered by all takers together, paced; "
                             "0 (default): each takes again as soon as it has its task")
    parser.add_argument("--http-workers", type=int, default=2 * (os.cpu_count() or 1) + 1)
    parser.add_argument("--http-server", choices=sorted(WEB_SERVERS), default="asgi",
                        help="asgi (default): production's gunicorn + uvicorn worker on "
                             "config.asgi; wsgi: gunicorn sync workers on config.wsgi")
    parser.add_argument("--capacity", type=int, default=0,
                        help="each worker's capacity, the tasks they hold before the "
                             "taker moves on (0, default: the product's default, "
                             "accounts.User.capacity)")
    parser.add_argument("--workers-per-taker", type=int, default=0,
                        help=f"pool of workers per service/HTTP taker, each taking up to "
                             f"their capacity (0, default: enough for {CLAIMS_PER_TAKER:,} "
                             f"claims)")
    parser.add_argument("--paced-rate", type=float, default=500.0,
                        help="claims/s of the paced phase: the service call paced at this "
                             "rate in all, after the closed-loop phases (its p99 goal)")
    parser.add_argument("--phases", default="raw,service,http,http-signin,http-floor,paced")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also profile N service calls in one process (cProfile)")
    parser.add_argument("--profile-http", type=int, default=0, metavar="N",
                        help="also profile N HTTP takes in one process (Django's test "
                             "client, no server; cProfile)")
    parser.add_argument("--cpu", type=int, default=0, metavar="N",
                        help="also time N service takes and N raw claims one after the "
                             "other in one process: CPU ms per claim, this process and "
                             "its PostgreSQL backend apart")
    parser.add_argument("--cpu-rounds", type=int, default=5, metavar="R",
                        help="--cpu's rounds, the service and the raw claim taking turns: "
                             "each figure is the median of R, with its spread (default 5)")
    parser.add_argument("--instructions", type=int, default=0, metavar="N",
                        help="also count, with valgrind's callgrind, the instructions of "
                             "an HTTP take, of a complete taking the next (then=next) and "
                             "of GET /healthz through Django's WSGI "
                             "handler in one process: a run of 100 requests and one of "
                             "100 + N, the difference over N (needs the http phase)")
    parser.add_argument("--instructions-child", nargs=3, metavar=("PATH", "CALLS", "CAPACITY"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--quick", action="store_true",
                        help=f"small sizes for a smoke check: {QUICK} (explicit options win)")
    if "--quick" in sys.argv[1:]:
        parser.set_defaults(**QUICK)
    args = parser.parse_args()
    if args.instructions_child:
        instructions_child(*args.instructions_child)
        return
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = set(phases) - {"raw", "service", "http", "http-signin", "http-floor", "paced"}
    if unknown:
        parser.error(f"unknown phases: {sorted(unknown)}")

    bench_environment()
    machine_print()
    with scratch_database(DATABASE, keep=args.keep):
        results = run(args, phases)
    report(args, results)
    failed = {phase: dict(r["errors"]) for phase, r in results.items() if r["errors"]}
    if failed:
        # Closed loop or paced, a take never fails here: errors make the figures invalid.
        raise SystemExit(f"Errors during the run, figures not valid: {failed} (QueueEmpty: "
                         "the queues ran dry; raise --tasks, or lower --seconds or --share)")


def run(args: argparse.Namespace, phases: list[str]) -> dict[str, dict]:
    from django.db import connection, connections

    skills = skills_create(args.skills)
    bench_version_record()
    started = time.perf_counter()
    with connection.cursor() as cursor:
        tasks_insert(cursor, count=args.tasks, skill_id=cycle(skills), history=True)
        cursor.execute("VACUUM ANALYZE inbox_task")
    checkpoint()
    print(f"\n{args.tasks:,} queued tasks over {args.skills} skills loaded in "
          f"{time.perf_counter() - started:.1f} s")
    taker_skill = [skills[(i // args.share) % len(skills)] for i in range(args.takers)]
    from accounts.models import User

    # The product's default unless asked: what a worker holds decides what their take
    # weighs (the capacity check sums the weights of the tasks they hold).
    args.capacity = args.capacity or User._meta.get_field("capacity").default
    per_taker = args.workers_per_taker or -(-CLAIMS_PER_TAKER // args.capacity)
    pools: dict[str, list[list[int]]] = {}
    for phase in phases:
        if phase == "http-floor":
            pools[phase] = [[] for _ in range(args.takers)]  # no worker: nobody signs in
            continue
        signs_in = phase in ("http", "http-signin")
        ids = workers_create(
            # A signed-in floor's taker signs in as one worker: it takes nothing.
            args.takers * (1 if phase in ("raw", "http-signin") else per_taker),
            prefix=f"{phase}-", skills_of=lambda i: [taker_skill[i % args.takers]],
            capacity=args.capacity, api_tokens=signs_in,
        )
        # Worker i belongs to taker i % takers (so it holds that taker's skill); an HTTP
        # taker knows its workers by their API tokens.
        pools[phase] = [
            [api_token(f"{phase}-", i) for i in range(t, len(ids), args.takers)]
            if signs_in else ids[t::args.takers]
            for t in range(args.takers)
        ]
    with connection.cursor() as cursor:
        # Statistics of every table, as autovacuum keeps them in production: the workers,
        # their skills and tokens were written after the tasks' ANALYZE above.
        cursor.execute("ANALYZE")
    print(f"{args.takers} takers, {args.share} per queue, on "
          f"{len(set(taker_skill))} skills; "
          f"{per_taker} workers per service/HTTP taker, each taking up to their capacity "
          f"({args.capacity})")
    queries = service_queries(pools)
    if queries is not None:
        print(f"service call: {queries} SQL statements per take (one call, counted)")
    if args.instructions:
        # First: its takes find tasks with only their receive event, as the http phase
        # does (--cpu's rounds leave tasks taken and released, with longer histories).
        instructions_count(pools, args.instructions, args.capacity)
    if args.cpu:
        cpu_split(pools, taker_skill, args.cpu, args.capacity, rounds=args.cpu_rounds)
    if args.profile:
        profile_service(pools, args.profile, args.capacity)
    if args.profile_http:
        profile_http(pools, args.profile_http, args.capacity)

    from django.utils import timezone

    since = timezone.now()
    results = {}
    for phase in phases:
        connections.close_all()  # Each forked taker opens its own connection.
        server = (gunicorn_start(args.http_workers, args.http_server)
                  if phase.startswith("http") else None)
        try:
            results[phase] = run_phase(phase, args, pools[phase], taker_skill,
                                       port=server[1] if server else 0,
                                       web=server[0].pid if server else None)
        finally:
            if server:
                gunicorn_stop(server[0])
        r = results[phase]
        print(f"{phase}: {r['claims']:,} claims in {args.seconds:.0f} s; "
              f"{sum(r['errors'].values())} errors {dict(r['errors']) or ''}")
    check_claims(results, since)
    return results


def service_queries(pools: dict[str, list[list[int]]]) -> int | None:
    """Count the statements of one service take (by a spare worker, released after)."""
    if "service" not in pools:
        return None
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from accounts.models import User
    from inbox.services import worker as worker_service

    worker = User.objects.get(pk=pools["service"][0][-1])
    with CaptureQueriesContext(connection) as captured:
        task = worker_service.task_take_next(worker=worker)
    worker_service.task_release(worker=worker, task_id=task.pk)
    return len(captured.captured_queries)


def _backend_cpu_ms(cursor) -> float:
    """CPU ms (user + system) used so far by the PostgreSQL backend of cursor's
    connection, from /proc: the server runs on this machine."""
    cursor.execute("SELECT pg_backend_pid()")
    fields = Path(f"/proc/{cursor.fetchone()[0]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / os.sysconf("SC_CLK_TCK")


def cpu_split(pools: dict[str, list[list[int]]], taker_skill: list[int], calls: int,
              capacity: int, *, rounds: int = 5) -> None:
    """Take calls tasks with the service and calls with the raw statement, one after the
    other in this process (no concurrency: nothing queues), rounds times taking turns, and
    print each one's CPU per claim, this process and its PostgreSQL backend apart: the
    median of the rounds and their spread (on a shared machine one round's figure may be
    off by half). The takes are given back after each round.

    With the http phase, each round also takes calls tasks with POST /api/inbox/tasks/next/
    and makes calls GET /api/me/ (signed in with the same tokens: the take's request
    without the take) and calls GET /healthz, all through Django's WSGI handler in this
    process (every middleware, DRF, the service; no server, no socket, no connection
    pool): what the web adds to a take apart from the server and from the machine's other
    load."""
    import psycopg
    from django.db import connection

    from inbox.services import worker as worker_service

    if "service" not in pools or "raw" not in pools:
        print("--cpu needs the raw and service phases")
        return
    workers = _service_workers(pools)
    _room_check("--cpu", calls, holders=len(workers), capacity=capacity)
    tokens = _http_tokens(pools)
    if tokens:
        # The last three warm up with one take each (_cpu_http_round).
        _room_check("--cpu (http)", calls, holders=len(tokens) - 3, capacity=capacity)
    figures: dict[str, list[tuple[float, float]]] = {"service call": []}
    if tokens:
        figures.update({"HTTP take in-process (WSGI handler)": [],
                        "GET /api/me/ in-process (WSGI handler)": [],
                        "GET /healthz in-process (WSGI handler)": []})
    figures["raw SQL claim"] = []
    with psycopg.connect(libpq_url(), autocommit=True) as conn, conn.cursor() as raw:
        params = {"worker": pools["raw"][0][0], "skill": taker_skill[0]}
        for _ in range(rounds):
            with connection.cursor() as cursor:
                taken = []
                backend, client = _backend_cpu_ms(cursor), time.process_time()
                for n in range(calls):
                    worker = workers[n // capacity]  # Each up to their capacity.
                    taken.append((worker, worker_service.task_take_next(worker=worker).pk))
                client = (time.process_time() - client) * 1000 / calls
                figures["service call"].append(
                    (client, (_backend_cpu_ms(cursor) - backend) / calls))
            for worker, task_id in taken:
                worker_service.task_release(worker=worker, task_id=task_id)
            if tokens:
                _cpu_http_round(figures, tokens, calls, capacity)
            claimed = []
            backend, client = _backend_cpu_ms(raw), time.process_time()
            for _ in range(calls):
                claimed.append(raw.execute(RAW_TAKE, params).fetchone()[0])
            client = (time.process_time() - client) * 1000 / calls
            figures["raw SQL claim"].append((client, (_backend_cpu_ms(raw) - backend) / calls))
            raw.execute("UPDATE inbox_task SET state = 'queued', assignee_id = NULL, "
                        "work_deadline = NULL WHERE id = ANY(%s)", [claimed])
    print(f"\nCPU per claim, {calls:,} claims one after the other in one process, "
          f"{rounds} rounds taking turns (median, and the rounds' spread):")
    print(table(["path", "client CPU ms", "PostgreSQL CPU ms", "total"],
                cpu_rows(figures)))


def _http_tokens(pools: dict[str, list[list[int]]]) -> list[str]:
    """The http phase's API tokens, every taker's pool in turn (none without the phase)."""
    return [token for pool in pools.get("http", []) for token in pool]


def _tokens_noted_now(cursor) -> None:
    """Note every token as just used, as at its creation (workers_create): a request
    after the first minute would otherwise write its token's note once, which a token in
    steady use writes once a minute."""
    cursor.execute("UPDATE accounts_apitoken SET last_used_at = now()")


def _cpu_http_round(figures: dict[str, list[tuple[float, float]]], tokens: list[str],
                    calls: int, capacity: int) -> None:
    """One round of --cpu's in-process HTTP rows: calls takes by the http phase's workers
    (each up to their capacity; the tasks cancelled after), then calls GET /api/me/ with
    the same tokens, then calls GET /healthz."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.db import connection

    handler = WSGIHandler()
    # The connection lives through the round (request_finished would close it once
    # CONN_MAX_AGE passed): its backend's CPU is read before and after.
    connection.ensure_connection()
    connection.close_at = None
    with connection.cursor() as cursor:
        _tokens_noted_now(cursor)
    # Warm: the URL resolver, DRF's settings, the first plans.
    warm = [_wsgi_call(handler, "POST", "/api/inbox/tasks/next/", token=token)
            for token in tokens[-3:]]

    def noted(path: str | None, since: tuple[float, float] | None) -> tuple[float, float]:
        """Add path's row: CPU per call, this process's and its backend's, since the mark
        since; return a new mark (backend CPU, process CPU). One backend through the round
        (close_at cleared above)."""
        with connection.cursor() as cursor:
            if path is not None:
                figures[f"{path} in-process (WSGI handler)"].append(
                    ((time.process_time() - since[1]) * 1000 / calls,
                     (_backend_cpu_ms(cursor) - since[0]) / calls))
            return _backend_cpu_ms(cursor), time.process_time()

    mark = noted(None, None)
    taken = [_wsgi_call(handler, "POST", "/api/inbox/tasks/next/", token=tokens[n // capacity])
             for n in range(calls)]
    mark = noted("HTTP take", mark)
    for n in range(calls):
        _wsgi_call(handler, "GET", "/api/me/", token=tokens[n // capacity])
    mark = noted("GET /api/me/", mark)
    for _ in range(calls):
        _wsgi_call(handler, "GET", "/healthz")
    noted("GET /healthz", mark)
    # Taken out of the queues for good, as the raw claims are put back: released, they
    # would come back with a longer history (a longer answer) each round. The workers are
    # free again for the next round.
    ids = [json.loads(content)["id"] for content in warm + taken]
    with connection.cursor() as cursor:
        cursor.execute("UPDATE inbox_task SET state = 'cancelled' WHERE id = ANY(%s::uuid[])",
                       [ids])


# The run every --instructions count subtracts: its requests, and what starting costs.
INSTRUCTIONS_BASE = 100
INSTRUCTIONS_PATHS = {"take": "HTTP POST /api/inbox/tasks/next/",
                      "decide": "HTTP POST /api/inbox/tasks/<id>/complete/, then=next",
                      "healthz": "GET /healthz"}
# A decision's answer in the bench process's form (bench._common.BENCH_SPEC: approve-reject).
DECIDE_BODY = json.dumps({"answer": {"decision": "approve"}, "then": "next"}).encode()


def instructions_count(pools: dict[str, list[list[int]]], calls: int, capacity: int) -> None:
    """Count the instructions of one HTTP take, of one complete that takes the next (a
    reviewer's "Complete and next", one request per task's life) and of one GET /healthz,
    each through Django's WSGI handler in a process of its own run under valgrind's
    callgrind: a run of
    INSTRUCTIONS_BASE requests and one of INSTRUCTIONS_BASE + calls, the difference over
    calls. An instruction count does not move with the machine's other load or its clock,
    where CPU time on a shared machine moves by a fifth between two runs of the same code:
    it tells two commits apart by a few per cent. The children start with
    PYTHONHASHSEED=0, so two runs of one commit count the same to a few in ten thousand."""
    import shutil

    from django.db import connection, connections

    tokens = _http_tokens(pools)
    if not tokens:
        print("--instructions needs the http phase")
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (Debian's package valgrind)")
    _room_check("--instructions", INSTRUCTIONS_BASE + calls + 3, holders=len(tokens),
                capacity=capacity)
    counts = {}
    for path in INSTRUCTIONS_PATHS:
        for n in (INSTRUCTIONS_BASE, INSTRUCTIONS_BASE + calls):
            with connection.cursor() as cursor:
                # Each child's workers free and their tokens noted as just used.
                cursor.execute("UPDATE inbox_task SET state = 'cancelled' "
                               "WHERE state = 'in_progress'")
                _tokens_noted_now(cursor)
            connections.close_all()
            counts[path, n] = _callgrind_total(path, n, capacity)
    print(f"\nInstructions per request (valgrind --tool=callgrind; runs of "
          f"{INSTRUCTIONS_BASE} and {INSTRUCTIONS_BASE + calls} requests in one process "
          f"each, the difference over {calls}):")
    per = {path: (counts[path, INSTRUCTIONS_BASE + calls] - counts[path, INSTRUCTIONS_BASE])
           / calls for path in INSTRUCTIONS_PATHS}
    print(table(["request", "instructions", "ratio to GET /healthz"],
                [[INSTRUCTIONS_PATHS[path], f"{per[path]:,.0f}",
                  f"{per[path] / per['healthz']:.2f}x"] for path in INSTRUCTIONS_PATHS]))


def _callgrind_total(path: str, calls: int, capacity: int) -> int:
    """Run instructions_child under callgrind; return the instructions it counted."""
    with tempfile.TemporaryDirectory() as directory:
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={directory}/out",
             sys.executable, str(Path(__file__).resolve()), "--instructions-child", path,
             str(calls), str(capacity)],
            env={**os.environ, "PYTHONHASHSEED": "0"}, capture_output=True, text=True,
            check=False)
        return callgrind_collected(done.stderr, what=f"--instructions {path} {calls}",
                                   returncode=done.returncode)


def callgrind_collected(stderr: str, *, what: str, returncode: int = 0) -> int:
    """Return the instruction count callgrind printed ("Collected : N"); exit if none."""
    found = re.search(r"^==\d+== Collected : (\d+)$", stderr, re.MULTILINE)
    if returncode != 0 or found is None:
        raise SystemExit(f"{what} failed (exit {returncode}): {stderr[-1500:]}")
    return int(found.group(1))


def instructions_child(path: str, calls: str, capacity: str) -> None:
    """--instructions' child: calls requests of path ("take", "decide" or "healthz")
    through Django's WSGI handler in this process, on the database DATABASE_URL names,
    after the web's own start (config.startup.web_warm) and three requests to warm up.
    Each take by the http phase's workers, each up to their capacity; each decision by the
    first of them, who takes one task first and then completes the task held, taking the
    next in the same request."""
    import django

    django.setup()
    from django.core.handlers.wsgi import WSGIHandler

    from config.startup import web_warm

    web_warm()
    handler = WSGIHandler()
    tokens = (api_token("http-", i) for i in range(10**9))
    token, each = None, int(capacity)
    if path == "decide":
        token = next(tokens)
        held = json.loads(_wsgi_call(handler, "POST", "/api/inbox/tasks/next/",
                                     token=token))["id"]
    for n in range(3 + int(calls)):
        if path == "decide":
            answer = json.loads(_wsgi_call(handler, "POST",
                                           f"/api/inbox/tasks/{held}/complete/",
                                           token=token, body=DECIDE_BODY))
            if answer["next"] is None:
                raise SystemExit(f"--instructions decide: nothing taken after the "
                                 f"complete: {answer.get('next_detail')}")
            held = answer["next"]["id"]
        elif path == "take":
            if n % each == 0:
                token = next(tokens)
            _wsgi_call(handler, "POST", "/api/inbox/tasks/next/", token=token)
        else:
            _wsgi_call(handler, "GET", "/healthz")


def _wsgi_call(handler: object, method: str, path: str, *, token: str | None = None,
               body: bytes | None = None) -> bytes:
    """Send one request to a WSGI handler as a server would (the response read and
    closed, which ends the request: request_finished); return its body; exit unless it
    answers 200. A POST's body is {} unless given."""
    import io

    if body is None:
        body = b"{}" if method == "POST" else b""
    environ = {
        "REQUEST_METHOD": method, "PATH_INFO": path, "SCRIPT_NAME": "", "QUERY_STRING": "",
        "SERVER_NAME": "127.0.0.1", "SERVER_PORT": "80", "SERVER_PROTOCOL": "HTTP/1.1",
        "HTTP_HOST": "127.0.0.1", "REMOTE_ADDR": "127.0.0.1", "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(body), "wsgi.errors": sys.stderr,
        "CONTENT_LENGTH": str(len(body)), "CONTENT_TYPE": "application/json",
    }
    if token is not None:
        environ["HTTP_AUTHORIZATION"] = f"Token {token}"
    statuses = []
    response = handler(environ, lambda status, headers, exc_info=None: statuses.append(status))
    try:
        content = b"".join(response)
    finally:
        response.close()
    if not statuses[0].startswith("200"):
        raise SystemExit(f"In-process request: {method} {path} answered {statuses[0]}: "
                         f"{content[:200]!r}")
    return content


def cpu_rows(figures: dict[str, list[tuple[float, float]]]) -> list[list[str]]:
    """Rows of --cpu's table: per path, the median client, server and total CPU ms of its
    rounds, each with its spread, and the total's ratio to the last path's (the raw
    claim's), round by round."""
    base = [client + server for client, server in list(figures.values())[-1]]
    rows = []
    for path, rounds in figures.items():
        cells = [path]
        for values in ([c for c, _ in rounds], [s for _, s in rounds],
                       [c + s for c, s in rounds]):
            cells.append(f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})")
        ratios = [(c + s) / b for (c, s), b in zip(rounds, base, strict=True)]
        cells[-1] += f", {statistics.median(ratios):.2f}x raw"
        rows.append(cells)
    return rows


def _service_workers(pools: dict[str, list[list[int]]]) -> list:
    """Return the service phase's workers, every taker's pool (none without the phase)."""
    from accounts.models import User

    return list(User.objects.filter(pk__in=[w for p in pools.get("service", []) for w in p]))


def _room_check(option: str, calls: int, *, holders: int, capacity: int) -> None:
    """Exit unless holders workers, each taking up to capacity, can take calls tasks."""
    if calls > holders * capacity:
        raise SystemExit(f"{option} {calls}: its workers hold only {holders * capacity:,} "
                         "tasks (raise --workers-per-taker)")


def profile_service(pools: dict[str, list[list[int]]], calls: int, capacity: int) -> None:
    """Profile calls service takes in this process and print the costliest functions."""
    import cProfile
    import pstats

    from inbox.services import worker as worker_service

    workers = _service_workers(pools)
    if not workers:
        print("--profile needs the service phase")
        return
    _room_check("--profile", calls, holders=len(workers), capacity=capacity)
    taken = []
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    for n in range(calls):
        worker = workers[n // capacity]  # Each up to their capacity.
        taken.append((worker, worker_service.task_take_next(worker=worker)))
    profiler.disable()
    elapsed = time.perf_counter() - started
    print(f"\nprofile: {calls} service takes, one process, {elapsed / calls * 1000:.2f} ms "
          "each (under cProfile); costliest by cumulative time:")
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(25)
    for worker, task in taken:  # Give them back: the phases start from empty workers.
        worker_service.task_release(worker=worker, task_id=task.pk)


def profile_http(pools: dict[str, list[list[int]]], calls: int, capacity: int) -> None:
    """Profile calls HTTP takes in this process (the WSGI handler, every middleware, DRF
    and the service, without a server or a socket) and print the costliest functions."""
    import cProfile
    import pstats

    from django.test import Client

    from accounts.models import User
    from inbox.services import worker as worker_service

    tokens = _http_tokens(pools)
    if not tokens:
        print("--profile-http needs the http phase")
        return
    client = Client(HTTP_HOST="127.0.0.1")  # The host the HTTP phase sends (ALLOWED_HOSTS).
    headers = [{"HTTP_AUTHORIZATION": f"Token {token}"} for token in tokens]
    # The first five warm up with one take each; the others take up to their capacity.
    _room_check("--profile-http", calls, holders=len(headers) - 5, capacity=capacity)
    for extra in headers[:5]:  # Warm: the URL resolver, DRF's settings, the first plans.
        assert client.post("/api/inbox/tasks/next/", b"{}", content_type="application/json",
                           **extra).status_code == 200
    profiler = cProfile.Profile()
    started, cpu = time.perf_counter(), time.process_time()
    profiler.enable()
    for n in range(calls):
        # Each worker up to their capacity (the first five took one each to warm up).
        response = client.post("/api/inbox/tasks/next/", b"{}",
                               content_type="application/json",
                               **headers[5 + n // capacity])
        assert response.status_code == 200, response.content[:200]
    profiler.disable()
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    print(f"\nprofile: {calls} HTTP takes in-process, {elapsed / calls * 1000:.2f} ms each, "
          f"{cpu / calls * 1000:.2f} ms CPU (under cProfile); costliest by cumulative time:")
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(40)
    stats.sort_stats("tottime").print_stats(25)
    # Give them back: the phases start from empty workers.
    for user in User.objects.filter(email__startswith="http-"):
        for task in user.held_tasks.all():
            worker_service.task_release(worker=user, task_id=task.pk)


def run_phase(phase: str, args: argparse.Namespace, pool: list[list[int]],
              taker_skill: list[int], *, port: int, web: int | None = None) -> dict:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    start = time.time() + 1.0 + args.takers * 0.02  # Time for every taker to start.
    measure = start + args.warmup
    stop = measure + args.seconds
    target = {"raw": raw_taker, "service": service_taker, "http": http_taker,
              "http-signin": http_signin_taker, "http-floor": http_floor_taker,
              "paced": service_taker}[phase]
    rate = args.paced_rate if phase == "paced" else args.rate
    takers = [
        context.Process(target=target, args=(queue, i, pool[i], taker_skill[i],
                                             (start, measure, stop), port,
                                             args.takers / rate if rate else 0.0,
                                             args.capacity))
        for i in range(args.takers)
    ]
    for taker in takers:
        taker.start()
    cpu = window_cpu([taker.pid for taker in takers], web, (measure, stop))
    outcomes = [queue.get(timeout=stop - time.time() + 120) for _ in takers]
    for taker in takers:
        taker.join(timeout=30)
        if taker.exitcode != 0:
            raise SystemExit(f"A {phase} taker exited with {taker.exitcode}.")
    latencies = [x for o in outcomes for x in o["latencies"]]
    errors: Counter = Counter()
    for o in outcomes:
        errors.update(o["errors"])
    return {"claims": len(latencies), "latencies": latencies, "errors": errors,
            "taken": sum(o["taken"] for o in outcomes), "cpu": cpu}


# How long before a phase ends its CPU is read last (window_cpu): the takers stop at the end.
WINDOW_END_EARLY = 0.5


def window_cpu(takers: list[int], web: int | None,
               window: tuple[float, float]) -> dict[str, float]:
    """Sleep through window (its start and end, time.time()) and return the CPU ms spent
    in it by the takers, the web server's process tree (web: its pid), the PostgreSQL
    backends of the bench database and the whole machine ("busy", "idle": every core).

    The backends are those connected when the window opens: the takers' and the web's,
    connected during the warm-up. PostgreSQL's own background processes (the WAL writer,
    the checkpointer, autovacuum) are in the machine's busy time, not in "postgres".
    The last reading is taken WINDOW_END_EARLY seconds before the window ends, while every
    taker and its backend still runs (a process gone has no CPU left to read), and the
    figures are scaled to the whole window.
    """
    import psycopg

    time.sleep(max(0.0, window[0] - time.time()))
    with psycopg.connect(libpq_url(), autocommit=True) as conn:
        backends = [pid for (pid,) in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()")]
    groups = {"takers": takers, "web": [web] if web else [], "postgres": backends}

    def read() -> dict[str, float]:
        stats = proc_stats()
        busy, idle = machine_cpu_ms()
        return {**{name: tree_cpu_ms(pids, stats) for name, pids in groups.items()},
                "busy": busy, "idle": idle}

    before, began = read(), time.time()
    time.sleep(max(0.0, window[1] - WINDOW_END_EARLY - time.time()))
    after, ended = read(), time.time()
    scale = (window[1] - window[0]) / (ended - began)
    return {name: (after[name] - before[name]) * scale for name in after}


def _loop(queue: multiprocessing.Queue, window: tuple[float, float, float], take,
          interval: float = 0.0) -> None:
    """Call take() from start to stop; record each successful take's latency after measure.

    take() returns True for a claim, False when the taker must stop (out of workers),
    or raises; an exception is counted by its class name and the loop goes on. With an
    interval, takes are paced at one per interval and latency runs from the planned
    start, so a taker that falls behind shows it (no coordinated omission).
    """
    start, measure, stop = window
    latencies: list[float] = []
    errors: Counter = Counter()
    taken = 0
    time.sleep(max(0.0, start - time.time()))
    # Paced takers start spread over one interval, not all at once.
    planned = time.perf_counter() + random.random() * interval
    while True:
        if interval:
            time.sleep(max(0.0, planned - time.perf_counter()))
        began = time.time()
        if began >= stop:
            break
        t0 = planned if interval else time.perf_counter()
        planned += interval
        try:
            ok = take()
        except Exception as exc:  # counted and reported, never hidden
            errors[type(exc).__name__ + (f" {exc}" if isinstance(exc, HttpError) else "")] += 1
            continue
        elapsed = time.perf_counter() - t0
        if not ok:
            errors["out of workers (raise --workers-per-taker)"] += 1
            break
        taken += 1
        if began >= measure:
            latencies.append(elapsed * 1000)
    queue.put({"latencies": latencies, "errors": dict(errors), "taken": taken})


def raw_taker(queue, i, workers, skill, window, port, interval, capacity) -> None:
    import psycopg

    with psycopg.connect(libpq_url(), autocommit=True) as conn:
        params = {"worker": workers[0], "skill": skill}

        def take() -> bool:
            if conn.execute(RAW_TAKE, params).fetchone() is None:
                raise QueueEmpty("queue empty")
            return True

        _loop(queue, window, take, interval)


def service_taker(queue, i, workers, skill, window, port, interval, capacity) -> None:
    from accounts.models import User
    from inbox.services import worker as worker_service

    pool = list(User.objects.filter(pk__in=workers).order_by("pk"))
    state = {"worker": 0, "held": 0}

    def take() -> bool:
        if state["held"] >= capacity:
            state["worker"] += 1
            state["held"] = 0
        if state["worker"] >= len(pool):
            return False
        worker_service.task_take_next(worker=pool[state["worker"]])
        state["held"] += 1
        return True

    _loop(queue, window, take, interval)


def http_taker(queue, i, workers, skill, window, port, interval, capacity) -> None:
    tokens = workers
    state = {"worker": 0, "held": 0}
    # One connection, kept open as an API client's is; http.client opens a new one by
    # itself when the server closed the last (gunicorn's sync workers close each).
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def take() -> bool:
        if state["held"] >= capacity:
            state["worker"] += 1
            state["held"] = 0
        if state["worker"] >= len(tokens):
            return False
        _http(conn, "POST", "/api/inbox/tasks/next/", body=b"{}", headers={
            "Authorization": f"Token {tokens[state['worker']]}",
            "Content-Type": "application/json"})
        state["held"] += 1
        return True

    _loop(queue, window, take, interval)


def http_signin_taker(queue, i, workers, skill, window, port, interval, capacity) -> None:
    _get_loop(queue, window, port, interval, "/api/me/",
              {"Authorization": f"Token {workers[0]}"})


def http_floor_taker(queue, i, workers, skill, window, port, interval, capacity) -> None:
    _get_loop(queue, window, port, interval, "/healthz")


def _get_loop(queue, window, port: int, interval: float, path: str,
              headers: dict | None = None) -> None:
    """A floor's taker: GET path on one kept connection, again and again (it takes nothing)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def take() -> bool:
        _http(conn, "GET", path, headers=headers)
        return True

    _loop(queue, window, take, interval)


def _http(conn: http.client.HTTPConnection, method: str, path: str, *, body: bytes = b"",
          headers: dict | None = None) -> None:
    """Send one request on conn; raise HttpError unless it answers 200. A failed exchange
    closes the connection (the next request opens a new one) and raises."""
    try:
        conn.request(method, path, body=body or None,
                     headers={"Host": "127.0.0.1", **(headers or {})})
        response = conn.getresponse()
        answer = response.read()
    except Exception:
        conn.close()
        raise
    if response.status != 200:
        raise HttpError(f"{response.status} {answer[:120]!r}")


class HttpError(Exception):
    pass


class QueueEmpty(Exception):
    pass


def gunicorn_start(workers: int, server: str = "asgi") -> tuple[subprocess.Popen, int]:
    """Start gunicorn on a free port against the bench database; wait until it answers."""
    port = free_port()
    application, worker_class, environment = WEB_SERVERS[server]
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "gunicorn"), application,
         "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--worker-class",
         worker_class, "--log-level", "warning", "--timeout", "120"],
        cwd=ROOT, env={**os.environ, **environment},
    )
    try:
        web_wait(port, process)
        # Listening is the master's socket: the answer waits for a worker to boot.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/api/inbox/queues/", headers={"Host": "127.0.0.1"})
        status = conn.getresponse().status
        conn.close()
        if status not in (401, 403):  # Up, and refusing an anonymous caller as it should.
            raise SystemExit(f"gunicorn answered {status} to an anonymous GET")
    except BaseException:
        process.terminate()
        raise
    print(f"gunicorn: {workers} {worker_class} workers on {application}, port {port}")
    return process, port


def gunicorn_stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def check_claims(results: dict[str, dict], since: object) -> None:
    """Check the claims counted are the tasks taken since the phases began, each once."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM inbox_task WHERE state = 'in_progress'")
        in_progress = cursor.fetchone()[0]
        # The raw phase writes no event; the service and HTTP phases one per take.
        cursor.execute("SELECT count(*), count(DISTINCT task_id) FROM inbox_taskevent "
                       "WHERE action = 'take_next' AND at >= %s", [since])
        events, distinct = cursor.fetchone()
    # The floors' requests take nothing.
    taking = {phase: r for phase, r in results.items()
              if phase not in ("http-floor", "http-signin")}
    counted = sum(r["taken"] for r in taking.values())
    evented = sum(r["taken"] for phase, r in taking.items() if phase != "raw")
    print(f"check: {counted:,} claims counted (warm-up included), {in_progress:,} tasks in "
          f"progress, {events:,} take_next events on {distinct:,} distinct tasks")
    if counted != in_progress or events != distinct or events != evented:
        raise SystemExit("The claims counted do not match the database: figures not valid.")


def report(args: argparse.Namespace, results: dict[str, dict]) -> None:
    names = {"raw": "raw SQL limit (UPDATE ... SKIP LOCKED)",
             "service": "service call worker_service.task_take_next",
             "http": f"HTTP POST /api/inbox/tasks/next/ ({args.http_server})",
             "http-signin": f"HTTP GET /api/me/, the signed-in floor ({args.http_server})",
             "http-floor": f"HTTP GET /healthz, the floor ({args.http_server})",
             "paced": f"service call, paced at {args.paced_rate:g}/s in all"}
    rows = []
    for phase, r in results.items():
        lat = r["latencies"]
        rows.append([names[phase], r["claims"] / args.seconds, percentile(lat, 50),
                     percentile(lat, 95), percentile(lat, 99), max(lat, default=float("nan")),
                     sum(r["errors"].values())])
    pace = f"paced at {args.rate:g} claims/s in all" if args.rate else "closed loop, no pause"
    cpu_rows = []
    for phase, r in results.items():
        if not r["claims"]:
            continue
        cpu, claims = r["cpu"], r["claims"]
        listed = cpu["takers"] + cpu["web"] + cpu["postgres"]
        cpu_rows.append([names[phase], cpu["takers"] / claims, cpu["web"] / claims,
                         cpu["postgres"] / claims, (cpu["busy"] - listed) / claims,
                         cpu["busy"] / claims,
                         f"{100 * cpu['idle'] / (cpu['busy'] + cpu['idle']):.0f} %"])
    print(f"\nTake next: {args.tasks:,} queued tasks, {args.skills} skills, {args.takers} "
          f"concurrent takers ({pace}), {args.seconds:.0f} s per phase "
          f"(+{args.warmup:.0f} s warm-up)\n")
    print(table(["path", "claims/s", "p50 ms", "p95 ms", "p99 ms", "max ms", "errors"], rows))
    if cpu_rows:
        # What each claim cost the machine while the phase ran, by process group: the
        # closed loop's budget is the machine's CPU, so this is what its rate divides.
        print("\nCPU ms per claim in the measured seconds (the whole machine; rest: "
              "PostgreSQL's background processes, the kernel's workers, everything else):\n")
        print(table(["path", "takers", "web server", "PostgreSQL backends", "rest",
                     "machine busy", "machine idle"], cpu_rows))
    if "raw" in results and "service" in results and results["service"]["claims"]:
        raw, service = results["raw"], results["service"]
        p99 = percentile(service["latencies"], 99) / percentile(raw["latencies"], 99)
        print(f"\nservice/raw: throughput {service['claims'] / max(raw['claims'], 1):.2f}x, "
              f"p99 latency {p99:.1f}x")
    raw = results.get("raw", {}).get("claims", 0)
    # CPU is the closed loop's budget: a take over HTTP costs at least the service call
    # plus the web stack's floor, so its rate is at most the two combined. A take over the
    # API signs in too: GET /api/me/ (the sign-in, DRF, a small answer) plus the service
    # call is as cheap as it can be while it goes through Django's and DRF's handling.
    for floor, ceiling_of in (("http-floor", "ceiling (service call + the /healthz floor"),
                              ("http-signin", "ceiling signed in (service call + GET /api/me/")):
        if raw and {"service", floor} <= results.keys() and results[floor]["claims"]:
            ceiling = 1 / (1 / results["service"]["claims"] + 1 / results[floor]["claims"])
            print(f"HTTP take's {ceiling_of}, their costs added): "
                  f"{ceiling / args.seconds:,.0f}/s, {ceiling / raw:.2f}x raw")
    for phase, goal in (("service", 0.5), ("http", 0.25)):
        if phase in results and raw:
            goal_print(f"take next {phase} / raw claims per second, closed loop",
                       results[phase]["claims"] / raw, goal, unit="x")
    if "paced" in results:
        lat = results["paced"]["latencies"]
        goal_print(f"take next service p99 paced at {args.paced_rate:g}/s",
                   percentile(lat, 99), 25.0, unit="ms", most=True)


if __name__ == "__main__":
    main()
