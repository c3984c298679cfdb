"""processes/envelope.py's compiled checker (jsonschema-rs) is never more lenient than the
Python validator: every envelope the Python validator refuses, the checker refuses too.

The envelopes are every mutation of a valid one of each kind at every path (each field
removed, replaced by a value of every JSON type and by edge values, an unknown field
added beside it), so each rule of both schemas (type, const, enum, pattern, bounds,
required, additionalProperties, uniqueItems) is broken at least once.
"""

import copy
import json
from typing import Any

import pytest

from processes import envelope as module
from processes.contract import HUMAN_TASK, PROCESS_FAILURE
from processes.envelope import envelope_problems
from tests.factories import envelope

FAILURE = {
    "kind": PROCESS_FAILURE,
    "execution": "arn:aws:states:us-east-1:123456789012:execution:test:1",
    "process": {"name": "invoice-approval", "version": 1},
    "error": {"Error": "States.TaskFailed", "Cause": None},
}
REPLACEMENTS = (None, True, False, 0, -1, 1, 1.5, 2**31, 2**63, "", "x", "X" * 300,
                "review\n", "ab:cd", [], [1, 1], ["a"], {}, {"x": 1})


def _paths(value: Any, path: tuple = ()) -> list[tuple]:
    """Return the path of every value inside value (itself included)."""
    paths = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            paths.extend(_paths(item, (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            paths.extend(_paths(item, (*path, index)))
    return paths


def _mutations(valid: dict[str, Any]) -> list[dict[str, Any]]:
    """Return every mutation of valid: at each path, removed, replaced, or a field added."""
    found = []
    for path in _paths(valid):
        if path:
            *parents, last = path
            for replacement in (*REPLACEMENTS, "remove"):
                mutated = copy.deepcopy(valid)
                target = mutated
                for part in parents:
                    target = target[part]
                if replacement == "remove":
                    del target[last]
                else:
                    target[last] = copy.deepcopy(replacement)
                found.append(mutated)
        mutated = copy.deepcopy(valid)
        target = mutated
        for part in path:
            target = target[part]
        if isinstance(target, dict):
            target["unknownField"] = 1
            found.append(mutated)
    return found


@pytest.mark.parametrize("kind, valid", [(HUMAN_TASK, envelope()), (PROCESS_FAILURE, FAILURE)])
def test_the_checker_refuses_every_envelope_the_python_validator_refuses(kind, valid):
    python = module._validator(kind)
    assert python.is_valid(valid) and module._checker(kind).is_valid(valid)
    refused = [mutated for mutated in _mutations(valid) if not python.is_valid(mutated)]
    # The mutations break every kind of rule the schemas hold, not just a few.
    rules = {error.validator for mutated in refused for error in python.iter_errors(mutated)}
    assert rules >= {"type", "required", "additionalProperties", "minimum"}
    assert len(refused) > 100
    lenient = [json.dumps(mutated) for mutated in refused
               if module._schema_verdict(kind, mutated) is True]
    assert lenient == []


def test_a_final_line_break_is_refused_as_json_schema_patterns_mean_it():
    """JSON Schema's patterns are ECMA-262's: "$" ends the text. Python's re.search lets it
    match before a final line break, so the Python validator alone let "review\\n" pass
    as a skill; the checker refuses it, and the refusal says where and why."""
    message = envelope(skill="review\n")
    assert module._validator(HUMAN_TASK).is_valid(message)
    assert module._schema_verdict(HUMAN_TASK, message) is False
    assert envelope_problems(message) == [
        "skill: must match ^[a-z][a-z0-9-]{0,63}$ (no final line break)"]


def test_the_checkers_refusals_join_the_python_validators_once_each():
    message = envelope(form="approve-reject\n", priority="high")
    del message["stage"]
    assert envelope_problems(message) == [
        "(top): required field(s) missing: stage",
        "priority: must be of type integer",
        "form: must match ^[a-z][a-z0-9-]{0,63}$ (no final line break)",
    ]


def test_a_value_the_checker_cannot_take_is_left_to_the_python_validator():
    """A lone surrogate or a NaN: no verdict from the checker (or a refusal), and the
    Python validator's answer and the text checks stand."""
    assert envelope_problems(envelope(priority=float("nan"))) == [
        "priority: must be of type integer"]
    assert envelope_problems(envelope(title="\ud800")) == [
        "title: must be valid Unicode (it holds a lone surrogate)"]


def test_a_valid_envelope_is_never_read_by_the_python_validator(monkeypatch):
    """The fast path: the checker's yes is final, so the Python validator is not run."""

    class Unused:
        def iter_errors(self, message):
            raise AssertionError("the Python validator ran on a valid envelope")

    module._checker(HUMAN_TASK)  # compiled (from the Python validator's schema) first
    monkeypatch.setattr(module, "_validator", lambda kind: Unused())
    assert envelope_problems(envelope()) == []


def test_an_invalid_envelope_still_says_what_is_wrong_and_where():
    message = envelope(priority="high")
    del message["stage"]
    assert envelope_problems(message) == ["(top): required field(s) missing: stage",
                                          "priority: must be of type integer"]
