"""Where a take's PostgreSQL time goes: the server CPU of the take-next function built up
piece by piece, beside the raw claim, in one connection, one after the other.

Usage (PostgreSQL only; makes and drops its own database, inbox_bench_take_pieces):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python \
        bench/take_next_pieces.py [--tasks 300000] [--skills 20] [--calls 2000] [--rounds 5]

PostgreSQL cannot be profiled from Python, so this bench measures instead: each variant is
a PL/pgSQL function (in the session's pg_temp schema, so nothing is installed) that does
what the one before it did and one piece more, and each is timed by the CPU its backend
used (user + system, from /proc: the server runs on this machine) over --calls takes:

1. the raw claim: one UPDATE ... WHERE id = (SELECT ... FOR UPDATE SKIP LOCKED), no function;
2. the same claim inside a function that returns the task's row;
3. + the worker's row lock (active, the worker role), as the real function begins;
4. + the weighted capacity sum over the tasks the worker holds;
5. + the hash-chained event (the SHA-256 of the previous head and the change);
6. the migration's function itself (inbox_take_next_task, migration 0016: + the
   separation-of-duties test), only the task's id read, no history asked (as the page's
   take and a script's call it);
7. the statement inbox.lifecycle.take_next_applied runs for a take that shows nothing
   (the page's take, which redirects; a script's): eight of the task's columns (since
   6f00edd; every one of the 45 before);
8. its statement for a take that shows the task (the API's, a page swapped in place): the
   skill's row joined and the history asked for and answered as JSON.

Pieces 3 to 5 are cut from migration 0012's function, whose statements 0016 keeps (0016
formats the moments once and reads the history only when asked).

Every take takes a task never taken before (no history grows between variants) by a worker
taking up to the product's default capacity in a row (accounts.User.capacity, 3: holding
0 to 2 tasks), as bench/take_next.py's workers do; the variants take turns round by round
(--rounds), so the machine's drift falls on all alike, and the median over rounds is
printed with the spread.
"""

import argparse
import datetime
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    bench_environment,
    bench_version_record,
    checkpoint,
    cycle,
    libpq_url,
    machine_print,
    scratch_database,
    skills_create,
    table,
    tasks_insert,
    workers_create,
)
from take_next import RAW_TAKE, _backend_cpu_ms

DATABASE = "inbox_bench_take_pieces"

HEAD = """
CREATE OR REPLACE FUNCTION pg_temp.take_piece(p_worker bigint, p_skill bigint,
    p_now timestamptz, p_label text, p_label_json text)
RETURNS TABLE (taken inbox_task, taken_history jsonb) LANGUAGE plpgsql ROWS 1 AS $$
DECLARE
    v_task inbox_task;
    v_free integer;
    v_prev text;
    v_deadline timestamptz;
    v_hash text;
    v_event bigint;
BEGIN
"""
PICK = """
    SELECT t.* INTO v_task FROM inbox_task t
     WHERE t.skill_id = p_skill AND t.state = 'queued' AND t.min_proficiency <= 3
     ORDER BY t.priority DESC, t.created_at
     LIMIT 1 FOR UPDATE SKIP LOCKED;
    v_prev := v_task.chain_head;
    v_deadline := p_now + make_interval(secs => v_task.work_seconds);
"""
UPDATE = """
    UPDATE inbox_task
       SET state = 'in_progress', assignee_id = p_worker, offer_deadline = NULL,
           work_deadline = v_deadline, version = version + 1,
           chain_head = COALESCE(v_hash, chain_head)
     WHERE id = v_task.id
    RETURNING * INTO v_task;
"""
TAIL = """
    taken := v_task;
    taken_history := NULL;  -- the shape of the real function's answer, without its history
    RETURN NEXT;
END;
$$;
"""
PIECE_CALL = ("SELECT (r.taken).id FROM pg_temp.take_piece(%(worker)s, %(skill)s, now(), "
              "%(label)s, %(label_json)s) r")
# The migration's function (0016) as inbox.lifecycle.take_next_applied calls it: the moment
# and its isoformat() from the caller; the history only when asked.
FUNCTION = ("inbox_take_next_task(%(worker)s, NULL, %(now)s, %(now_iso)s, %(label)s, "
            "%(label_json)s, false, {history}) r")
FUNCTION_CALL = "SELECT (r.taken).id FROM " + FUNCTION.format(history="false")


def _statement(function: str, start: str, end: str) -> str:
    """Return the statement of function's body from the line beginning with start to the
    line ending with end: the pieces are the migration's own text, never a copy of it."""
    first = function.find(f"    {start}")
    last = function.find(end, first)
    if first < 0 or last < 0:
        raise SystemExit(f"take_next_pieces: no statement {start!r} ... {end!r} in the "
                         "take-next function of migration 0012: update the bench")
    return function[first:last + len(end)] + "\n"


def variants_build() -> list[tuple[str, str | None, str]]:
    """Each variant: its name, the function to create first (or None), a take's statement.

    The worker's lock, the capacity sum, the hash and the event are cut from migration
    0012's function; the claim (by the skill given, as the raw claim does) and its UPDATE
    are the bench's, so that the variants before the hash run without one.
    """
    from importlib import import_module

    from inbox.lifecycle import _TAKE_CALL, _TAKE_STATEMENTS

    function = import_module("inbox.migrations.0012_take_next_history").CREATE
    lock = _statement(function, "SELECT u.capacity INTO v_free", "FOR UPDATE OF u;")
    capacity = _statement(function, "SELECT v_free - COALESCE", "'in_progress');")
    hashed = _statement(function, "v_hash := encode(", "'hex');")
    event = _statement(function, "INSERT INTO inbox_taskevent", "RETURNING id INTO v_event;")
    return [
        ("1. raw claim (one UPDATE ... SKIP LOCKED)", None, RAW_TAKE),
        ("2. the claim in a PL/pgSQL function", HEAD + PICK + UPDATE + TAIL, PIECE_CALL),
        ("3. + the worker's row lock and role", HEAD + lock + PICK + UPDATE + TAIL,
         PIECE_CALL),
        ("4. + the weighted capacity sum", HEAD + lock + capacity + PICK + UPDATE + TAIL,
         PIECE_CALL),
        ("5. + the hash-chained event",
         HEAD + lock + capacity + PICK + hashed + UPDATE + event + TAIL, PIECE_CALL),
        ("6. inbox_take_next_task (+ separation of duties)", None, FUNCTION_CALL),
        # inbox.lifecycle.take_next_applied's own statements (in a caller's transaction:
        # this bench's autocommit statements commit as the raw claim's do).
        ("7. as a take that shows nothing runs it (8 of the task's columns)", None,
         _TAKE_STATEMENTS[False, False].replace(
             _TAKE_CALL, f"FROM {FUNCTION.format(history='false')}")),
        ("8. as a take that shows the task runs it (+ its skill and history)", None,
         _TAKE_STATEMENTS[False, True].replace(
             _TAKE_CALL, f"FROM {FUNCTION.format(history='true')}")),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=300_000)
    parser.add_argument("--skills", type=int, default=20)
    parser.add_argument("--calls", type=int, default=2000, help="takes per variant per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true",
                        help="small sizes for a smoke check (explicit options win)")
    if "--quick" in sys.argv[1:]:
        parser.set_defaults(tasks=60_000, calls=500, rounds=2)
    args = parser.parse_args()

    bench_environment()
    machine_print()
    with scratch_database(DATABASE):
        run(args)


def run(args: argparse.Namespace) -> None:
    import psycopg
    from django.db import connection

    from accounts.models import User

    variants = variants_build()
    takes = len(variants) * args.rounds * args.calls
    if takes > args.tasks:
        raise SystemExit(f"{takes:,} takes need as many tasks: raise --tasks")
    skills = skills_create(args.skills)
    bench_version_record()
    with connection.cursor() as cursor:
        tasks_insert(cursor, count=args.tasks, skill_id=cycle(skills), history=True)
    # As bench/take_next.py's takers: each worker up to the product's default capacity,
    # whose held tasks the capacity sum weighs (until 2026-12-06 this bench took 50 in a
    # row at capacity 100: a sum over 25 held tasks on average, none of the product's).
    capacity = User._meta.get_field("capacity").default
    count = -(-takes // capacity)
    ids = workers_create(count, skills_of=lambda i: [skills[i % len(skills)]],
                         capacity=capacity)
    skill_of = {worker: skills[i % len(skills)] for i, worker in enumerate(ids)}
    emails = dict(User.objects.filter(pk__in=ids).values_list("pk", "email"))
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    checkpoint()
    print(f"\n{args.tasks:,} queued tasks over {args.skills} skills; {count:,} workers, each "
          f"taking up to their capacity ({capacity}) in a row; {args.calls:,} takes per "
          f"variant per round, {args.rounds} rounds, one connection, statements prepared")

    order = iter(range(takes))
    samples: dict[str, list[float]] = {name: [] for name, _, _ in variants}
    with psycopg.connect(libpq_url(), autocommit=True, prepare_threshold=1) as conn:
        cursor = conn.cursor()
        for _ in range(args.rounds):
            for name, function, statement in variants:
                if function:
                    cursor.execute(function)
                started = _backend_cpu_ms(cursor)
                for _ in range(args.calls):
                    worker = ids[next(order) // capacity]
                    now = datetime.datetime.now(datetime.UTC)
                    params = {"worker": worker, "skill": skill_of[worker],
                              "label": emails[worker], "label_json": f'"{emails[worker]}"',
                              "now": now, "now_iso": now.isoformat()}
                    if cursor.execute(statement, params).fetchone() is None:
                        raise SystemExit(f"{name}: nothing taken (worker {worker})")
                samples[name].append((_backend_cpu_ms(cursor) - started) / args.calls)
    raw = statistics.median(samples[variants[0][0]])
    rows = []
    previous = None
    for name, _, _ in variants:
        median = statistics.median(samples[name])
        rows.append([name, f"{median:.3f}", f"{min(samples[name]):.3f}",
                     f"{max(samples[name]):.3f}",
                     "" if previous is None else f"{median - previous:+.3f}",
                     f"{median / raw:.2f}x"])
        previous = median
    print("\nPostgreSQL CPU per take (ms), median of the rounds and their spread:")
    print(table(["variant", "median", "min", "max", "vs the row above", "vs raw"], rows))


if __name__ == "__main__":
    started = time.perf_counter()
    main()
    print(f"\n({time.perf_counter() - started:.0f} s)")
