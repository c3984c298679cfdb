"""The alert rules on the real /metrics: a poison envelope in the DLQ fires the DLQ alert.

Nothing here is typed in: a malformed envelope goes onto the emulator's intake queue, the
real intake refuses it until SQS's redrive policy moves it to the dead-letter queue, and
/metrics is scraped through the Django test client. Every sample of that scrape becomes a
promtool input series, held for 15 minutes (a Prometheus scraping an inbox that stays so),
and `promtool test rules` evaluates config/prometheus/alerts.yml on them.
"""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.conf import settings
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from inbox.services.intake import intake_poll
from processes import aws
from tests.promtool import RULES, alert_rules, held, promtool, series_name

TOKEN = "alert-rules-scraper-token-" + "x" * 24
# What Prometheus adds to every series it scrapes (docs/OPERATIONS.md's scrape_configs).
TARGET = {"job": "inbox", "instance": "testserver"}
MINUTES = 15  # longer than any rule's `for` (10 m), so a rule that would fire has fired
POISON = "not an envelope: the intake refuses it on every receive"

Scrape = list[tuple[str, dict[str, str], float]]


@pytest.fixture(autouse=True)
def metrics_token(settings) -> None:
    settings.INBOX_METRICS_TOKEN = TOKEN


def _scrape() -> tuple[int, Scrape]:
    """Return /metrics' status and every sample it served: (name, labels, value)."""
    response = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200, response.content
    samples = [(sample.name, dict(sample.labels), sample.value)
               for family in text_string_to_metric_families(response.content.decode())
               for sample in family.samples]
    return response.status_code, samples


def _value(samples: Scrape, name: str) -> float:
    (value,) = [value for sample, _labels, value in samples if sample == name]
    return value


def _rule_test(status: int, samples: Scrape, *, firing: dict[str, list[dict[str, Any]]],
               directory: Path) -> str:
    """Evaluate every alert on the scrape held for MINUTES; expect firing, the rest quiet.

    Prometheus records `up` as 1 for a scrape that answered 200, and adds the target's
    job and instance to each sample; the input series do the same.
    """
    series = [{"series": series_name("up", TARGET),
               "values": held(1.0 if status == 200 else 0.0, minutes=MINUTES)}]
    series += [{"series": series_name(name, {**labels, **TARGET}),
                "values": held(value, minutes=MINUTES)}
               for name, labels, value in samples]
    cases = [{"eval_time": f"{MINUTES}m", "alertname": rule["alert"],
              "exp_alerts": firing.get(rule["alert"], [])} for rule in alert_rules()]
    assert set(firing) <= {case["alertname"] for case in cases}
    document = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"name": "the scrape, held", "interval": "1m", "input_series": series,
                   "alert_rule_test": cases}],
    }
    path = directory / "scrape_test.yml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return promtool("test", "rules", path)


@pytest.mark.promtool
@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_a_poison_envelope_in_the_dead_letter_queue_fires_the_dlq_alert(
    private_intake, review_skill, tmp_path
):
    status, healthy = _scrape()
    assert _value(healthy, "inbox_intake_dlq_messages") == 0
    # An inbox with an empty dead-letter queue and nothing else wrong raises no alert.
    _rule_test(status, healthy, firing={}, directory=tmp_path)

    aws.message_send(url=aws.queue_url(name=settings.INBOX_INTAKE_QUEUE), body=POISON)
    # A visibility timeout of 0 shows the refused message again at once, so one poll
    # receives it INBOX_INTAKE_MAX_RECEIVES times and SQS's redrive then moves it.
    counts = intake_poll(wait_seconds=0, budget_seconds=60, visibility_timeout=0)
    assert counts["invalid"] == settings.INBOX_INTAKE_MAX_RECEIVES

    status, poisoned = _scrape()
    depth = _value(poisoned, "inbox_intake_dlq_messages")
    assert depth == 1
    _rule_test(status, poisoned, directory=tmp_path, firing={"InboxIntakeDeadLetters": [{
        "exp_labels": {"severity": "critical", **TARGET},
        "exp_annotations": {
            "summary": f"{depth:g} envelope(s) in the intake dead-letter queue: their "
                       "executions wait for a task that does not exist",
            "runbook": "docs/OPERATIONS.md#alarms",
        },
    }]})
    # And what the scrape counted is the poison envelope itself.
    dead = aws.messages_receive(url=aws.queue_url(name=settings.INBOX_INTAKE_DLQ),
                                wait_seconds=0, visibility_timeout=60)
    assert [message["Body"] for message in dead] == [POISON]


@pytest.mark.emulator
@pytest.mark.django_db
def test_every_metric_the_alert_rules_read_is_one_metrics_serves(private_intake,
                                                                 review_skill):
    """With a skill, so the per-skill gauges are served too."""
    _status, samples = _scrape()
    served = {name for name, _labels, _value in samples}
    read = {name for rule in alert_rules() for name in _metric_names(rule["expr"])}
    assert read - {"up"}
    assert not sorted(read - served - {"up"})


def _metric_names(expr: str) -> set[str]:
    """Return the metric names an expression reads: the inbox's, and Prometheus' up."""
    return set(re.findall(r"\b(inbox_\w+|up)\b", expr))
