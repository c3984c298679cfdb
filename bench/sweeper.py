"""The sweeper at scale: deadlines handled per second and lateness, as non-due tasks grow.

Usage (PostgreSQL only; makes and drops its own database, inbox_bench_sweeper):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python \
        bench/sweeper.py [--sizes 100000,1000000] [--due 100000] [--python-path]

For each size: load that many non-due tasks (60% completed, 20% queued, 10% in progress,
10% offered, every clock running in the future) and --due tasks whose deadline has
passed, a third each on the offer, work and overall clock (policy abort), with one
INSERT ... SELECT generate_series each, then VACUUM ANALYZE and a CHECKPOINT (another
before the steady phase: no phase is measured while what came before it is still being
flushed, see _common.checkpoint). Then run the clock process's loop
(inbox.services.clock.deadlines_round, as deadlines_wait runs it: sweep when a deadline
has passed, then sleep until the next, at most INBOX_CLOCK_MAX_WAIT_MS; no pause while a
batch comes back full), optionally under load
in processes of their own: --takers workers taking and releasing tasks as fast as they
can (bench/_taker.py), --intake envelopes a second through the intake and --callbacks
threads completing tasks and sending their callbacks (bench/_load.py); --clock-nice runs
the sweeping loop ahead of them, as INBOX_CLOCK_NICE does for the clock process:

- backlog: until every due deadline is handled. Figures: deadlines per second of wall
  time and of the rounds' time (sweeps and the next deadline's reads, not the sleeps),
  and how long after the first sweep each was handled.
- steady: --steady-rate deadlines fall due per second for --steady-seconds (clocks of
  non-due tasks moved to fall due then); lateness is handled-at (the time of the timeout's
  TaskEvent) minus due-at (the deadline it had), p50/p99.

Nothing reaches Step Functions: aborting writes an Outbox row and enqueues its send on
commit, and the Celery broker here is kombu's in-process memory transport (nothing
consumes it); the AWS endpoint is a local port where nothing listens. The run checks
that every outbox row is still pending at the end.
"""

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    bench_environment,
    checkpoint,
    cycle,
    goal_print,
    machine_print,
    percentile,
    scratch_database,
    skills_create,
    table,
    tasks_insert,
    workers_create,
)

DATABASE = "inbox_bench_sweeper"
TIMEOUT_ACTIONS = ["offer_timeout", "work_timeout", "overall_timeout"]

# --quick: small sizes for a smoke check in a minute or two (bench/run_all --quick).
QUICK = {"sizes": "10000,50000", "due": 2000, "steady_rate": 20.0, "steady_seconds": 6.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000,1000000",
                        help="non-due tasks, one run per size (comma-separated)")
    parser.add_argument("--due", type=int, default=100_000, help="deadlines due at the start")
    parser.add_argument("--batch", type=int, default=None,
                        help="rows per clock per sweep (default: inbox.services.clock.BATCH)")
    parser.add_argument("--max-wait", type=float, default=None,
                        help="the clock's longest sleep in seconds (default: the setting's)")
    parser.add_argument("--takers", type=int, default=0,
                        help="threads taking and releasing tasks meanwhile (load)")
    parser.add_argument("--intake", type=float, default=0,
                        help="envelopes a second through the intake meanwhile (load)")
    parser.add_argument("--callbacks", type=int, default=0,
                        help="threads completing tasks and sending callbacks meanwhile (load)")
    parser.add_argument("--clock-nice", type=int, default=0,
                        help="run the sweeping loop at this niceness (as INBOX_CLOCK_NICE)")
    parser.add_argument("--steady-rate", type=float, default=50.0)
    parser.add_argument("--steady-seconds", type=float, default=30.0)
    parser.add_argument("--skills", type=int, default=10)
    parser.add_argument("--profile", action="store_true",
                        help="print a profile (cProfile) of each size's backlog sweep")
    parser.add_argument("--python-path", action="store_true",
                        help="apply the batches in Python (transitions_apply, SQLite's path) "
                             "instead of PostgreSQL's one statement per clock, to compare")
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument("--quick", action="store_true",
                        help=f"small sizes for a smoke check: {QUICK} (explicit options win)")
    if "--quick" in sys.argv[1:]:
        parser.set_defaults(**QUICK)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    bench_environment()
    if args.clock_nice:
        os.nice(args.clock_nice)  # the takers' processes, started later, keep niceness 0
    machine_print()
    with scratch_database(DATABASE, keep=args.keep):
        from django.conf import settings

        from inbox.services import clock as deadlines

        args.batch = args.batch or deadlines.BATCH
        if args.python_path:
            # As on SQLite: clock_apply falls back to transitions_apply when this says None.
            deadlines.clock_rows_applied = lambda **kwargs: None
        args.max_wait = args.max_wait or settings.INBOX_CLOCK_MAX_WAIT_SECONDS
        rows = [run_size(args, size) for size in sizes]
    way = ("in Python (transitions_apply)" if args.python_path
           else "by PostgreSQL (one statement per clock)")
    print(f"\nSweeper, batches applied {way}: {args.due:,} deadlines due "
          "(offer, work, overall/abort, a third each), "
          f"batch {args.batch} per clock, the clock loop (at most {args.max_wait:g} s asleep), "
          f"{args.takers} takers meanwhile, steady {args.steady_rate:g}/s for "
          f"{args.steady_seconds:g} s\n")
    print(table(["non-due tasks", "backlog handled/s (wall)", "handled/s (sweeping)",
                 "backlog drained in s", "steady lateness p50 ms", "p99 ms", "max ms"], rows))
    largest = max(rows, key=lambda row: row[0])
    goal_print(f"sweeper backlog deadlines/s at {largest[0]:,} non-due tasks", largest[1],
               2000.0, unit="/s")
    if len(rows) > 1:
        smallest = min(rows, key=lambda row: row[0])
        # Flat: the largest size's steady p99 lateness within 1.5x of the smallest's.
        goal_print(f"sweeper steady lateness p99, {largest[0]:,} / {smallest[0]:,} non-due",
                   largest[5] / smallest[5], 1.5, unit="x", most=True)


def run_size(args: argparse.Namespace, size: int) -> list:
    from django.db import connection

    print(f"\n=== {size:,} non-due tasks, {args.due:,} due")
    started = time.perf_counter()
    seed(size=size, due=args.due, skills=args.skills)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE inbox_task")
    checkpoint()
    print(f"loaded in {time.perf_counter() - started:.1f} s")

    load = Takers(args.takers, intake=args.intake, callbacks=args.callbacks)
    load.start()
    try:
        if args.profile:
            import cProfile
            import pstats

            profiler = cProfile.Profile()
            profiler.enable()
        backlog = sweep_until(args, expected=args.due, label="backlog")
        if args.profile:
            profiler.disable()
            print(f"profile of the backlog sweep ({args.due:,} deadlines), by cumulative time:")
            stats = pstats.Stats(profiler)
            stats.sort_stats("cumulative").print_stats(35)
            stats.sort_stats("tottime").print_stats(20)
        with connection.cursor() as cursor:
            # How long after the first sweep each backlog deadline was handled.
            cursor.execute(
                "SELECT (extract(epoch FROM e.at - %s) * 1000)::float8 "
                "FROM inbox_taskevent e JOIN bench_due d ON d.task_id = e.task_id "
                "AND d.phase = 'backlog' WHERE e.action = ANY(%s)",
                [backlog["first"], TIMEOUT_ACTIONS])
            reached = [row[0] for row in cursor.fetchall()]
        print(f"backlog: {backlog['handled']:,} handled in {backlog['wall']:.1f} s "
              f"({backlog['sweeps']} sweeps, {backlog['busy']:.1f} s sweeping); reached after "
              f"p50 {percentile(reached, 50) / 1000:.1f} s, "
              f"p99 {percentile(reached, 99) / 1000:.1f} s")

        checkpoint()
        steady_count = steady_schedule(args)
        steady = sweep_until(args, expected=steady_count, label="steady",
                             at_least=args.steady_seconds)
    finally:
        takes = load.stop()
    if args.takers or args.intake or args.callbacks:
        print(f"load meanwhile: {takes}")
    lateness = steady_lateness()
    print(f"steady: {steady['handled']:,} handled; lateness p50 {percentile(lateness, 50):.0f} "
          f"ms, p99 {percentile(lateness, 99):.0f} ms")
    check(expected=args.due + steady_count)
    return [size, backlog["handled"] / backlog["wall"], backlog["handled"] / backlog["busy"],
            backlog["wall"], percentile(lateness, 50), percentile(lateness, 99),
            max(lateness, default=float("nan"))]


def seed(*, size: int, due: int, skills: int) -> None:
    """Replace every task with size non-due and due due ones; record the due deadlines."""
    from django.db import connection

    from accounts.models import Skill, User

    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_due")
        cursor.execute("TRUNCATE inbox_signaloutbox, inbox_taskevent, inbox_outbox, "
                       "inbox_taskpass, inbox_taskmigration, inbox_task")
        cursor.execute("CREATE TABLE bench_due (task_id uuid PRIMARY KEY, "
                       "due_at timestamptz NOT NULL, phase text NOT NULL)")
    if not Skill.objects.exists():
        skills_create(skills, dispatch="pull", prefix="pull")
        skills_create(skills, dispatch="push", prefix="push")
        pull = list(Skill.objects.filter(dispatch="pull").values_list("pk", flat=True))
        workers_create(50, skills_of=lambda i: [pull[i % len(pull)]], capacity=100)
    pull = list(Skill.objects.filter(dispatch="pull").values_list("pk", flat=True))
    push = list(Skill.objects.filter(dispatch="push").values_list("pk", flat=True))
    workers = list(User.objects.values_list("pk", flat=True))
    state = ("CASE WHEN n % 10 < 6 THEN 'completed' WHEN n % 10 < 8 THEN 'queued' "
             "WHEN n % 10 < 9 THEN 'in_progress' ELSE 'offered' END")
    with connection.cursor() as cursor:
        tasks_insert(
            cursor, count=size, state=state,
            skill_id=f"CASE WHEN n % 10 = 9 THEN {cycle(push)} ELSE {cycle(pull)} END",
            assignee_id=f"CASE WHEN n % 10 >= 8 THEN {cycle(workers)} END",
            offer_deadline="CASE WHEN n % 10 = 9 THEN now() + interval '1 hour' END",
            work_deadline="CASE WHEN n % 10 = 8 THEN now() + interval '1 hour' END",
        )
        # Due: n % 3 = 0 offer, 1 work, 2 overall; due times spread over the last minute.
        past = (f"now() - interval '60 seconds' "
                f"+ (n - {size}) * interval '{60 / max(due, 1):.6f} seconds'")
        tasks_insert(
            cursor, count=due, start=size + 1, title="'Due ' || n",
            state="CASE n % 3 WHEN 0 THEN 'offered' WHEN 1 THEN 'in_progress' "
                  "ELSE 'queued' END",
            skill_id=f"CASE WHEN n % 3 = 0 THEN {cycle(push)} ELSE {cycle(pull)} END",
            assignee_id=f"CASE WHEN n % 3 < 2 THEN {cycle(workers)} END",
            offer_deadline=f"CASE WHEN n % 3 = 0 THEN {past} END",
            work_deadline=f"CASE WHEN n % 3 = 1 THEN {past} END",
            overall_deadline=f"CASE WHEN n % 3 = 2 THEN {past} "
                             "ELSE now() + interval '1 day' END",
        )
        cursor.execute(
            "INSERT INTO bench_due SELECT id, CASE state WHEN 'offered' THEN offer_deadline "
            "WHEN 'in_progress' THEN work_deadline ELSE overall_deadline END, 'backlog' "
            "FROM inbox_task WHERE title LIKE 'Due %'")


def steady_schedule(args: argparse.Namespace) -> int:
    """Make running clocks of non-due tasks fall due at steady_rate per second from now."""
    from django.db import connection

    count = int(args.steady_rate * args.steady_seconds)
    step = 1 / args.steady_rate
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH pick AS (SELECT id, row_number() OVER () AS k FROM inbox_task "
            "  WHERE state IN ('queued', 'in_progress', 'offered') AND title LIKE 'Task %%' "
            "  LIMIT %s), "
            "due AS (SELECT id, now() + interval '1 second' + k * make_interval(secs => %s) "
            "  AS at FROM pick), "
            "moved AS (UPDATE inbox_task t SET "
            "  offer_deadline = CASE WHEN t.state = 'offered' THEN due.at "
            "                   ELSE t.offer_deadline END, "
            "  work_deadline = CASE WHEN t.state = 'in_progress' THEN due.at "
            "                  ELSE t.work_deadline END, "
            "  overall_deadline = CASE WHEN t.state = 'queued' THEN due.at "
            "                     ELSE t.overall_deadline END "
            "  FROM due WHERE t.id = due.id RETURNING t.id, due.at) "
            "INSERT INTO bench_due SELECT id, at, 'steady' FROM moved", [count, step])
    return count


class Takers:
    """Load, in processes of their own (not the sweeper's interpreter): takers taking the
    next task and releasing it as fast as they can (bench/_taker.py, up to 8 threads each);
    and, if asked, the intake and callback senders of bench/_load.py."""

    def __init__(self, count: int, *, intake: float = 0, callbacks: int = 0) -> None:
        self.count, self.intake, self.callbacks = count, intake, callbacks
        self.children: list[tuple[str, subprocess.Popen]] = []

    def _spawn(self, name: str, script: str, *args: str) -> None:
        child = subprocess.Popen(
            [sys.executable, str(Path(__file__).with_name(script)), *args],
            stdout=subprocess.PIPE, text=True,
            # Load at the ordinary niceness, whatever the sweeper's (--clock-nice).
            preexec_fn=lambda: os.nice(-os.nice(0)))
        if child.stdout.readline().strip() != "ready":
            raise SystemExit(f"the {name} load process did not start")
        self.children.append((name, child))

    def start(self) -> None:
        if self.intake or self.callbacks:
            from accounts.services import skill_ensure

            skill_ensure(slug="load-pull", name="Load (bench)")
        stamp = int(time.time())
        for number, start in enumerate(range(0, self.count, 8)):
            self._spawn("taker", "_taker.py", str(min(8, self.count - start)),
                        f"taker{stamp}-{number}-")
        if self.intake:
            self._spawn("intake", "_load.py", "intake", str(self.intake))
        if self.callbacks:
            self._spawn("callbacks", "_load.py", "callbacks", str(self.callbacks))

    def stop(self) -> str:
        done: dict[str, int] = {}
        for _, child in self.children:
            child.terminate()
        for name, child in self.children:
            out, _ = child.communicate(timeout=60)
            done[name] = done.get(name, 0) + (int(out.split()[-1]) if out.strip() else 0)
        return ", ".join(f"{name} {count:,}" for name, count in done.items())


def sweep_until(args: argparse.Namespace, *, expected: int, label: str,
                at_least: float = 0.0) -> dict:
    """Run the clock's loop until expected deadlines are handled (and at_least seconds)."""
    from inbox.services import clock

    handled = sweeps = 0
    busy = 0.0
    first = None
    began = time.perf_counter()
    idle_since = None
    while True:
        start = time.perf_counter()
        if first is None:
            from django.utils import timezone

            first = timezone.now()
        # The clock process's round (inbox.services.clock.deadlines_wait): a sweep when
        # a deadline has passed, then at once while a batch came back full, else a sleep
        # until the next deadline, at most max_wait.
        wait, result = clock.deadlines_round(most=args.max_wait, batch=args.batch)
        elapsed = time.perf_counter() - start
        busy += elapsed
        sweeps += bool(result)
        if result.get("failed"):
            raise SystemExit(f"{label}: {result['failed']} timeouts failed: {result}")
        done = sum(result.get(name, 0) for name in ("offer", "work", "overall"))
        handled += done
        if handled >= expected and time.perf_counter() - began >= at_least:
            break
        idle_since = None if done else (idle_since or time.perf_counter())
        if idle_since and time.perf_counter() - idle_since > 10 * args.max_wait + 10:
            raise SystemExit(f"{label}: stuck at {handled:,} of {expected:,} deadlines")
        time.sleep(wait)
    wall = time.perf_counter() - began
    return {"handled": handled, "sweeps": sweeps, "busy": busy, "wall": wall, "first": first}


def steady_lateness() -> list[float]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT (extract(epoch FROM e.at - d.due_at) * 1000)::float8 FROM inbox_taskevent e "
            "JOIN bench_due d ON d.task_id = e.task_id AND d.phase = 'steady' "
            "WHERE e.action = ANY(%s)", [TIMEOUT_ACTIONS])
        return [row[0] for row in cursor.fetchall()]


def check(*, expected: int) -> None:
    """Check each due deadline was handled once and no callback left the building."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*), count(DISTINCT e.task_id) FROM inbox_taskevent e "
                       "JOIN bench_due d ON d.task_id = e.task_id WHERE e.action = ANY(%s)",
                       [TIMEOUT_ACTIONS])
        events, tasks = cursor.fetchone()
        cursor.execute("SELECT count(*) FROM inbox_taskevent WHERE action = ANY(%s)",
                       [TIMEOUT_ACTIONS])
        (all_events,) = cursor.fetchone()
        cursor.execute("SELECT status, count(*) FROM inbox_outbox GROUP BY status")
        outbox = dict(cursor.fetchall())
    print(f"check: {expected:,} deadlines due, {events:,} timeouts on {tasks:,} tasks "
          f"({all_events:,} timeouts in all); outbox {outbox} (pending: nothing was sent)")
    if not (events == tasks == expected == all_events) or set(outbox) - {"pending"}:
        raise SystemExit("The sweeper's work does not match the deadlines: figures not valid.")


if __name__ == "__main__":
    main()
