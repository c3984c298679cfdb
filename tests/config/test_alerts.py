"""config/prometheus/alerts.yml: promtool accepts it, and its unit tests prove every alert.

config/prometheus/alerts_test.yml holds the series: each failure an alert is for, and a
state that looks like one and must not alert. tests/config/test_alerts_fire.py scrapes the
real /metrics into the same rules.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.promtool import PROMTOOL, ROOT, RULES, UNIT_TESTS, alert_rules, promtool

OPERATIONS = ROOT / "docs" / "OPERATIONS.md"


def _unit_cases() -> list[dict]:
    document = yaml.safe_load(UNIT_TESTS.read_text(encoding="utf-8"))
    return [case for test in document["tests"] for case in test.get("alert_rule_test", [])]


@pytest.mark.promtool
def test_alert_rules_pass_promtool_check():
    out = promtool("check", "rules", RULES)
    assert f"SUCCESS: {len(alert_rules())} rules found" in out


@pytest.mark.promtool
def test_each_alert_fires_on_its_failure_and_not_on_what_only_looks_like_one():
    assert "SUCCESS" in promtool("test", "rules", UNIT_TESTS)


@pytest.mark.promtool
def test_the_unit_tests_fail_when_a_threshold_is_wrong(tmp_path: Path):
    """The harness can fail: one threshold moved, and promtool says which alert broke."""
    rules = RULES.read_text(encoding="utf-8")
    moved = rules.replace("inbox_intake_dlq_messages > 0", "inbox_intake_dlq_messages > 1")
    assert moved != rules
    (tmp_path / "alerts.yml").write_text(moved, encoding="utf-8")
    shutil.copy(UNIT_TESTS, tmp_path / "alerts_test.yml")
    result = subprocess.run([PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0
    assert "alertname: InboxIntakeDeadLetters" in result.stdout + result.stderr


def test_every_alert_has_a_case_where_it_fires_and_one_where_it_must_not():
    cases = _unit_cases()
    names = [rule["alert"] for rule in alert_rules()]
    assert len(names) == len(set(names)), "two rules share an alert name"
    fires = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert not sorted(set(names) - fires), "alerts no unit test makes fire"
    assert not sorted(set(names) - quiet), "alerts no unit test expects quiet"
    assert not sorted({case["alertname"] for case in cases} - set(names)), "tests of no alert"


def test_every_alert_says_how_urgent_it_is_and_where_its_runbook_is():
    for rule in alert_rules():
        assert rule["labels"]["severity"] in ("critical", "warning"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        assert rule["annotations"]["runbook"] == "docs/OPERATIONS.md#alarms", rule["alert"]


def test_the_operations_doc_says_what_to_do_for_every_alert_and_names_no_other():
    text = OPERATIONS.read_text(encoding="utf-8")
    section = text.split("\n## Alarms\n", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(Inbox\w+)` \|", section, re.M))
    names = {rule["alert"] for rule in alert_rules()}
    assert rows == names
    assert "config/prometheus/alerts.yml" in section
