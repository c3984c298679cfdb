"""Metrics in Prometheus' text format: queues, clocks, the outbox, the intake, callback errors.

config/prometheus/alerts.yml holds the alert rules that read them (tests/config/test_alerts.py
runs promtool on them).

Gauges are read when /metrics is scraped, with a fixed number of aggregate queries (their
count does not grow with the data), so every web process gives the same answer: scrape
through the load balancer. Counters that several processes add to (callback errors and
recovered orphans, counted by the Celery workers) live in the shared cache, Redis in
production, so they survive across processes and restarts of a process; a flushed cache
starts them again at zero, which Prometheus' rate() and increase() treat as a counter
reset.

A source that does not answer (SQS, the cache) sets ``inbox_scrape_error{source=...}`` to 1
and leaves its metrics out, instead of failing the whole page; the database failing does
fail the page (the scrape's ``up`` goes to 0).
"""

import datetime
import hmac
import logging
from collections.abc import Iterator
from enum import StrEnum

from django.conf import settings
from django.contrib.auth.decorators import login_not_required
from django.core.cache import caches
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from accounts.models import Skill
from config.errors import ExternalServiceError
from inbox.board import skill_counts
from inbox.models import OPEN_STATES, Outbox, OutboxStatus, SignalOutbox, Task
from inbox.ratelimit import CACHE_ALIAS, counter_increment
from inbox.services.clock import clocks
from processes import aws

logger = logging.getLogger(__name__)

_COUNTER_KEY = "inbox:metrics:{name}:{label}"


class CallbackError(StrEnum):
    """Why one attempt to send a callback to Step Functions did not land."""

    THROTTLED = "throttled"  # AWS throttled the call; retried with backoff
    TRANSIENT = "transient"  # a 5xx, a timeout or a network error; retried with backoff
    # TaskTimedOut, InvalidToken...: Step Functions no longer waits; reconciled.
    TOKEN_REFUSED = "token_refused"  # noqa: S105 (a label, not a secret)
    REJECTED = "rejected"  # another 4xx: the callback is dead at once
    INVALID = "invalid"  # output or error Step Functions would refuse; never sent
    # No configured key decrypts the stored token.
    TOKEN_UNREADABLE = "token_unreadable"  # noqa: S105 (a label, not a secret)


# Counters -------------------------------------------------------------------------------


def _counter_add(*, name: str, label: str) -> None:
    key = _COUNTER_KEY.format(name=name, label=label)
    try:
        # The rate limit's cross-process increment: Redis INCR, or INCR under a file lock
        # beside the file cache (the local default), so concurrent workers lose no count.
        # No timeout: a counter lives until the cache is flushed.
        counter_increment(cache=caches[CACHE_ALIAS], key=key, timeout=None)
    except Exception as exc:
        # A metric must not stop a callback; the miss is logged where it happened.
        logger.warning("Metric %s{%s} not counted, the cache failed: %s", name, label, exc)


def callback_error_count(*, kind: CallbackError) -> None:
    """Count one failed callback attempt of kind (inbox_callback_errors_total)."""
    _counter_add(name="callback_errors", label=kind.value)


def callback_dead_count() -> None:
    """Count one callback given up on (inbox_callbacks_dead_total)."""
    _counter_add(name="callbacks_dead", label="all")


def orphan_recovered_count() -> None:
    """Count one orphaned wait taken in from its history (inbox_orphans_recovered_total)."""
    _counter_add(name="orphans_recovered", label="all")


def _counters_read() -> dict[str, int]:
    """Return every counter by cache key, 0 for those never incremented (one cache read)."""
    keys = [_COUNTER_KEY.format(name="callback_errors", label=kind.value)
            for kind in CallbackError]
    keys.append(_COUNTER_KEY.format(name="callbacks_dead", label="all"))
    keys.append(_COUNTER_KEY.format(name="orphans_recovered", label="all"))
    values = caches[CACHE_ALIAS].get_many(keys)
    return {key: int(values.get(key) or 0) for key in keys}


# The collector --------------------------------------------------------------------------


class InboxCollector:
    """Read every metric now; prometheus_client formats what collect() yields."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        scrape_error = GaugeMetricFamily(
            "inbox_scrape_error", "1 when a source did not answer and its metrics are left out.",
            labels=["source"],
        )
        yield from self._tasks(now)
        yield from self._clocks(now)
        yield from self._outbox(now)
        try:
            yield from self._intake()
            scrape_error.add_metric(["sqs"], 0)
        except ExternalServiceError as exc:
            logger.warning("Metrics: SQS did not answer: %s", exc.message)
            scrape_error.add_metric(["sqs"], 1)
        try:
            yield from self._counters()
            scrape_error.add_metric(["cache"], 0)
        except Exception as exc:
            logger.warning("Metrics: the cache did not answer: %s", exc)
            scrape_error.add_metric(["cache"], 1)
        yield scrape_error

    def _tasks(self, now: datetime.datetime) -> Iterator[Metric]:
        skills = list(Skill.objects.order_by("slug"))
        rows = skill_counts(skills=skills, now=now)
        tasks = GaugeMetricFamily(
            "inbox_tasks", "Open tasks by state and skill (tasks waiting for their callback "
            "are in inbox_outbox_pending).", labels=["state", "skill"],
        )
        oldest = GaugeMetricFamily(
            "inbox_tasks_oldest_waiting_seconds",
            "Age of the oldest queued task of the skill; 0 when none waits.", labels=["skill"],
        )
        overdue = GaugeMetricFamily(
            "inbox_tasks_overdue",
            "Open tasks of the skill past their offer, work or overall deadline.",
            labels=["skill"],
        )
        for row in rows:
            slug = row["skill"].slug
            for state in OPEN_STATES:
                tasks.add_metric([state.value, slug], row[state.value])
            waited = (now - row["oldest"]).total_seconds() if row["oldest"] else 0.0
            oldest.add_metric([slug], max(waited, 0.0))
            overdue.add_metric([slug], row["overdue"])
        yield from (tasks, oldest, overdue)

    def _clocks(self, now: datetime.datetime) -> Iterator[Metric]:
        lateness = GaugeMetricFamily(
            "inbox_clock_lateness_seconds",
            "How long the clock's earliest due deadline has waited for the clock process to "
            "apply it; 0 when none is due.", labels=["clock"],
        )
        for clock in clocks(now):
            # The sweeper's own due rows: one MIN per clock, read from its partial index.
            first = Task.objects.filter(clock.due).aggregate(first=Min(clock.column))["first"]
            late = (now - first).total_seconds() if first else 0.0
            lateness.add_metric([clock.name], max(late, 0.0))
        yield lateness

    def _outbox(self, now: datetime.datetime) -> Iterator[Metric]:
        backlog = Outbox.objects.filter(status=OutboxStatus.PENDING).aggregate(
            pending=Count("id"), oldest=Min("created_at")
        )
        yield GaugeMetricFamily(
            "inbox_outbox_pending", "Callbacks written and not yet accepted by Step Functions.",
            value=backlog["pending"],
        )
        age = (now - backlog["oldest"]).total_seconds() if backlog["oldest"] else 0.0
        yield GaugeMetricFamily(
            "inbox_outbox_oldest_pending_seconds",
            "Age of the oldest pending callback; 0 when none is pending.", value=max(age, 0.0),
        )
        signals = SignalOutbox.objects.filter(sent_at__isnull=True).aggregate(
            pending=Count("id"), oldest=Min("event__at"))
        yield GaugeMetricFamily(
            "inbox_signals_pending",
            "Change signals written and not yet accepted by the EventBridge bus.",
            value=signals["pending"],
        )
        age = (now - signals["oldest"]).total_seconds() if signals["oldest"] else 0.0
        yield GaugeMetricFamily(
            "inbox_signals_oldest_pending_seconds",
            "Age of the change the oldest pending signal tells of; 0 when none is pending.",
            value=max(age, 0.0),
        )

    def _intake(self) -> Iterator[Metric]:
        dlq = aws.queue_depth(name=settings.INBOX_INTAKE_DLQ)
        queue = aws.queue_depth(name=settings.INBOX_INTAKE_QUEUE)
        yield GaugeMetricFamily(
            "inbox_intake_dlq_messages",
            "Messages in the intake's dead-letter queue (SQS ApproximateNumberOfMessages).",
            value=dlq,
        )
        yield GaugeMetricFamily(
            "inbox_intake_queue_messages",
            "Messages waiting in the intake queue (SQS ApproximateNumberOfMessages).",
            value=queue,
        )

    def _counters(self) -> Iterator[Metric]:
        values = _counters_read()
        errors = CounterMetricFamily(
            "inbox_callback_errors", "Failed attempts to send a callback, by kind.",
            labels=["kind"],
        )
        for kind in CallbackError:
            errors.add_metric(
                [kind.value], values[_COUNTER_KEY.format(name="callback_errors", label=kind.value)]
            )
        dead = CounterMetricFamily(
            "inbox_callbacks_dead", "Callbacks given up on (dead: requeue them in the admin).",
            value=values[_COUNTER_KEY.format(name="callbacks_dead", label="all")],
        )
        orphans = CounterMetricFamily(
            "inbox_orphans_recovered",
            "Executions found waiting at a human stage with no task, whose envelope was "
            "taken in from their history (the intake message was lost).",
            value=values[_COUNTER_KEY.format(name="orphans_recovered", label="all")],
        )
        yield from (errors, dead, orphans)


def metrics_text() -> bytes:
    """Return every metric in Prometheus' text exposition format."""
    return generate_latest(InboxCollector())


# The page ---------------------------------------------------------------------------------


def _bearer_ok(request: HttpRequest) -> bool | None:
    """Return whether the request's bearer token is right, or None when it sends none."""
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    expected = settings.INBOX_METRICS_TOKEN
    # Constant time: a timing difference must not tell how much of a guess was right.
    return bool(expected) and hmac.compare_digest(given.strip().encode(), expected.encode())


@login_not_required
@never_cache
@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    """Serve the metrics to a scraper with the bearer token, or to signed-in staff."""
    bearer = _bearer_ok(request)
    if bearer is False:
        return _refused(401, "The bearer token is wrong.")
    if bearer is None and not request.user.is_staff:
        if request.user.is_authenticated:
            return _refused(403, "Metrics are for staff, or for a scraper with the token.")
        return _refused(401, "Send the INBOX_METRICS_TOKEN as a bearer token, or sign in.")
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_LATEST)


def _refused(status: int, message: str) -> HttpResponse:
    response = HttpResponse(message + "\n", status=status, content_type="text/plain")
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
    return response
