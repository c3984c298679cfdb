"""Callbacks: outbox drain rate, and latency from "complete" to SendTaskSuccess returning.

Usage (PostgreSQL and Redis; makes and drops its own database):
    .venv/bin/python bench/callbacks.py [--executions 500] [--live 100] [--live-rate 10]
                                        [--quick]

It runs on the PostgreSQL server of DATABASE_URL (default: local, user postgres) in a
database of its own, inbox_bench_d2_callbacks_<pid>; REDIS_URL (default Redis database
5) holds the cache (the SendTask rate limit shared by all processes, as in production)
and the Celery broker, whose queue it purges: run one such benchmark at a time per Redis
database.

Real executions of a one-human-stage process run on the local emulator; the intake turns
their envelopes into tasks; one worker takes each (``dispatch.task_take_next``) and
completes it (``services.task_complete``, which writes the outbox row). Two phases:

1. backlog: K tasks are completed first, then the outbox is drained by
   ``inbox.services.callback.outbox_drain`` (what the Celery beat task runs), in a loop, in this
   process: callbacks/s of one sender. The drain's grace for fresh rows is set to 0 here
   (it leaves rows to their on-commit Celery task, and no worker runs in this phase); the
   latency (outbox created_at to sent_at) then includes the wait in the backlog.
2. live: L tasks are completed at a steady pace while a real Celery worker (a subprocess,
   prefork, 2 processes) runs ``callback_send_task`` as enqueued on commit: the latency of
   the production path at that load.

Every execution must end SUCCEEDED, and every outbox row be sent, or the script fails.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _d2_common as common
from _common import machine_print, percentile, scratch_database, table, workers_create


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=500, help="K, the backlog")
    parser.add_argument("--live", type=int, default=100, help="L, completed at a pace")
    parser.add_argument("--live-rate", type=float, default=10.0,
                        help="completions per second in the live phase")
    parser.add_argument("--quick", action="store_true", help="K=50, L=20")
    args = parser.parse_args()
    if args.quick:
        args.executions, args.live = 50, 20

    common.environment(broker="redis")
    with (common.var_dir_kept_on_failure(),
          scratch_database(f"inbox_bench_d2_callbacks_{os.getpid()}"),
          common.emulator() as children):
        common.logs_to_file()
        run(backlog=args.executions, live=args.live, live_rate=args.live_rate,
            children=children)


def run(*, backlog: int, live: int, live_rate: float, children: common.Children) -> None:
    from django.conf import settings

    from config.celery import app

    skill_id = common.process_ready()
    [worker_id] = workers_create(1, skills_of=lambda i: [skill_id], capacity=100)
    print(f"Callbacks benchmark: backlog of {backlog:,}, then {live:,} live at "
          f"{live_rate:g}/s")
    machine_print()
    print(f"SendTask rate limit (INBOX_SENDTASK_RATE, shared through Redis): "
          f"{settings.INBOX_SENDTASK_RATE}/s")
    # Celery messages left over from an interrupted run would be sent by the live worker.
    app.control.purge()
    rows = []

    arns = common.executions_start(count=backlog, prefix="backlog")
    common.tasks_wait(count=backlog, timeout=60 + backlog * 0.2, poll=True)
    completed = _complete(worker_id=worker_id, count=backlog, rate=None)
    print(f"\n{backlog:,} tasks taken and completed in {completed:.1f} s "
          f"({backlog / completed:.1f}/s, in this process)")
    # Their on-commit sends went to the broker, and no worker runs: the drain sends them.
    app.control.purge()
    settings.INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 0
    elapsed = _drain()
    rows.append(_row("backlog, outbox_drain (1 sender)", backlog, elapsed, since=0))
    common.executions_check(arns)

    arns = common.executions_start(count=live, prefix="live")
    common.tasks_wait(count=backlog + live, timeout=60 + live * 0.2, poll=True)
    children.start("celery worker", [
        common.PYTHON, "-m", "celery", "-A", "config", "worker", "--pool", "prefork",
        "--concurrency", "2", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
    ], ready=" ready.")
    started = time.monotonic()
    _complete(worker_id=worker_id, count=live, rate=live_rate)
    _sent_wait(total=backlog + live, children=children)
    rows.append(_row(f"live at {live_rate:g}/s, Celery worker", live,
                     time.monotonic() - started, since=backlog))
    common.executions_check(arns)

    print()
    print(table(["phase", "callbacks", "seconds", "callbacks/s", "latency p50 ms",
                 "p95 ms", "p99 ms"], rows))
    print("Latency: outbox row created (in the complete transaction) to SendTaskSuccess "
          "returned (sent_at).")


def _complete(*, worker_id: int, count: int, rate: float | None) -> float:
    """Take and complete count tasks, at rate per second if given; return the seconds."""
    from accounts.models import User
    from inbox.services.worker import task_complete, task_take_next

    worker = User.objects.get(pk=worker_id)
    started = time.monotonic()
    for number in range(count):
        if rate:
            pause = started + number / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        task = task_take_next(worker=worker, skill=common.SKILL)
        task_complete(worker=worker, task_id=task.pk, answer={"decision": "approve"})
    return time.monotonic() - started


def _drain() -> float:
    """Run outbox_drain until no row is pending; return the seconds."""
    from inbox.models import Outbox, OutboxStatus
    from inbox.services.callback import outbox_drain

    started = time.monotonic()
    while Outbox.objects.filter(status=OutboxStatus.PENDING).exists():
        outbox_drain(batch=100)
    return time.monotonic() - started


def _sent_wait(*, total: int, children: common.Children, timeout: float = 120) -> None:
    from inbox.models import Outbox, OutboxStatus

    deadline = time.monotonic() + timeout
    while Outbox.objects.filter(status=OutboxStatus.SENT).count() < total:
        children.check()
        if Outbox.objects.exclude(status__in=[OutboxStatus.SENT, OutboxStatus.PENDING]).exists():
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"callbacks not all sent after {timeout} s")
        time.sleep(0.2)


def _row(name: str, count: int, elapsed: float, *, since: int) -> list:
    """Check the count newest rows were all sent; return the table row of the phase."""
    from inbox.models import Outbox, OutboxStatus

    outbox = list(Outbox.objects.order_by("pk")[since:since + count])
    unsent = [row.status for row in outbox if row.status != OutboxStatus.SENT]
    if len(outbox) != count or unsent:
        raise RuntimeError(f"{name}: {len(outbox)} rows, not sent: {unsent[:5]}")
    latencies = [(row.sent_at - row.created_at).total_seconds() * 1000 for row in outbox]
    return [name, count, elapsed, count / elapsed,
            *(percentile(latencies, p) for p in (50, 95, 99))]


if __name__ == "__main__":
    main()
