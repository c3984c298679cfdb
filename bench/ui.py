#!/usr/bin/env python3
"""Submit → next task usable in Chromium: Complete and next swapped in place, and as a page load.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/ui.py
        [--tasks 40] [--quick]

A scratch database, one reviewer (capacity 100) of one pull queue with 2 x (--tasks + 3) + 1
tasks shaped like the demo's invoices (invoice id, supplier, amount and currency; the
built-in approve-reject form). uvicorn serves config.asgi with its static files (WhiteNoise,
as in production; the default INBOX_UNDO_SECONDS, so each next page offers its undo);
Debian's /usr/bin/chromium, headless through Playwright, opens the first task and then, for
each mode, 3 times to warm up and --tasks times measured, presses 1 (Approve) and
Ctrl+Enter, the reviewer's two keys:

- swap: the page as served: inbox.js posts the answer with fetch and the decision's response
  is the next task's page, swapped in without a new document;
- page load: the same page with the form's data-swap taken away: the POST, its redirect
  and the GET of a new document, as without the swap (and as before it).

Submit → usable is the browser's own clock (performance.timeOrigin + now(), which spans
documents) from the Ctrl+Enter keydown to the first frame painted after the next task's page
started: its DOMContentLoaded (after inbox.js ran) for a loaded page, inbox:swapped (after
focus moved to it) for a swapped one. The answer is committed before: the server renders
or redirects only after the decision's transaction. Requests are every request the submit
caused (the live stream's included, the favicon not); KB are their responses' headers and
bodies (Playwright's sizes; a stream that stays open counts its headers). Prints p50, p95
and max per mode; asserts nothing about time.
"""

import argparse
import os
import statistics
import subprocess
import sys

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

HEADERS = ["mode", "tasks", "usable p50 ms", "p95 ms", "max ms", "server p50 ms",
           "requests per task", "KB per task"]
WARM_UP = 3
DEMO_INPUT = (
    "jsonb_build_object('invoice_id', 'INV-' || (1000 + n), 'supplier', "
    "(ARRAY['Acme Paper', 'Globex', 'Initech'])[1 + n % 3], 'amount', 100 + (n * 37) % 20000, "
    "'currency', (ARRAY['EUR', 'USD'])[1 + n % 2])"
)
# In every document: when Ctrl+Enter goes down, and when the next page is usable (the first
# frame after it started), in sessionStorage, which outlives a page load.
PROBE = """(() => {
    const now = () => performance.timeOrigin + performance.now();
    document.addEventListener("keydown", (event) => {
        if (event.key === "Enter" && event.ctrlKey) {
            sessionStorage.setItem("bench:t0", String(now()));
        }
    }, true);
    const usable = () => requestAnimationFrame(() => setTimeout(() => {
        sessionStorage.setItem("bench:t1", String(now()));
    }, 0));
    document.addEventListener("DOMContentLoaded", usable);
    document.addEventListener("inbox:swapped", usable);
})();"""


def _first_task(skill_id: int, worker_id: int, count: int) -> str:
    """Insert count demo-like tasks; the worker takes the first; return its id."""
    from django.db import connection

    from accounts.models import User
    from inbox.services.worker import task_take_next

    with connection.cursor() as cursor:
        tasks_insert(cursor, count=count, skill_id=str(skill_id), input=DEMO_INPUT,
                     process_name="'invoice-approval'",
                     title="'Review invoice INV-' || (1000 + n)")
    return str(task_take_next(worker=User.objects.get(pk=worker_id)).pk)



class Traffic:
    """The requests of the page since the last reset: count, sizes, time to first byte."""

    def __init__(self, page) -> None:
        self.requests: list = []
        page.on("request", self._seen)

    def _seen(self, request) -> None:
        if not request.url.endswith("/favicon.svg"):
            self.requests.append(request)

    def reset(self) -> None:
        self.requests = []

    def figures(self) -> tuple[int, float, float]:
        """Return the count, the KB of the finished responses, the ms to their first bytes."""
        size = waited = 0.0
        for request in self.requests:
            if request.response() is None or "/live/" in request.url:
                # The live stream stays open: its headers alone (it has no end).
                response = request.response()
                size += len(str(response.headers)) if response else 0
                continue
            sizes = request.sizes()
            size += sizes["responseHeadersSize"] + sizes["responseBodySize"]
            timing = request.timing
            waited += max(timing["responseStart"] - timing["requestStart"], 0)
        return len(self.requests), size / 1024, waited


def _one(page, traffic: Traffic, *, swap: bool) -> tuple[float, int, float, float]:
    """Answer the task shown and wait for the next one; return its figures."""
    title = page.title()
    if not swap:
        page.evaluate("document.getElementById('answer-form').removeAttribute('data-swap')")
    page.evaluate("sessionStorage.removeItem('bench:t0'); sessionStorage.removeItem('bench:t1')")
    traffic.reset()
    page.keyboard.press("1")
    page.keyboard.press("Control+Enter")
    page.wait_for_function(
        "title => document.title !== title && sessionStorage.getItem('bench:t1') !== null",
        arg=title, polling=5)
    started, usable = page.evaluate(
        "[Number(sessionStorage.getItem('bench:t0')), Number(sessionStorage.getItem('bench:t1'))]")
    if page.evaluate("document.activeElement.id") != "task-title":
        raise RuntimeError(f"The next task's page did not take focus ({page.url}).")
    page.wait_for_load_state()
    requests, size, waited = traffic.figures()
    return usable - started, requests, size, waited


def measure(port: int, session: str, first: str, *, tasks: int) -> list[list[object]]:
    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{port}"
    rows: list[list[object]] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             headless=True, args=["--no-sandbox"])
        context = browser.new_context(base_url=base)
        context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
        context.add_init_script(PROBE)
        page = context.new_page()
        page.set_default_timeout(20_000)
        traffic = Traffic(page)
        page.goto(f"/tasks/{first}/")
        page.wait_for_function("document.activeElement.id === 'task-title'")
        for swap in (True, False):
            runs = [_one(page, traffic, swap=swap) for _ in range(WARM_UP + tasks)][WARM_UP:]
            usable = [run[0] for run in runs]
            rows.append([
                "swap" if swap else "page load", tasks, round(statistics.median(usable), 1),
                round(percentile(usable, 95), 1), round(max(usable), 1),
                round(statistics.median(run[3] for run in runs), 1),
                round(statistics.mean(run[1] for run in runs), 1),
                round(statistics.mean(run[2] for run in runs), 1),
            ])
            print(table(HEADERS, rows[-1:]), flush=True)
        browser.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--tasks", type=int, default=40, help="measured tasks per mode")
    parser.add_argument("--quick", action="store_true", help="10 tasks per mode")
    args = parser.parse_args()
    if args.quick:
        args.tasks = 10
    bench_environment()
    machine_print()
    with scratch_database("inbox_bench_ui") as url:
        from django.core.management import call_command

        skill = skills_create(1)[0]
        worker = workers_create(1, skills_of=lambda i: [skill], prefix="reviewer")[0]
        first = _first_task(skill, worker, 2 * (WARM_UP + args.tasks) + 1)
        session, = sessions_signed_in([worker])
        call_command("collectstatic", "--noinput", verbosity=0)
        port = free_port()
        web = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--no-access-log", "--log-level", "warning",
             "--timeout-graceful-shutdown", "1"],
            cwd=ROOT, env={**os.environ, "DATABASE_URL": url})
        try:
            web_wait(port, web)
            rows = measure(port, session, first, tasks=args.tasks)
            print("\nComplete and next in Chromium, submit (Ctrl+Enter) → next task usable, "
                  "by the browser's clock:")
            print(table(HEADERS, rows))
        finally:
            web.terminate()
            web.wait(timeout=10)


if __name__ == "__main__":
    main()
