"""Fault drill: a long transaction holds back vacuum while takers run take-next.

Usage (PostgreSQL only; makes and drops its own database, inbox_bench_drill_long_txn):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python \
        bench/drill_long_transaction.py [--tasks 100000] [--skills 10] [--takers 4] \
        [--before 20] [--hold 60] [--after 20]

Loads --tasks queued tasks over --skills pull queues, then --takers processes loop on
take-next and release (inbox.services.worker: each take and each release updates a task row and
appends a TaskEvent, so every loop leaves dead row versions behind). Three phases:

- before: --before seconds of load, autovacuum free to clean up;
- during: a second connection opens a REPEATABLE READ transaction, reads inbox_task
  (its snapshot now pins the xmin horizon) and holds it open --hold seconds; a manual
  VACUUM in the middle shows how many dead versions it may not remove;
- after: the transaction ends, VACUUM runs, --after seconds more of load.

Prints take-next latency p50/p99 per phase (and per 10 s slice), claims per second, and
the dead tuples of inbox_task (pg_stat_user_tables, and VACUUM VERBOSE's own count) at
each boundary. Asserts nothing about time: it is a drill with figures, not a test.
"""

import argparse
import multiprocessing
import re
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    bench_environment,
    cycle,
    libpq_url,
    machine_print,
    percentile,
    scratch_database,
    skills_create,
    table,
    tasks_insert,
    workers_create,
)

DATABASE = "inbox_bench_drill_long_txn"
SLICE = 10.0


def _taker(worker_id: int, stop_at: float, queue: multiprocessing.Queue) -> None:
    """Take next and release in a loop until stop_at; send back (at, latency_ms) samples."""
    from accounts.models import User
    from inbox.services import worker as worker_service

    worker = User.objects.get(pk=worker_id)
    samples: list[tuple[float, float]] = []
    errors = 0
    while time.time() < stop_at:
        started = time.perf_counter()
        try:
            task = worker_service.task_take_next(worker=worker)
        except Exception:  # an empty queue or a conflict: counted, the loop goes on
            errors += 1
            continue
        samples.append((time.time(), (time.perf_counter() - started) * 1000))
        worker_service.task_release(worker=worker, task_id=task.pk)
    queue.put((samples, errors))


def _dead_tuples(conn) -> tuple[int, int]:
    """Return (n_live_tup, n_dead_tup) of inbox_task, with the statistics flushed."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    row = conn.execute(
        "SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relname = 'inbox_task'"
    ).fetchone()
    return int(row[0]), int(row[1])


def _vacuum(conn) -> str:
    """VACUUM inbox_task and return VACUUM VERBOSE's line about the tuples it saw."""
    notices: list[str] = []

    def collect(diag) -> None:
        notices.append(diag.message_primary or "")

    conn.add_notice_handler(collect)
    try:
        conn.execute("VACUUM (VERBOSE) inbox_task")
    finally:
        conn.remove_notice_handler(collect)
    text = "\n".join(notices)
    found = re.search(r"tuples: [^\n]*", text)
    return found.group(0) if found else text.splitlines()[0] if text else "(no report)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--skills", type=int, default=10)
    parser.add_argument("--takers", type=int, default=4)
    parser.add_argument("--before", type=float, default=20)
    parser.add_argument("--hold", type=float, default=60)
    parser.add_argument("--after", type=float, default=20)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    args = parser.parse_args()

    bench_environment()
    with scratch_database(DATABASE, keep=args.keep):
        import psycopg
        from django.db import connection, connections

        skills = skills_create(args.skills)
        workers = workers_create(args.takers, skills_of=lambda i: skills)
        with connection.cursor() as cursor:
            tasks_insert(cursor, count=args.tasks, skill_id=cycle(skills))
            cursor.execute("ANALYZE inbox_task")
        connections.close_all()  # each forked taker opens its own connection

        machine_print()
        print(f"tasks: {args.tasks:,} over {args.skills} skills; takers: {args.takers} "
              f"(take next + release, one process each)")
        observer = psycopg.connect(libpq_url(), autocommit=True)
        holder = psycopg.connect(libpq_url())
        t0 = time.time()
        hold_start = t0 + args.before
        hold_end = hold_start + args.hold
        stop_at = hold_end + args.after
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        takers = [context.Process(target=_taker, args=(w, stop_at, queue)) for w in workers]
        for taker in takers:
            taker.start()

        marks: list[tuple[str, float, tuple[int, int], str]] = []
        marks.append(("start", 0.0, _dead_tuples(observer), ""))
        time.sleep(max(0.0, hold_start - time.time()))
        marks.append(("end of before", time.time() - t0, _dead_tuples(observer), ""))
        holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT count(*) FROM inbox_task").fetchone()  # takes the snapshot
        time.sleep(max(0.0, (hold_start + hold_end) / 2 - time.time()))
        marks.append(("mid hold, VACUUM", time.time() - t0, _dead_tuples(observer),
                      _vacuum(observer)))
        time.sleep(max(0.0, hold_end - time.time()))
        marks.append(("end of hold", time.time() - t0, _dead_tuples(observer), ""))
        holder.rollback()  # the long transaction ends
        marks.append(("after release, VACUUM", time.time() - t0, _dead_tuples(observer),
                      _vacuum(observer)))
        time.sleep(max(0.0, stop_at - time.time()))

        samples: list[tuple[float, float]] = []
        errors = 0
        results: list[tuple] = []
        reader = threading.Thread(target=lambda: results.extend(
            queue.get() for _ in takers))
        reader.start()
        reader.join(timeout=120)
        for taker in takers:
            taker.join(timeout=30)
        for taker_samples, taker_errors in results:
            samples.extend(taker_samples)
            errors += taker_errors
        marks.append(("end", time.time() - t0, _dead_tuples(observer), ""))
        holder.close()
        observer.close()

        phases = [("before", t0, hold_start), ("during (txn held)", hold_start, hold_end),
                  ("after", hold_end, stop_at)]
        rows = []
        for name, start, end in phases:
            latencies = [ms for at, ms in samples if start <= at < end]
            rows.append((name, len(latencies), len(latencies) / max(end - start, 1e-9),
                         percentile(latencies, 50), percentile(latencies, 99)))
        print()
        print(table(["phase", "claims", "claims/s", "p50 ms", "p99 ms"], rows))
        slices = []
        edge = t0
        while edge < stop_at - 1e-6:
            latencies = [ms for at, ms in samples if edge <= at < edge + SLICE]
            phase = next(name for name, start, end in phases if start <= edge < end)
            slices.append((f"{edge - t0:.0f}-{edge - t0 + SLICE:.0f} s", phase, len(latencies),
                           percentile(latencies, 50), percentile(latencies, 99)))
            edge += SLICE
        print()
        print(table(["slice", "phase", "claims", "p50 ms", "p99 ms"], slices))
        print()
        print(table(["moment", "at s", "live tuples", "dead tuples", "VACUUM says"],
                    [(name, round(at, 1), live, dead, vacuum)
                     for name, at, (live, dead), vacuum in marks]))
        print(f"\ntake-next refusals (empty queue, conflicts): {errors}")


if __name__ == "__main__":
    main()
