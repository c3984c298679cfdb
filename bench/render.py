#!/usr/bin/env python3
"""Task page render time in Chromium: a plain input against one holding a long unbroken string.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/render.py
        [--sizes 100000,1000000] [--runs 3] [--quick]

A scratch database, one worker holding a task per size (its input an invoice id and a
string of that many "A"s, no space in it) and one plain task (the invoice id alone).
uvicorn serves config.asgi with its static files (WhiteNoise, as in production); Debian's
/usr/bin/chromium, headless through Playwright, opens each task page --runs times, with
JavaScript on and off (the probe of issue #13 saw 17-19 s for 100 KB either way). Figures
are Chromium's own clock from the navigation's start: the response received, the load
event, and the page laid out (style and layout of the whole page forced after load: the
load event does not wait for them, and laying out is where a long run's line breaking
costs). The median run is printed. (Before the fix a page's layout grew with the square of
the run's length: against such a commit, give --sizes 100000 alone.)
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
    scratch_database,
    sessions_signed_in,
    skills_create,
    table,
    tasks_insert,
    web_wait,
    workers_create,
)

HEADERS = ["page", "JavaScript", "HTML KB", "response ms", "load ms", "laid out ms"]
# Run after the load event: forces the style and layout of the whole page (where the
# line breaking of a long run costs), synchronously, so it works with JavaScript off too.
LAID_OUT = """() => {
    document.documentElement.getBoundingClientRect();
    document.body.offsetHeight;
    const navigation = performance.getEntriesByType("navigation")[0];
    return [navigation.responseEnd, navigation.loadEventEnd, performance.now(),
            navigation.decodedBodySize];
}"""


def _tasks(skill_id: int, worker_id: int, sizes: list[int]) -> dict[str, str]:
    """Insert and claim a plain task and one per size; return their ids by page name."""
    from django.db import connection

    from accounts.models import User
    from inbox.lifecycle import transition
    from inbox.models import Task

    pages = {"plain input": "jsonb_build_object('invoice_id', 'INV-42')"}
    for size in sizes:
        pages[f"{size:,} characters unbroken"] = (
            f"jsonb_build_object('invoice_id', 'INV-42', 'blob', repeat('A', {int(size)}))")
    worker = User.objects.get(pk=worker_id)
    ids = {}
    for n, (name, input_sql) in enumerate(pages.items(), start=1):
        with connection.cursor() as cursor:
            tasks_insert(cursor, count=1, start=n, skill_id=str(skill_id), input=input_sql)
        task = Task.objects.get(execution_arn__endswith=f":{n}")
        transition(task_id=task.pk, action="claim", actor=worker)
        ids[name] = str(task.pk)
    return ids



def measure(port: int, session: str, ids: dict[str, str], *, runs: int) -> list[list[object]]:
    """Open each page runs times with JavaScript on and off; return a row per page and mode."""
    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{port}"
    rows: list[list[object]] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                             headless=True, args=["--no-sandbox"])
        for script in (True, False):
            context = browser.new_context(base_url=base, java_script_enabled=script)
            context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
            page = context.new_page()
            page.goto(f"/tasks/{ids['plain input']}/")  # styles and script in the cache
            for name, task_id in ids.items():
                figures = []
                for _ in range(runs):
                    page.goto(f"/tasks/{task_id}/", wait_until="load")
                    figures.append(page.evaluate(LAID_OUT))
                response, load, laid_out, size = (statistics.median(f[i] for f in figures)
                                                  for i in range(4))
                rows.append([name, "on" if script else "off", round(size / 1024), response,
                             load, laid_out])
                print(table(HEADERS, rows[-1:]), flush=True)
            context.close()
        browser.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="100000,1000000")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100,000 characters, one run")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.runs = "100000", 1
    sizes = [int(n) for n in args.sizes.split(",")]
    bench_environment()
    machine_print()
    with scratch_database("inbox_bench_render") as url:
        from django.core.management import call_command

        skill = skills_create(1)[0]
        worker = workers_create(1, skills_of=lambda i: [skill], prefix="reader")[0]
        ids = _tasks(skill, worker, sizes)
        session, = sessions_signed_in([worker])
        # The pages' script and styles, as a production web serves them (WhiteNoise).
        call_command("collectstatic", "--noinput", verbosity=0)
        port = free_port()
        web = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "config.asgi:application", "--host", "127.0.0.1",
             "--port", str(port), "--no-access-log", "--log-level", "warning",
             "--timeout-graceful-shutdown", "1"],
            cwd=ROOT, env={**os.environ, "DATABASE_URL": url})
        try:
            web_wait(port, web)
            rows = measure(port, session, ids, runs=args.runs)
            print(f"\nTask page in Chromium, median of {args.runs} run(s), ms from the "
                  "navigation's start:")
            print(table(HEADERS, rows))
        finally:
            web.terminate()
            web.wait(timeout=10)


if __name__ == "__main__":
    main()
