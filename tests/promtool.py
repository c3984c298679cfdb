"""promtool, from Debian's prometheus package, for the tests of config/prometheus/alerts.yml.

Tests that run it carry the ``promtool`` mark: tests/conftest.py skips them, naming the
package, where /usr/bin/promtool is missing (.ci/run installs it).
"""

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
PROMTOOL = "/usr/bin/promtool"
RULES = ROOT / "config" / "prometheus" / "alerts.yml"
UNIT_TESTS = ROOT / "config" / "prometheus" / "alerts_test.yml"


def promtool(*args: str | Path) -> str:
    """Run promtool with args; fail the test with promtool's own output unless it succeeds."""
    command = [PROMTOOL, *map(str, args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT,
                            check=False)
    if result.returncode != 0:
        pytest.fail(f"{' '.join(command)} exited {result.returncode}:\n"
                    f"{result.stdout}{result.stderr}", pytrace=False)
    return result.stdout


def alert_rules() -> list[dict[str, Any]]:
    """Return every alerting rule of alerts.yml, in file order."""
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    return [rule for group in document["groups"] for rule in group["rules"] if "alert" in rule]


def series_name(name: str, labels: dict[str, str]) -> str:
    """Return a promtool input series selector: name{label="value", ...}."""
    # A JSON string is a valid PromQL string literal for these values (", \ and escapes).
    inner = ", ".join(f"{key}={json.dumps(value)}" for key, value in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def held(value: float, *, minutes: int) -> str:
    """Return promtool's values for a sample that stays value for minutes more minutes."""
    return f"{value:f}+0x{minutes}"
