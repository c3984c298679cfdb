"""Callbacks: outbox drain rate, and latency from "complete" to SendTaskSuccess returning.

Usage (PostgreSQL and Redis; makes and drops its own database):
    .venv/bin/python bench/callbacks.py [--executions 500] [--live 100] [--live-rate 10]
                                        [--instant 2000] [--compare 400] [--batch 100]
                                        [--senders 8] [--capacity-rate 5000] [--quick]

It runs on the PostgreSQL server of DATABASE_URL (default: local, user postgres) in a
database of its own, inbox_bench_d2_callbacks_<pid>; REDIS_URL (default Redis database
5) holds the cache (the SendTask rate limit shared by all processes, as in production)
and the Celery broker, whose queue it purges: run one such benchmark at a time per Redis
database.

Real executions of a one-human-stage process run on the local emulator; the intake turns
their envelopes into tasks; one worker takes each (``dispatch.task_take_next``) and
completes it (``services.task_complete``, which writes the outbox row). Four phases:

1. backlog: K tasks are completed first, then the outbox is drained by
   ``inbox.services.callback.outbox_drain`` (what the Celery beat task runs), in a loop, in this
   process: callbacks/s of one drain (its batch sent by INBOX_CALLBACK_SENDERS threads)
   at the production SendTask rate. The drain's grace for fresh rows is set to 0 here
   (it leaves fresh rows to the sender, and no sender runs in this phase); the latency
   (outbox created_at to sent_at) then includes the wait in the backlog.
2. instant endpoint: N tasks (inserted queued in bulk, then taken and completed through
   the services) are drained against bench/_instant_sfn.py, a local endpoint (a child
   process) that answers every SendTask* call at once with ``{}``: AWS_ENDPOINT_URL points
   at it for this phase only. What the drains can do when Step Functions costs nothing:
   INBOX_OUTBOX_DRAINS processes (--drains; forked from this one) each run outbox_drain
   in a loop at once, as the Celery worker's processes do when beat's drain finds a
   backlog and asks for helpers. The CPU per callback is theirs together (PostgreSQL's
   backends and the endpoint not counted); --profile runs one drain, in this process.
3. drain vs plain loop, on the emulator: 2M real executions wait at their human stage;
   M tasks are completed and drained, and the other M tokens are answered by a plain
   boto3 SendTaskSuccess loop (a client of its own, no database, no rate limit) with as
   many threads as the drain has senders. Run in halves, drain-plain-plain-drain, so a
   drift of the emulator over the run weighs on both alike; the ratio is drain/plain.
4. live: L tasks are completed at a steady pace while the callbacks' sender runs (``manage.py
   callbacks_run``, a subprocess: production's path since 2026-12-04; until then a real
   Celery worker ran ``callback_send_task`` as enqueued on commit): the latency of the
   production path at that load.

In phases 2 and 3 the rate limit is still asked for every send (through Redis) but set
to --capacity-rate, far above the SendTask quota, so that it does not bind: they measure
capacity. Phases 1 and 4 run at the production INBOX_SENDTASK_RATE.

Every execution must end SUCCEEDED, and every outbox row be sent, or the script fails.
"""

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _d2_common as common
from _common import (
    cycle,
    free_port,
    goal_print,
    machine_print,
    percentile,
    scratch_database,
    table,
    tasks_insert,
    workers_create,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executions", type=int, default=500, help="K, the backlog")
    parser.add_argument("--live", type=int, default=100, help="L, completed at a pace")
    parser.add_argument("--live-rate", type=float, default=10.0,
                        help="completions per second in the live phase")
    parser.add_argument("--instant", type=int, default=2000,
                        help="N, drained against the instant endpoint")
    parser.add_argument("--compare", type=int, default=400,
                        help="M, drained and answered by the plain loop each, on the emulator")
    parser.add_argument("--batch", type=int, default=100, help="outbox_drain's batch")
    parser.add_argument("--senders", type=int, default=None,
                        help="INBOX_CALLBACK_SENDERS (default: the setting's)")
    parser.add_argument("--drains", type=int, default=None,
                        help="drain processes at once in phase 2 (default: "
                             "INBOX_OUTBOX_DRAINS)")
    parser.add_argument("--capacity-rate", type=int, default=5000,
                        help="INBOX_SENDTASK_RATE in phases 2 and 3")
    parser.add_argument("--profile", action="store_true",
                        help="print a profile (cProfile, all threads) of the instant phase")
    parser.add_argument("--quick", action="store_true", help="K=50, L=20, N=500, M=100")
    args = parser.parse_args()
    if args.quick:
        args.executions, args.live, args.instant, args.compare = 50, 20, 500, 100

    # The undo window off: a decision is due once committed, so the figures measure the
    # sending, not INBOX_UNDO_SECONDS of waiting (the live sender reads it too).
    os.environ["INBOX_UNDO_SECONDS"] = "0"
    common.environment(broker="redis")
    with (common.var_dir_kept_on_failure(),
          scratch_database(f"inbox_bench_d2_callbacks_{os.getpid()}"),
          common.emulator() as children):
        common.logs_to_file()
        run(args, children=children)


def run(args: argparse.Namespace, *, children: common.Children) -> None:
    from django.conf import settings

    from config.celery import app

    backlog, live, live_rate, batch = args.executions, args.live, args.live_rate, args.batch
    if args.senders:
        settings.INBOX_CALLBACK_SENDERS = args.senders
    senders = settings.INBOX_CALLBACK_SENDERS
    skill_id = common.process_ready()
    [worker_id] = workers_create(1, skills_of=lambda i: [skill_id], capacity=100)
    print(f"Callbacks benchmark: backlog of {backlog:,}; {args.instant:,} against an instant "
          f"endpoint; {args.compare:,} drained and {args.compare:,} by a plain loop on the "
          f"emulator; then {live:,} live at {live_rate:g}/s")
    machine_print()
    production_rate = settings.INBOX_SENDTASK_RATE
    print(f"SendTask rate limit (INBOX_SENDTASK_RATE, shared through Redis): "
          f"{production_rate}/s in phases 1 and 4, {args.capacity_rate}/s in 2 and 3")
    print(f"outbox_drain batch {batch}, {senders} sender threads (INBOX_CALLBACK_SENDERS)")
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
    elapsed, _ = _drain(batch=batch)
    rows.append(_row(f"backlog, outbox_drain ({senders} senders)", backlog, elapsed,
                     since=0))
    common.executions_check(arns)

    settings.INBOX_SENDTASK_RATE = args.capacity_rate
    drains = 1 if args.profile else (args.drains or settings.INBOX_OUTBOX_DRAINS)
    instant = _instant_phase(count=args.instant, batch=batch, skill_id=skill_id,
                             worker_id=worker_id, children=children, profile=args.profile,
                             drains=drains)
    rows.append(instant)
    app.control.purge()
    compared, ratio = _compare_phase(count=args.compare, batch=batch, senders=senders,
                                     worker_id=worker_id, since=backlog + args.instant)
    rows += compared
    app.control.purge()
    settings.INBOX_SENDTASK_RATE = production_rate
    done = backlog + args.instant + 2 * args.compare  # tasks so far

    arns = common.executions_start(count=live, prefix="live")
    common.tasks_wait(count=done + live, timeout=60 + live * 0.2, poll=True)
    children.start("sender", [common.PYTHON, "manage.py", "callbacks_run"],
                   ready="Callbacks sender running")
    started = time.monotonic()
    _complete(worker_id=worker_id, count=live, rate=live_rate)
    _sent_wait(total=backlog + args.instant + args.compare + live, children=children)
    rows.append(_row(f"live at {live_rate:g}/s, the sender", live,
                     time.monotonic() - started, since=backlog + args.instant + args.compare))
    common.executions_check(arns)

    print()
    print(table(["phase", "callbacks", "seconds", "callbacks/s", "CPU ms each",
                 "latency p50 ms", "p95 ms", "p99 ms"], rows))
    print("Latency: outbox row created (in the complete transaction) to SendTaskSuccess "
          "returned (sent_at); for the drains it includes the wait in the backlog. CPU: "
          "the draining processes', per callback (PostgreSQL, the endpoint and the "
          "emulator not counted; '-' where the process ran other work).")
    print(f"\n{drains} drain(s) at once against the instant endpoint: {instant[3]:,.0f} "
          f"callbacks/s. One drain vs a "
          f"plain boto3 SendTaskSuccess loop on the emulator, {senders} threads each: "
          f"{ratio:.2f}x")
    goal_print("callbacks drain, instant endpoint, callbacks per second", instant[3], 500.0,
               unit="/s")
    goal_print("callbacks drain / plain SendTaskSuccess loop, on the emulator", ratio, 0.8,
               unit="x")


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


def _drain(*, batch: int) -> tuple[float, float]:
    """Run outbox_drain until no row is pending; return the seconds and this process's CPU."""
    from inbox.models import Outbox, OutboxStatus
    from inbox.services.callback import outbox_drain

    started, cpu = time.monotonic(), time.process_time()
    while Outbox.objects.filter(status=OutboxStatus.PENDING).exists():
        # Batch after batch while they come full, each sent while the one before is
        # recorded (what the beat task does for up to 4 s).
        outbox_drain(batch=batch, budget_seconds=600)
    return time.monotonic() - started, time.process_time() - cpu


def _drains(*, batch: int, processes: int) -> tuple[float, float]:
    """Run _drain in processes forked processes at once, until no row is pending; return
    the seconds and their CPU together (one process: _drain here)."""
    import multiprocessing
    import threading

    from django.db import connections

    from processes import aws

    if processes == 1:
        return _drain(batch=batch)
    # Each child opens its own database connection and builds its own boto3 client: none
    # may share a socket with this process (Redis's pool notices the fork by itself).
    connections.close_all()
    aws.clients_forget()
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    # Every child connects and builds its client before the clock starts, as production's
    # long-running processes do as they start (aws.clients_build): what is timed is
    # draining, not loading botocore's models (about 0.1 s of CPU a process here).
    ready = context.Barrier(processes + 1, timeout=120)

    def run() -> None:
        try:
            connections["default"].ensure_connection()
            aws.clients_build("stepfunctions")
            ready.wait()
            results.put(_drain(batch=batch))
        except BaseException as exc:
            results.put(exc)
            raise

    children = [context.Process(target=run, name=f"drain-{n}") for n in range(processes)]
    for child in children:
        child.start()
    try:
        ready.wait()
    except threading.BrokenBarrierError:
        pass  # a child failed before it was ready: its outcome, below, says why
    started = time.monotonic()
    outcomes = [results.get(timeout=600) for _ in children]
    for child in children:
        child.join()
    elapsed = time.monotonic() - started
    failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
    if failed or any(child.exitcode for child in children):
        raise SystemExit(f"a drain process failed: {failed or [c.exitcode for c in children]}")
    return elapsed, sum(cpu for _, cpu in outcomes)


def _instant_phase(*, count: int, batch: int, skill_id: int, worker_id: int,
                   children: common.Children, profile: bool, drains: int) -> list:
    """Drain count completed tasks against the instant endpoint; return the table row."""
    from django.conf import settings
    from django.db import connection

    from inbox.models import Outbox, Task
    from inbox.tokens import token_encrypt

    port = free_port()
    children.start("instant endpoint", [common.PYTHON, str(Path(__file__).parent /
                                                         "_instant_sfn.py"), str(port)],
                   ready="Instant endpoint ready")
    since, sent_before = Task.objects.count(), Outbox.objects.count()
    # The endpoint reads no token: one ciphertext serves every task (digests stay unique).
    ciphertext = token_encrypt("bench-instant-endpoint-token").hex()
    with connection.cursor() as cursor:
        tasks_insert(cursor, count=count, start=since + 1,
                     skill_id=cycle([skill_id]), token_ciphertext=f"'\\x{ciphertext}'::bytea",
                     process_name="'bench-review'", form="'approve-reject'",
                     priority="50", created_at="now() + n * interval '1 millisecond'")
    completed = _complete(worker_id=worker_id, count=count, rate=None)
    print(f"\n{count:,} more tasks (bulk-inserted) taken and completed in {completed:.1f} s")
    emulator = settings.AWS_ENDPOINT_URL
    settings.AWS_ENDPOINT_URL = f"http://127.0.0.1:{port}"
    try:
        if profile:
            elapsed, cpu = _profiled(lambda: _drain(batch=batch))
        else:
            elapsed, cpu = _drains(batch=batch, processes=drains)
    finally:
        settings.AWS_ENDPOINT_URL = emulator
    row = _row(f"instant endpoint, {drains} outbox_drain(s) at once", count, elapsed,
               since=sent_before)
    row[4] = cpu / count * 1000
    return row


def _profiled(run):
    """Run run() under cProfile in every thread (the drain's senders too); print the top."""
    import cProfile
    import pstats
    import threading

    profiles = [cProfile.Profile()]

    def thread_profile(*args):
        # Each new thread profiles itself from its first event, into a profile of its own.
        sys.setprofile(None)
        profiles.append(one := cProfile.Profile())
        one.enable()

    threading.setprofile(thread_profile)
    profiles[0].enable()
    try:
        result = run()
    finally:
        profiles[0].disable()
        threading.setprofile(None)
    # The sender threads ended with the drain's pool; their profiles stop there.
    stats = pstats.Stats(profiles[0])
    for one in profiles[1:]:
        stats.add(one)
    print("\nProfile of the instant phase's drain (all threads, by own time):")
    stats.sort_stats("tottime").print_stats(25)
    return result


def _compare_phase(*, count: int, batch: int, senders: int, worker_id: int,
                   since: int) -> tuple[list, float]:
    """Drain count callbacks, and answer count more tokens by a plain boto3 loop, on the
    emulator, in halves (drain, plain, plain, drain); return the table rows and the ratio."""
    from django.conf import settings

    from inbox.models import Task, TaskState
    from inbox.tokens import token_decrypt

    arns = common.executions_start(count=2 * count, prefix="compare")
    common.tasks_wait(count=Task.objects.count() + 2 * count, timeout=60 + count * 0.4,
                      poll=True)
    halves = [count // 2, count - count // 2]
    drained = plain = 0.0
    drain_cpu = plain_cpu = 0.0
    for order, half in zip(("drain plain", "plain drain"), halves, strict=True):
        for what in order.split():
            if what == "drain":
                _complete(worker_id=worker_id, count=half, rate=None)
                seconds, cpu = _drain(batch=batch)
                drained += seconds
                drain_cpu += cpu
            else:
                # Queued tasks nobody took: their tokens wait at the emulator.
                ciphertexts = list(Task.objects.filter(state=TaskState.QUEUED)
                                   .order_by("-created_at")
                                   .values_list("token_ciphertext", flat=True)[:half])
                tokens = [token_decrypt(c) for c in ciphertexts]
                seconds, cpu = _plain_loop(tokens, threads=senders,
                                           endpoint=settings.AWS_ENDPOINT_URL,
                                           region=settings.AWS_REGION)
                plain += seconds
                plain_cpu += cpu
                # Answered outside the inbox: these tasks leave the bench's queue.
                Task.objects.filter(token_ciphertext__in=ciphertexts).update(
                    state=TaskState.CANCELLED)
    common.executions_check(arns)
    drain_row = _row("emulator, outbox_drain", count, drained, since=since)
    drain_row[4] = drain_cpu / count * 1000
    plain_row = ["emulator, plain boto3 loop", count, plain, count / plain,
                 plain_cpu / count * 1000, float("nan"), float("nan"), float("nan")]
    return [drain_row, plain_row], drain_row[3] / plain_row[3]


def _plain_loop(tokens: list[str], *, threads: int, endpoint: str,
                region: str) -> tuple[float, float]:
    """Answer each token with SendTaskSuccess from a plain boto3 client on threads."""
    import boto3
    from botocore.config import Config

    client = boto3.session.Session().client(
        "stepfunctions", region_name=region, endpoint_url=endpoint,
        aws_access_key_id="testing", aws_secret_access_key="testing",  # noqa: S106
        config=Config(max_pool_connections=max(10, threads)))
    output = json.dumps({"answer": {"decision": "approve"}, "worker": "1",
                         "completedAt": "2026-01-01T00:00:00+00:00"})
    started, cpu = time.monotonic(), time.process_time()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda token: client.send_task_success(taskToken=token, output=output),
                      tokens))
    return time.monotonic() - started, time.process_time() - cpu


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
    return [name, count, elapsed, count / elapsed, float("nan"),
            *(percentile(latencies, p) for p in (50, 95, 99))]


if __name__ == "__main__":
    main()
