"""Validate envelopes against the JSON Schema of their kind (processes/contract.py).

The JSON Schemas live in processes/schemas/ and are published in docs/ENVELOPE.md.
``envelope_problems`` describes what is wrong without quoting values: an envelope
carries a task token, which must never reach an error message or a log line.
"""

import functools
import json
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from processes.contract import HUMAN_TASK, PROCESS_FAILURE

SCHEMAS = Path(__file__).resolve().parent / "schemas"
KINDS = {
    HUMAN_TASK: "human-task-v1.schema.json",
    PROCESS_FAILURE: "process-failure-v1.schema.json",
}


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / KINDS[kind]).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def envelope_schema(kind: str) -> dict[str, Any]:
    """Return the JSON Schema of an envelope kind."""
    return _validator(kind).schema


def envelope_problems(message: Any) -> list[str]:
    """Return what is wrong with message, as "path: rule" lines; empty when it is valid."""
    if not isinstance(message, dict):
        return ["(top): must be a JSON object"]
    kind = message.get("kind")
    if kind not in KINDS:
        return [f"kind: must be one of {', '.join(sorted(KINDS))}"]
    problems = []
    for error in sorted(_validator(kind).iter_errors(message), key=lambda e: list(e.path)):
        where = ".".join(str(part) for part in error.path) or "(top)"
        problems.append(f"{where}: {_rule(error)}")
    # jsonschema reports each missing required field as its own error with one text.
    return list(dict.fromkeys(problems))


def _rule(error: Any) -> str:
    """Describe the rule an error broke, never the offending value."""
    rule, expected = error.validator, error.validator_value
    if rule == "required":
        missing = sorted(set(expected) - set(error.instance or {}))
        return f"required field(s) missing: {', '.join(missing)}"
    if rule == "additionalProperties":
        unknown = sorted(set(error.instance or {}) - set(error.schema.get("properties", {})))
        return f"unknown field(s): {', '.join(unknown)}"
    messages = {
        "type": f"must be of type {expected}",
        "const": f"must be {expected!r}",
        "pattern": f"must match {expected}",
        "minLength": f"must be at least {expected} characters",
        "maxLength": f"must be at most {expected} characters",
        "minimum": f"must be at least {expected}",
        "maximum": f"must be at most {expected}",
        "uniqueItems": "must not repeat items",
    }
    if rule == "enum":
        return f"must be one of {', '.join(map(str, expected))}"
    return messages.get(rule, f"breaks the {rule} rule")
