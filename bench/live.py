#!/usr/bin/env python3
"""Live pages: commit -> signal seen by N connected reviewers, and the web's CPU per idle one.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/live.py
        [--clients 1,100,1000] [--changes 60] [--rate 5] [--idle 10] [--quick]

A scratch database, one skill, a reviewer per client holding it, and tasks. uvicorn serves
config.asgi (one process, as on a 2-core machine's web). Each client is a plain SSE
connection (asyncio, a signed-in session) to /live/; this process commits changes
(claim, then release, of a task: each a transition with its event) at --rate per second
and records each one's commit time. Latency is the moment a client read the signal minus
the moment its transaction committed, over every client and change (same machine, same
clock). Then the clients stay connected, idle, for --idle seconds and the web process's
CPU time over that span is divided by the clients: the cost of one idle open page.
With --browsers N, N of the clients are real Chromium pages (Debian's /usr/bin/chromium,
headless, through Playwright) on My queues instead: for them the latency is commit ->
the page has fetched itself again and put its live regions in place (its
"inbox:refreshed" event), the whole path a reviewer sees; changes then come one a second,
so each refresh answers one change.
"""

import argparse
import asyncio
import os
import random
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from _common import (
    ROOT,
    bench_environment,
    free_port,
    machine_print,
    percentile,
    scratch_database,
    sessions_signed_in,
    skills_create,
    table,
    tasks_insert,
    web_wait,
    workers_create,
)

HEADERS = ["clients", "503s waited out", "streams reopened", "signals seen", "p50 ms",
           "p95 ms", "p99 ms", "max ms", "web CPU ms/s per idle client"]
BROWSERS = ["Chromium pages: commit -> regions in place, ms"]



# A refused stream is opened again as the page does (inbox.js: a pause of half to all of
# RETRY_FIRST_S, doubling, with jitter, up to RETRY_MAX_S); each such retry is counted.
RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0


async def _client(port: int, session: str, since: int, seen: dict,
                  connected: asyncio.Semaphore, refused: list, reopened: list) -> None:
    """One page's stream, as a browser's EventSource keeps it: a 503 is waited out; a
    stream that ends or breaks after its 200 is opened again after the pause the stream
    asked for (its retry: field), from the last event read (Last-Event-ID), else from
    since, and counted in reopened."""
    retry = RETRY_FIRST_S
    last_event: int | None = None
    pause = 0.0
    first = True
    while True:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        resume = f"Last-Event-ID: {last_event}\r\n" if last_event is not None else ""
        writer.write(f"GET /live/?since={since} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     f"Cookie: sessionid={session}\r\nAccept: text/event-stream\r\n"
                     f"{resume}\r\n".encode())
        await writer.drain()
        status = await reader.readline()
        if b" 200 " not in status:
            writer.close()
            if b" 503 " not in status:  # Busy is the one answer a page waits out.
                raise RuntimeError(f"/live/ answered {status!r}")
            refused.append(status)
            await asyncio.sleep(retry / 2 + random.random() * retry / 2)
            retry = min(retry * 2, RETRY_MAX_S)
            continue
        retry = RETRY_FIRST_S
        if first:
            connected.release()
            first = False
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                if line.startswith(b"retry: "):
                    pause = int(line[7:]) / 1000
                elif line.startswith(b"id: "):
                    last_event = int(line[4:])
                elif line.startswith(b"data: "):
                    now = time.time()
                    key = line[line.index(b'"task": "') + 9:].split(b'"', 1)[0].decode()
                    version = int(line.split(b'"version": ', 1)[1].split(b",", 1)[0])
                    seen.setdefault((key, version), []).append(now)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # Broken mid-stream (the server failed it): opened again, as below.
        finally:
            writer.close()
        reopened.append(last_event)
        await asyncio.sleep(pause)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks


def _changes(task_ids: list, worker_id: int, count: int, rate: float, commits: dict) -> None:
    """Commit count changes at rate per second; record each (task, version)'s commit time."""
    from django.db import connection

    from accounts.models import User
    from inbox.lifecycle import transition

    worker = User.objects.get(pk=worker_id)
    for i in range(count):
        task_id = task_ids[i // 2]
        action = "claim" if i % 2 == 0 else "release"
        task = transition(task_id=task_id, action=action, actor=worker)
        commits[(str(task.pk), task.version)] = time.time()
        time.sleep(1 / rate)
    connection.close()


class Browsers:
    """Chromium pages on My queues, in a thread of their own (Playwright's sync API keeps
    an event loop there), each recording when it put fresh live regions in place."""

    def __init__(self, port: int, sessions: list[str]) -> None:
        self.port, self.sessions = port, sessions
        self.ready, self.collect, self.done = (threading.Event(), threading.Event(),
                                               threading.Event())
        self.refreshed: list[list[float]] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.thread.start()
        if not self.ready.wait(120):
            raise RuntimeError("the browsers did not open My queues")

    def _run(self) -> None:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                                 headless=True, args=["--no-sandbox"])
            pages = []
            for session in self.sessions:
                context = browser.new_context(base_url=f"http://127.0.0.1:{self.port}")
                context.add_cookies([{"name": "sessionid", "value": session,
                                      "url": f"http://127.0.0.1:{self.port}"}])
                context.add_init_script(
                    "window.__refreshed = []; document.addEventListener('inbox:refreshed',"
                    " () => window.__refreshed.push(Date.now() / 1000));")
                page = context.new_page()
                page.goto("/")
                try:
                    page.wait_for_selector("[data-live][data-live-open]", state="attached")
                except Exception:
                    print(f"page at {page.url}: {page.content()[:300]}", file=sys.stderr)
                    raise
                pages.append(page)
            self.ready.set()
            self.collect.wait()
            self.refreshed = [page.evaluate("window.__refreshed") for page in pages]
            browser.close()
        self.done.set()

    def latencies(self, commits: dict) -> list[float]:
        """Return, per page and commit, ms until the page's next refresh after the commit."""
        self.collect.set()
        self.done.wait(60)
        found = []
        for times in self.refreshed:
            for committed in commits.values():
                after = [at for at in times if at >= committed]
                if after:
                    found.append((min(after) - committed) * 1000)
        return found


def run(clients: int, *, port: int, sessions: list[str], task_ids: list, worker_id: int,
        changes: int, rate: float, idle: float, web_pid: int,
        browsers: int = 0) -> list[object]:
    from inbox.live import latest_event_id

    seen: dict = {}
    commits: dict = {}
    refused: list = []
    reopened: list = []
    since = latest_event_id()
    pages = Browsers(port, sessions[clients:clients + browsers]) if browsers else None
    if pages:
        pages.start()

    async def scenario() -> float:
        connected = asyncio.Semaphore(0)
        streams = [asyncio.create_task(_client(port, sessions[i], since, seen, connected,
                                               refused, reopened))
                   for i in range(clients)]
        for _ in range(clients):
            await asyncio.wait_for(connected.acquire(), 120)
        await asyncio.sleep(1)  # every stream subscribed
        driver = threading.Thread(target=_changes,
                                  args=(task_ids, worker_id, changes, rate, commits))
        driver.start()
        while driver.is_alive():
            await asyncio.sleep(0.1)
        await asyncio.sleep(2)  # the last signals
        cpu_before = _cpu_seconds(web_pid)
        await asyncio.sleep(idle)
        cpu_idle = _cpu_seconds(web_pid) - cpu_before
        for stream in streams:
            stream.cancel()
        await asyncio.gather(*streams, return_exceptions=True)
        return cpu_idle

    cpu_idle = asyncio.run(scenario())
    latencies = [(at - commits[key]) * 1000 for key, ats in seen.items() if key in commits
                 for at in ats]
    expected = len(commits) * clients
    row = [clients, len(refused), len(reopened), f"{len(latencies)}/{expected}",
           f"{percentile(latencies, 50):.0f}", f"{percentile(latencies, 95):.0f}",
           f"{percentile(latencies, 99):.0f}", f"{max(latencies):.0f}",
           f"{cpu_idle / idle / clients * 1000:.3f}"]
    if pages:
        shown = pages.latencies(commits)
        row += [f"{browsers}: p50 {percentile(shown, 50):.0f}, p95 "
                f"{percentile(shown, 95):.0f} ({len(shown)}/{len(commits) * browsers})"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clients", default="1,100,1000")
    parser.add_argument("--changes", type=int, default=60)
    parser.add_argument("--rate", type=float, default=5.0)
    parser.add_argument("--idle", type=float, default=10.0)
    parser.add_argument("--browsers", type=int, default=0,
                        help="real Chromium pages on My queues besides the SSE clients")
    parser.add_argument("--quick", action="store_true", help="1 and 50 clients, 20 changes")
    args = parser.parse_args()
    if args.quick:
        args.clients, args.changes, args.idle = "1,50", 20, 3.0
    if args.changes % 2:
        parser.error("--changes must be even (each task is claimed, then released)")
    if args.browsers and args.rate > 1:
        # A page's refresh is matched to the change before it: changes a second apart keep
        # each refresh the answer to one change (a refresh takes well under a second).
        args.rate = 1.0
    sizes = [int(n) for n in args.clients.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 4 * max(sizes) + 256)), hard))
    bench_environment()
    machine_print()
    with scratch_database("inbox_bench_live") as url:
        from django.db import connection

        skill = skills_create(1)[0]
        reviewers = workers_create(max(sizes) + args.browsers, skills_of=lambda i: [skill],
                                   prefix="reviewer")
        worker = workers_create(1, skills_of=lambda i: [skill], prefix="changer")[0]
        with connection.cursor() as cursor:
            tasks_insert(cursor, count=args.changes, skill_id=str(skill))
        from inbox.models import Task

        task_ids = list(Task.objects.order_by("created_at").values_list("pk", flat=True))
        sessions = sessions_signed_in(reviewers)
        if args.browsers:
            from django.core.management import call_command

            # The pages' script and styles, as a production web serves them (WhiteNoise).
            call_command("collectstatic", "--noinput", verbosity=0)
        port = free_port()
        web = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--no-access-log", "--log-level", "warning",
             "--timeout-graceful-shutdown", "1"],
            cwd=ROOT, env={**os.environ, "DATABASE_URL": url, "DATABASE_POOL_MAX": "20"})
        try:
            web_wait(port, web)
            rows = []
            for clients in sizes:
                # Each run claims and releases the same tasks: they end as they began.
                rows.append(run(clients, port=port, sessions=sessions, task_ids=task_ids,
                                worker_id=worker, changes=args.changes, rate=args.rate,
                                idle=args.idle, web_pid=web.pid, browsers=args.browsers))
                print(table(HEADERS + (BROWSERS if args.browsers else []), rows[-1:]),
                      flush=True)
            print("\nCommit -> signal read by every connected client (one uvicorn process):")
            print(table(HEADERS + (BROWSERS if args.browsers else []), rows))
            missed = [f"{row[0]:,} clients: {row[3]}" for row in rows
                      if len(set(row[3].split("/"))) > 1]
            if missed:
                # Every change must reach every open page (each stream reopened as a
                # browser reopens it): a signal not seen is a failure, not a figure.
                sys.exit(f"live: signals not seen by every client ({'; '.join(missed)})")
        finally:
            web.terminate()
            web.wait(timeout=10)


if __name__ == "__main__":
    main()
