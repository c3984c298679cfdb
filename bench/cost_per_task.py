"""Cost per task: CPU milliseconds of the inbox's own processes per full task life.

Usage (PostgreSQL and Redis; makes and drops its own database):
    .venv/bin/python bench/cost_per_task.py [--tasks 500] [--takers 4] [--quick]

It runs on the PostgreSQL server of DATABASE_URL (default: local, user postgres) in a
database of its own, inbox_bench_d2_cost_<pid>; REDIS_URL (default Redis database 5) is
the cache and the Celery broker, whose queue it purges: run one such benchmark at a time
per Redis database.

The inbox runs as in production, each part a process of its own: the web app under
gunicorn with 2 workers of the server production runs (uvicorn's worker on config.asgi, a
pool of connections; --http-server wsgi: sync workers on config.wsgi, what this bench ran
until 2026-12-03), a Celery worker (prefork, 2 processes), Celery beat, the clock
(manage.py clock_run) and the callbacks' sender (manage.py callbacks_run, since
2026-12-04), with the local Step Functions emulator beside them. This script
(the load driver) starts N executions of a one-human-stage process on the emulator; the
worker takes their envelopes in (beat's intake poll); once all N tasks are queued, T
threads take and complete them through the REST API, each thread signed in as its own
worker: by default (--flow chained) as a reviewer works, each complete asking for the
next task in the same request (POST tasks/<id>/complete/ with then=next, the pages'
"Complete and next"), one request per task; --flow separate makes a take (POST
tasks/next/) and a complete for each, two requests per task; the sender sends the
callbacks (the Celery worker did, one message per decision, until 2026-12-04) and every
execution must end SUCCEEDED.

Before it, W lives (--warm-up, default 50) run the same way and are not counted: what
a process does once, at its first task (a client library imported at first use, the
web's pool of connections grown, statements prepared), is not a cost per task (until
2026-12-06 the measured lives were the first, and paid it).

The CPU time (user + sys, from /proc) of the gunicorn, Celery worker, beat, clock and
sender process trees is read before the executions start and after the last callback was sent.
Beat's ticks and the clock's sweeps cost CPU with no task at all, so the same processes
are first watched idle for a while, and that idle rate times the run's duration is
subtracted (both are printed). The emulator and this driver are not counted;
PostgreSQL's backends serving the bench database are shown apart (approximate: a backend
that exits meanwhile is missed).
"""

import argparse
import datetime
import os
import re
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _d2_common as common
from _common import (
    TICKS,
    WEB_SERVERS,
    api_token,
    free_port,
    goal_print,
    machine_print,
    percentile,
    proc_stats,
    scratch_database,
    table,
    tree_cpu_ms,
    workers_create,
)

INBOX_PROCESSES = ("gunicorn", "celery worker", "celery beat", "clock", "sender")
DATABASE = f"inbox_bench_d2_cost_{os.getpid()}"
# How the API is driven (--flow), as the output names it.
FLOWS = {"chained": "each complete taking the next", "separate": "a take and a complete apart"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=500, help="N")
    parser.add_argument("--takers", type=int, default=4, help="T, HTTP client threads")
    parser.add_argument("--idle", type=float, default=30, help="seconds watched idle")
    parser.add_argument("--warm-up", type=int, default=50, dest="warm_up", metavar="W",
                        help="task lives run before the idle window and not counted "
                             "(default 50; 0: none, as before 2026-12-06)")
    parser.add_argument("--quick", action="store_true", help="N=60, W=20, 15 s idle")
    parser.add_argument("--flow", choices=sorted(FLOWS), default="chained",
                        help="chained (default): each complete asks for the next task "
                             "(then=next), as the pages' Complete and next does: one "
                             "request per task; separate: a take, then a complete, two "
                             "requests per task (this bench's only flow until 2026-12-06)")
    parser.add_argument("--http-server", choices=sorted(WEB_SERVERS), default="asgi",
                        help="asgi (default): production's gunicorn + uvicorn worker on "
                             "config.asgi; wsgi: gunicorn sync workers on config.wsgi")
    parser.add_argument("--py-spy", type=Path, metavar="DIR", dest="py_spy",
                        help="sample the web's, the Celery worker's, the clock's and the "
                             "sender's process trees with py-spy during the run "
                             "(requirements-dev.txt), write each one's stacks to DIR and "
                             "print their costliest frames; sampling costs CPU, so that "
                             "run's CPU figures are not results")
    args = parser.parse_args()
    if args.quick:
        args.tasks, args.idle, args.warm_up = 60, 15, min(args.warm_up, 20)

    common.environment(broker="redis")
    with (common.var_dir_kept_on_failure(), scratch_database(DATABASE),
          common.emulator() as children):
        common.logs_to_file()
        run(tasks=args.tasks, takers=args.takers, idle=args.idle, children=children,
            py_spy=args.py_spy, http_server=args.http_server, warm_up=args.warm_up,
            flow=args.flow)


def run(*, tasks: int, takers: int, idle: float, children: common.Children,
        py_spy: Path | None = None, http_server: str = "asgi", warm_up: int = 0,
        flow: str = "chained") -> None:
    from django.core.cache import cache

    from config.celery import app
    from inbox.services.intake import POLL_LOCK_KEY as LOCK_KEY

    skill_id = common.process_ready()
    workers_create(takers, skills_of=lambda i: [skill_id], capacity=10, api_tokens=True)
    print(f"Cost per task: {tasks:,} tasks after {warm_up:,} not counted, {takers} HTTP "
          f"takers, web server {http_server}, flow {flow} ({FLOWS[flow]})")
    machine_print()
    # Left by an interrupted run: stale Celery messages, an intake lock held for minutes.
    app.control.purge()
    cache.delete(LOCK_KEY)

    port = free_port()
    base = f"http://127.0.0.1:{port}"
    application, worker_class, web_env = WEB_SERVERS[http_server]
    children.start("gunicorn", [
        common.PYTHON, "-m", "gunicorn", application, "--workers", "2",
        "--worker-class", worker_class, "--bind", f"127.0.0.1:{port}",
    ], ready="Booting worker", env=web_env)
    children.start("celery worker", [
        common.PYTHON, "-m", "celery", "-A", "config", "worker", "--pool", "prefork",
        "--concurrency", "2", "--loglevel", "INFO", "--without-gossip", "--without-mingle",
    ], ready=" ready.")
    children.start("celery beat", [
        common.PYTHON, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
    ], ready="beat: Starting")
    children.start("clock", [common.PYTHON, "manage.py", "clock_run"], ready="Clock running")
    children.start("sender", [common.PYTHON, "manage.py", "callbacks_run"],
                   ready="Callbacks sender running")
    _http_ready(base=base)
    if warm_up:
        # Whole lives first, not counted: what each process does once (a client library
        # imported at its first use, the web's pool of connections grown, statements
        # prepared by PostgreSQL after their fifth run) is not a cost per task.
        warm, _, _ = _lives(prefix="warm", count=warm_up, done_before=0, base=base,
                            takers=takers, children=children, flow=flow)
        common.executions_check(warm)
    # Let every process finish starting (imports, first beat ticks) before the idle window.
    time.sleep(5)

    before = _cpu(children)
    pg_before = _postgres_cpu()
    time.sleep(idle)
    idle_ms = {name: (_cpu(children)[name] - before[name]) / idle for name in INBOX_PROCESSES}

    children.check()
    samplers = _samplers_start(py_spy, children) if py_spy else {}
    before = _cpu(children)
    pg_before = _postgres_cpu()
    started = time.monotonic()
    measured_from = datetime.datetime.now(datetime.UTC)
    arns, queued, requests_made = _lives(prefix="cost", count=tasks, done_before=warm_up,
                                         base=base, takers=takers, children=children,
                                         flow=flow)
    elapsed = time.monotonic() - started
    after = _cpu(children)
    pg_after = _postgres_cpu()
    if samplers:
        _samplers_report(samplers)
    common.executions_check(arns)  # after the CPU is read: the bench's own calls

    rows = []
    total_net = 0.0
    for name in INBOX_PROCESSES:
        gross = after[name] - before[name]
        net = gross - idle_ms[name] * elapsed
        total_net += net
        rows.append([name, idle_ms[name], gross, gross / tasks, net / tasks])
    gross_all = sum(after[name] - before[name] for name in INBOX_PROCESSES)
    rows.append(["inbox total", sum(idle_ms.values()), gross_all, gross_all / tasks,
                 total_net / tasks])
    postgres = sum(pg_after.get(pid, 0) - pg_before.get(pid, 0) for pid in pg_after)
    print(f"\n{tasks:,} task lives in {elapsed:.1f} s (all queued after {queued:.1f} s); "
          f"{requests_made:,} HTTP requests")
    print(table(["process tree", "idle CPU ms/s", "CPU ms in run", "gross ms/task",
                 "net ms/task"], rows))
    print(f"net = gross minus the idle rate over the run's {elapsed:.1f} s")
    print(f"Capacity implied: {1000 / (total_net / tasks):.1f} task lives per second per "
          f"core (net), {1000 / (gross_all / tasks):.1f} (gross)")
    print(f"PostgreSQL backends of the bench database (not in the total): "
          f"{postgres / tasks:.2f} ms/task")
    print("Complete to SendTaskSuccess returned (outbox created_at to sent_at), ms: "
          + ", ".join(f"p{p} {value:.0f}"
                      for p, value in _callback_latency(since=measured_from).items()))
    print(f"  of which, ms: {_callback_latency_split(since=measured_from)}")
    goal_print(f"CPU of one task's life, the inbox's processes (net), {FLOWS[flow]}",
               total_net / tasks, 10.0, unit=" ms", most=True)


SAMPLED = ("gunicorn", "celery worker", "clock", "sender")


def _samplers_start(directory: Path, children: common.Children) -> dict[str, tuple]:
    """Start py-spy on each sampled process tree; return {name: (process, output file)}."""
    import shutil
    import subprocess

    spy = shutil.which("py-spy") or str(Path(common.PYTHON).parent / "py-spy")
    if not Path(spy).exists():
        raise SystemExit("--py-spy needs py-spy (requirements-dev.txt): "
                         ".venv/bin/pip install -r requirements-dev.txt")
    directory.mkdir(parents=True, exist_ok=True)
    samplers = {}
    for name in SAMPLED:
        output = directory / f"{name.replace(' ', '-')}.txt"
        process = subprocess.Popen(
            # --gil: only the samples of a thread holding the GIL, Python on a CPU (this
            # bench's figure), not threads waiting on a socket, a lock or a sleep.
            [spy, "record", "--pid", str(children.started[name].pid), "--subprocesses",
             "--gil", "--rate", "200", "--nonblocking", "--format", "raw",
             "--output", str(output)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        samplers[name] = (process, output)
    time.sleep(2)  # py-spy attaches
    return samplers


OUR_CODE = re.compile(r"\((accounts|config|inbox|processes)/")


def _samplers_report(samplers: dict[str, tuple], top: int = 15) -> None:
    """Stop the samplers and print, for each tree, the share of its samples in the
    project's own functions (inclusive: a frame counted once per stack) and in the leaves
    (the frame on top of the stack, where the time is spent)."""
    import signal
    from collections import Counter

    for name, (process, output) in samplers.items():
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=60)
        if not output.exists():
            raise RuntimeError(f"py-spy wrote no {output}: {errors[-500:]}")
        ours: Counter[str] = Counter()
        leaves: Counter[str] = Counter()
        total = unreadable = 0
        # py-spy may cut a stack short as it stops (seen: a line ending in "(", no count).
        for line in output.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                unreadable += 1
                continue
            frames = [re.sub(r":\d+\)$", ")", frame) for frame in stack.split(";")]
            total += int(count)
            leaves[frames[-1]] += int(count)
            for frame in set(frames):
                if OUR_CODE.search(frame):
                    ours[frame] += int(count)
        skipped = f"; {unreadable} unreadable lines left out" if unreadable else ""
        print(f"\npy-spy, {name}: {total:,} samples ({output}{skipped})")
        for title, counts in (("the project's functions, inclusive", ours),
                              ("leaves (self)", leaves)):
            print(f"  {title}:")
            for frame, count in counts.most_common(top):
                print(f"  {count / total:6.1%}  {frame[:150]}")


def _http_ready(*, base: str, timeout: float = 60) -> None:
    """Wait for gunicorn to answer, then warm both workers up (first-request costs)."""
    import requests

    deadline = time.monotonic() + timeout
    headers = {"Authorization": f"Token {api_token('worker', 0)}"}
    while True:
        try:
            if requests.get(f"{base}/api/inbox/queues/", headers=headers, timeout=5).ok:
                break
        except requests.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"gunicorn does not answer at {base} after {timeout} s")
        time.sleep(0.5)
    for _ in range(10):
        requests.get(f"{base}/api/inbox/queues/", headers=headers, timeout=30)
        # Nothing is queued yet: a 404, which runs the take-next code path all the same.
        requests.post(f"{base}/api/inbox/tasks/next/", json={"skill": common.SKILL},
                      headers=headers, timeout=30)


def _lives(*, prefix: str, count: int, done_before: int, base: str, takers: int,
           children: common.Children, flow: str) -> tuple[list[str], float, int]:
    """Run count task lives (done_before already ran): start their executions, wait for
    their tasks, take and complete them through the API, wait for their callbacks; return
    the executions' ARNs, the seconds until all were queued and the HTTP requests made."""
    started = time.monotonic()
    arns = _executions_start(count=count, prefix=prefix)
    common.tasks_wait(count=done_before + count, timeout=120 + count * 0.2, poll=False)
    queued = time.monotonic() - started
    requests_made = _drive(base=base, takers=takers, expected=count, flow=flow)
    _sent_wait(count=done_before + count, children=children)
    return arns, queued, requests_made


def _executions_start(*, count: int, prefix: str) -> list[str]:
    """Start count executions on the emulator, as the outside world would (not counted)."""
    from processes import aws
    from processes.models import ProcessVersion

    machine = ProcessVersion.objects.get(process__name="bench-review").state_machine_arn
    return [aws.execution_start(state_machine_arn=machine, name=f"{prefix}-{number}",
                                input={"ref": f"{prefix}-{number}"})
            for number in range(count)]


def _drive(*, base: str, takers: int, expected: int, flow: str = "chained") -> int:
    """Take and complete tasks through the API with takers threads until none is left.

    flow "chained": each complete asks for the next task (then=next), as the pages'
    "Complete and next" does: one request per task after each thread's first take.
    "separate": a take (POST tasks/next/), then a complete, two requests per task.
    """
    import requests

    done: list[int] = []
    completes: list[int] = []
    errors: list[str] = []
    then = {"then": "next"} if flow == "chained" else {}

    def taker(number: int) -> None:
        session = requests.Session()
        session.headers["Authorization"] = f"Token {api_token('worker', number)}"
        made = finished_count = 0
        try:
            task = None
            while True:
                if task is None:
                    taken = session.post(f"{base}/api/inbox/tasks/next/",
                                         json={"skill": common.SKILL}, timeout=30)
                    made += 1
                    if taken.status_code == 404:
                        break
                    if taken.status_code != 200:
                        raise RuntimeError(f"take next: HTTP {taken.status_code} "
                                           f"{taken.text[:200]}")
                    task = taken.json()
                finished = session.post(f"{base}/api/inbox/tasks/{task['id']}/complete/",
                                        json={"answer": {"decision": "approve"},
                                              "version": task["version"], **then},
                                        timeout=30)
                made += 1
                if finished.status_code != 200:
                    raise RuntimeError(f"complete: HTTP {finished.status_code} "
                                       f"{finished.text[:200]}")
                finished_count += 1
                # Chained: the next task came with the answer (None: nothing was left,
                # and a take of its own finds out, as in the separate flow).
                task = finished.json().get("next")
        except Exception as exc:
            errors.append(f"taker {number}: {exc}")
        done.append(made)
        completes.append(finished_count)

    threads = [threading.Thread(target=taker, args=(n,)) for n in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise RuntimeError("; ".join(errors))
    if sum(completes) != expected:
        raise RuntimeError(f"{sum(completes)} tasks completed through the API, {expected} "
                           "expected")
    return sum(done)


def _sent_wait(*, count: int, children: common.Children, timeout: float = 180) -> None:
    from inbox.models import Outbox, OutboxStatus

    deadline = time.monotonic() + timeout
    while Outbox.objects.filter(status=OutboxStatus.SENT).count() < count:
        children.check()
        stuck = Outbox.objects.exclude(status__in=[OutboxStatus.SENT, OutboxStatus.PENDING])
        if stuck.exists():
            raise RuntimeError(f"callbacks not sent: {list(stuck.values('status', 'last_error'))}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"callbacks not all sent after {timeout} s")
        time.sleep(0.1)


def _callback_latency(*, since: datetime.datetime) -> dict[int, float]:
    from inbox.models import Outbox

    latencies = [(sent - created).total_seconds() * 1000
                 for created, sent in Outbox.objects.filter(created_at__gte=since)
                 .values_list("created_at", "sent_at")]
    return {p: percentile(latencies, p) for p in (50, 95, 99)}


def _callback_latency_split(*, since: datetime.datetime) -> str:
    """Where complete -> sent goes, for the rows sent at their first attempt: the undo
    window (created -> due), the sender (due -> claimed: its claim sets next_attempt_at to
    the claim's time plus the lease) and the call (claimed -> SendTaskSuccess returned)."""
    from django.conf import settings

    from inbox.models import Outbox
    from inbox.services.callback import _setting

    window = datetime.timedelta(seconds=settings.INBOX_UNDO_SECONDS)
    lease = datetime.timedelta(seconds=_setting("INBOX_CALLBACK_LEASE_SECONDS"))
    late, call = [], []
    for created, claimed_lease, sent in Outbox.objects.filter(
            attempts=1, created_at__gte=since).values_list(
            "created_at", "next_attempt_at", "sent_at"):
        claimed = claimed_lease - lease
        late.append((claimed - (created + window)).total_seconds() * 1000)
        call.append((sent - claimed).total_seconds() * 1000)
    if not late:
        return "no row was sent at its first attempt"
    return (f"undo window {window.total_seconds():.0f} s; due to claimed by the sender "
            + ", ".join(f"p{p} {percentile(late, p):.0f}" for p in (50, 95, 99))
            + f"; claimed to returned ({len(call):,} rows sent at their first attempt) "
            + ", ".join(f"p{p} {percentile(call, p):.0f}" for p in (50, 95, 99)))


def _cpu(children: common.Children) -> dict[str, float]:
    """Return the CPU milliseconds (user + sys) of each inbox process tree so far."""
    children.check()
    stats = proc_stats()
    return {name: tree_cpu_ms([children.started[name].pid], stats) for name in INBOX_PROCESSES}


def _postgres_cpu() -> dict[int, float]:
    """Return {pid: CPU ms} of the PostgreSQL backends connected to the bench database.

    Empty when PostgreSQL runs on another machine (its pids are not ours to read).
    """
    from django.db import connection

    if connection.settings_dict["HOST"] not in {"127.0.0.1", "localhost", "::1", ""}:
        return {}

    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s "
                       "AND pid <> pg_backend_pid()", [DATABASE])
        pids = [pid for (pid,) in cursor.fetchall()]
    stats = proc_stats()
    return {pid: stats[pid][1] * 1000 / TICKS for pid in pids if pid in stats}


if __name__ == "__main__":
    main()
