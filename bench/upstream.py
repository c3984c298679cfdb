#!/usr/bin/env python3
"""Upstream: StopExecution -> its open task cancelled, at 1,000 and 100,000 open tasks.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/upstream.py
        [--open 1000,100000] [--stops 20] [--quick]

For each size: a scratch database holding that many open tasks (bulk-inserted, of other
executions), the local emulator (which publishes AWS's "Step Functions Execution Status
Change" events, processes/emulator/status.py) with the status rule and queue, and the
clock process (manage.py clock_run) running as in production. --stops real executions of
a one-human-stage process are started and taken in by the intake; then each is stopped
(StopExecution) one at a time, and the time until its task is cancelled in the database is
measured (the page's signal follows within the live reader's period; bench/live.py).
The DescribeExecution backstop is slowed right down (one call a second) so the figures
are the event path's. Printed too: the backstop's DescribeExecution budget per hour and
its full cycle at each size.
"""

import argparse
import os
import sys
import time

import _d2_common as common
from _common import machine_print, percentile, scratch_database, table, tasks_insert


def run(open_tasks: int, stops: int) -> list[object]:
    from django.conf import settings
    from django.db import connection

    from inbox.models import Task, TaskState
    from processes import aws

    skill = common.process_ready()
    with connection.cursor() as cursor:
        tasks_insert(cursor, count=open_tasks, skill_id=str(skill))
    arns = common.executions_start(count=stops, prefix=f"up{open_tasks}")
    common.tasks_wait(count=open_tasks + stops, timeout=120, poll=True)
    latencies = []
    for arn in arns:
        task = Task.objects.get(execution_arn=arn)
        started = time.monotonic()
        aws.execution_stop(execution_arn=arn, error="Bench.Stopped", cause="bench")
        while Task.objects.filter(pk=task.pk, state=TaskState.CANCELLED).count() == 0:
            if time.monotonic() - started > 30:
                raise RuntimeError(f"task of {arn} not cancelled after 30 s")
            time.sleep(0.01)
        latencies.append((time.monotonic() - started) * 1000)
    rate = settings.INBOX_EXECUTIONS_CHECK_RATE
    cycle_hours = (open_tasks + stops) / rate / 3600
    return [f"{open_tasks:,}", len(latencies), f"{percentile(latencies, 50):.0f}",
            f"{percentile(latencies, 95):.0f}", f"{percentile(latencies, 99):.0f}",
            f"{max(latencies):.0f}", f"{rate * 3600:,}", f"{cycle_hours:.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--open", default="1000,100000")
    parser.add_argument("--stops", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="1,000 open tasks, 5 stops")
    args = parser.parse_args()
    if args.quick:
        args.open, args.stops = "1000", 5
    common.environment()
    os.environ["INBOX_EXECUTIONS_CHECK_RATE"] = "1"
    machine_print()
    rows = []
    for size in [int(n) for n in args.open.split(",")]:
        with (common.var_dir_kept_on_failure(),
              scratch_database(f"inbox_bench_upstream_{os.getpid()}"),
              common.emulator() as children):
            children.start("clock", [sys.executable, "manage.py", "clock_run"],
                           ready="Clock running")
            rows.append(run(size, args.stops))
            children.check()
        print(table(["open tasks", "stops", "p50 ms", "p95 ms", "p99 ms", "max ms",
                     "backstop DescribeExecution/h", "backstop full cycle h"], rows[-1:]),
              flush=True)
    print("\nStopExecution -> task cancelled (the status event path; the backstop slowed):")
    print(table(["open tasks", "stops", "p50 ms", "p95 ms", "p99 ms", "max ms",
                 "backstop DescribeExecution/h", "backstop full cycle h"], rows))


if __name__ == "__main__":
    main()
