"""Validate envelopes against the JSON Schema of their kind (processes/contract.py).

The JSON Schemas live in processes/schemas/ and are published in docs/ENVELOPE.md.
``envelope_read`` parses a message body, refusing one nested too deep before json.loads
recurses through it; ``envelope_problems`` describes what is wrong without quoting values:
an envelope carries a task token, which must never reach an error message or a log line.
Besides its schema, an envelope is bounded: its input by Step Functions' own payload
limit and by a depth, and every string must be text PostgreSQL can store.
"""

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator

from config.json_bounds import MAX_DEPTH, json_depth, value_depth
from processes.contract import HUMAN_TASK, PROCESS_FAILURE

SCHEMAS = Path(__file__).resolve().parent / "schemas"
KINDS = {
    HUMAN_TASK: "human-task-v1.schema.json",
    PROCESS_FAILURE: "process-failure-v1.schema.json",
}
# Step Functions refuses a state input or output above 256 KiB of UTF-8 JSON: an input
# larger than that cannot have come from a state machine, nor go back into one.
MAX_INPUT_BYTES = 262_144
# The input sits one level inside the envelope.
MAX_ENVELOPE_DEPTH = MAX_DEPTH + 1
# Unstorable strings named per envelope before "(more)"; key names shown up to this length.
_TEXT_PROBLEMS_MAX = 10
_KEY_SHOWN = 40


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    schema = json.loads((SCHEMAS / KINDS[kind]).read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


@functools.cache
def _checker(kind: str) -> jsonschema_rs.Draft202012Validator:
    """The same schema compiled by jsonschema-rs: it says valid or not ~80 times faster
    (1 µs an envelope against 95); the Python validator words the refusals it shares."""
    return jsonschema_rs.Draft202012Validator(_validator(kind).schema)


def _schema_verdict(kind: str, message: dict[str, Any]) -> bool | None:
    """Return the compiled checker's verdict on message: True valid, False refused, None
    when it cannot take a value (a lone surrogate, a NaN, an integer past 64 bits).

    Valid is final. On a refusal (or None) the Python validator runs and words what is
    wrong; the checker is never more lenient than it on the envelope schemas
    (tests/processes/test_envelope_checker.py). Where it is stricter, it is right: JSON
    Schema's patterns are ECMA-262's, whose "$" ends the text, while Python's re.search
    lets "$" match before a final newline ("review\\n" would pass as a skill).
    """
    try:
        return _checker(kind).is_valid(message)
    except (ValueError, TypeError, OverflowError):
        return None


def _strict_problems(kind: str, message: dict[str, Any], *, besides: set[str]) -> list[str]:
    """Return the checker's refusals as "path: rule" lines at the paths not in besides (where
    the Python validator found nothing); never the offending value (the checker's own
    messages quote it)."""
    problems = []
    for error in _checker(kind).iter_errors(message):
        where = _where(error.instance_path)
        if where in besides:
            continue
        if isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Pattern):
            rule = f"must match {error.kind.pattern} (no final line break)"
        else:
            rule = f"breaks the {error.kind.name} rule"
        problems.append(f"{where}: {rule}")
    return problems


def _where(path: Any) -> str:
    """Name a value's place in the envelope as the problems do: "process.version"."""
    return ".".join(str(part) for part in path) or "(top)"


def envelope_schema(kind: str) -> dict[str, Any]:
    """Return the JSON Schema of an envelope kind."""
    return _validator(kind).schema


def envelope_read(body: str) -> tuple[Any, list[str]]:
    """Parse a message body; return the envelope, or None and why it cannot be read.

    The depth is measured on the text first: json.loads recurses once per level and raises
    RecursionError on a body of thousands of brackets.
    """
    depth = json_depth(body)
    if depth > MAX_ENVELOPE_DEPTH:
        return None, [f"(body): nested {depth:,} deep, more than {MAX_ENVELOPE_DEPTH} (the "
                      f"envelope, and its input at most {MAX_DEPTH} levels within it)"]
    try:
        return json.loads(body), []
    except ValueError:
        return None, ["(body): must be a JSON object; it is not valid JSON"]


def envelope_problems(message: Any) -> list[str]:
    """Return what is wrong with message, as "path: rule" lines; empty when it is valid."""
    if not isinstance(message, dict):
        return ["(top): must be a JSON object"]
    kind = message.get("kind")
    if kind not in KINDS:
        return [f"kind: must be one of {', '.join(sorted(KINDS))}"]
    problems = []
    verdict = _schema_verdict(kind, message)
    errors = [] if verdict else sorted(_validator(kind).iter_errors(message),
                                       key=lambda e: list(e.path))
    reported = set()
    for error in errors:
        where = _where(error.path)
        reported.add(where)
        problems.append(f"{where}: {_rule(error)}")
    if verdict is False:
        problems.extend(_strict_problems(kind, message, besides=reported))
    if isinstance(message.get("input"), dict):
        problems.extend(_input_problems(message["input"]))
    problems.extend(_text_problems(message))
    # jsonschema reports each missing required field as its own error with one text.
    return list(dict.fromkeys(problems))


def _input_problems(value: dict[str, Any]) -> list[str]:
    """Return what makes an input too deep or too large for Step Functions to have sent."""
    depth = value_depth(value)
    if depth > MAX_DEPTH:
        return [f"input: nested {depth:,} deep, more than {MAX_DEPTH}"]
    # As Step Functions counts it: compact JSON, UTF-8 (a lone surrogate is refused below).
    size = len(json.dumps(value, ensure_ascii=False, separators=(",", ":"))
               .encode("utf-8", "surrogatepass"))
    if size > MAX_INPUT_BYTES:
        return [f"input: {size:,} bytes, more than the {MAX_INPUT_BYTES:,} Step Functions "
                "allows"]
    return []


def _text_problems(message: dict[str, Any]) -> list[str]:
    """Return where a string (or a key) holds what PostgreSQL cannot store.

    PostgreSQL text and jsonb refuse the NUL character, and jsonb a lone surrogate
    (\\ud800 written alone); stored as they are, they would fail the insert on every
    receive. Walked with a list, not recursion: the input may be as deep as MAX_DEPTH.
    """
    problems: list[str] = []
    todo: list[tuple[str, Any]] = [("", message)]
    while todo and len(problems) < _TEXT_PROBLEMS_MAX:
        where, value = todo.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                key = str(key)
                if _unstorable(key):
                    problems.append(f"{where or '(top)'}: a key {_unstorable(key)}")
                else:
                    todo.append((_key_path(where, key), item))
        elif isinstance(value, list):
            todo.extend((f"{where}[{index}]", item) for index, item in enumerate(value))
        elif isinstance(value, str) and _unstorable(value):
            problems.append(f"{where}: {_unstorable(value)}")
    if todo or len(problems) > _TEXT_PROBLEMS_MAX:
        return [*problems[:_TEXT_PROBLEMS_MAX], "(more): other strings may break the same rules"]
    return problems


def _key_path(where: str, key: str) -> str:
    """Return the path of a key; a long key (a key is data too) is cut to its start."""
    name = key if len(key) <= _KEY_SHOWN else f"{key[:_KEY_SHOWN]}…"
    return f"{where}.{name}" if where else name


def _unstorable(text: str) -> str:
    """Return why PostgreSQL cannot store text, or "" when it can."""
    if "\x00" in text:
        return "must not contain the NUL character (U+0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "must be valid Unicode (it holds a lone surrogate)"
    return ""


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
