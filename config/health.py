"""Liveness and readiness probes for load balancers, orchestrators and deploy scripts.

``/healthz`` answers as soon as the process serves requests and checks nothing else.
``/readyz`` checks what a web process needs to do its work: the database, the Celery
broker, Step Functions and SQS (the local emulator in development, AWS in production),
each with a short timeout. Both are open to anonymous callers and exempt from the HTTPS
redirect (settings.SECURE_REDIRECT_EXEMPT), so a load balancer can probe over plain HTTP;
neither says more than which check failed and a short reason, with any credentials in a
URL masked.
"""

import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

from django.contrib.auth.decorators import login_not_required
from django.db import connection
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from config.celery import app as celery_app
from processes import aws

# Seconds: each check gives up within about this long (the database's own connect timeout
# is set in settings.py).
BROKER_TIMEOUT = 2.0
# Seconds: /readyz answers within this, whatever hangs. The checks run side by side; one
# still running then is reported as not ready ("no answer within ...") and left to finish
# on its own thread, which its own timeout ends.
READY_DEADLINE = 1.8
_REASON_MAX = 200
# "scheme://user:password@host": keep the scheme, user and host, mask the password.
_URL_PASSWORD = re.compile(r"(\w+://[^/\s:@]*:)[^@\s]*@")


def _database() -> None:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    finally:
        # The check runs on a thread of its own: its connection goes with it.
        connection.close()


def _broker() -> None:
    # A connection of its own, dropped at once: the check must not hold a pooled one.
    with celery_app.connection_for_write(connect_timeout=BROKER_TIMEOUT) as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0,
                               timeout=BROKER_TIMEOUT)


CHECKS: dict[str, Callable[[], None]] = {
    "database": _database,
    "broker": _broker,
    "stepfunctions": aws.states_ping,
    "sqs": aws.sqs_ping,
}


def reason_of(exc: BaseException) -> str:
    """Return a short, credential-free reason for exc: its type and first line."""
    lines = str(exc).strip().splitlines()
    text = _URL_PASSWORD.sub(r"\1***@", lines[0] if lines else "")
    if len(text) > _REASON_MAX:
        text = text[: _REASON_MAX - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _timed(check: Callable[[], None]) -> dict:
    started = time.perf_counter()
    try:
        check()
    except Exception as exc:
        # Reported in the answer (503) rather than raised: the caller wants to know which.
        result = {"ok": False, "error": reason_of(exc)}
    else:
        result = {"ok": True}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def readiness(*, deadline: float | None = None) -> tuple[bool, dict[str, dict]]:
    """Run every check side by side; return whether all passed, and each one's result.

    A check still running after deadline seconds (READY_DEADLINE) counts as failed.
    """
    deadline = READY_DEADLINE if deadline is None else deadline
    pool = ThreadPoolExecutor(max_workers=len(CHECKS), thread_name_prefix="readyz")
    try:
        futures = {name: pool.submit(_timed, check) for name, check in CHECKS.items()}
        wait(futures.values(), timeout=deadline)
    finally:
        # Do not wait for a hung check: its thread ends with its own timeout.
        pool.shutdown(wait=False, cancel_futures=True)
    results: dict[str, dict] = {}
    for name, future in futures.items():
        if future.done():
            results[name] = future.result()
        else:
            results[name] = {"ok": False, "error": f"no answer within {deadline:g} s",
                             "ms": round(deadline * 1000, 1)}
    return all(result["ok"] for result in results.values()), results


@login_not_required
@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """Say the process is alive: it answers; no dependency is checked."""
    return JsonResponse({"status": "ok"})


@login_not_required
@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    """Say whether the process can work: 200 when every check passes, else 503."""
    ready, checks = readiness()
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks},
        status=200 if ready else 503,
    )
