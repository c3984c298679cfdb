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
_REASON_MAX = 200
# "scheme://user:password@host": keep the scheme, user and host, mask the password.
_URL_PASSWORD = re.compile(r"(\w+://[^/\s:@]*:)[^@\s]*@")


def _database() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()


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


def readiness() -> tuple[bool, dict[str, dict]]:
    """Run every check; return whether all passed, and each one's result and latency."""
    results: dict[str, dict] = {}
    for name, check in CHECKS.items():
        started = time.perf_counter()
        try:
            check()
        except Exception as exc:
            # Reported in the answer (503) rather than raised: the caller wants to know which.
            results[name] = {"ok": False, "error": reason_of(exc)}
        else:
            results[name] = {"ok": True}
        results[name]["ms"] = round((time.perf_counter() - started) * 1000, 1)
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
