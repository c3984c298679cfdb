"""processes/contract.py: the compiler, the schemas, the golden ASL and the docs agree with it."""

import json
import re
from pathlib import Path
from typing import Any

import pytest

from processes import contract
from processes.compiler import Target, compile_spec
from processes.envelope import KINDS, envelope_schema
from processes.spec import FailStage, spec_parse

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = sorted((Path(__file__).resolve().parent / "golden").glob("*.asl.json"))
TARGET = Target(
    intake_queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/inbox-intake",
    state_machine_arn_prefix="arn:aws:states:eu-west-1:123456789012:stateMachine:",
)
HUMAN_TASK_NAME = re.compile(r"HumanTask\.[A-Za-z]+")
SPEC = """
process: p
version: 1
stages:
  - id: h
    kind: human
    skill: s
    title: "Review {invoice_id}"
    form: approve-reject
    timeouts: {offer: 1, work: 2, overall: 3}
    show: [invoice_id]
  - id: a
    kind: automation
    function: f
    payload: {whole: $, amount: $.amount, fixed: "$ 5"}
  - id: done
    kind: succeed
"""


def _strings(value: Any) -> list[str]:
    """Return every string in a JSON value, keys included."""
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [key, *_strings(item)]]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [value] if isinstance(value, str) else []


def _message_kinds(asl: dict[str, Any]) -> set[str]:
    """Return the kind of every message the state machine puts on the intake queue."""
    return {
        state["Parameters"]["MessageBody"]["kind"]
        for state in asl["States"].values()
        if "MessageBody" in state.get("Parameters", {})
    }


def test_human_stage_sends_the_contracts_envelope_kind_and_catches_its_errors():
    """The compiled human stage carries HUMAN_TASK and routes REJECTED_ERROR, TIMED_OUT_ERROR."""
    asl = compile_spec(spec_parse(SPEC, source="p.yaml"), target=TARGET)
    human = asl["States"]["h"]
    assert human["Parameters"]["MessageBody"]["kind"] == contract.HUMAN_TASK
    caught = {error for catch in human["Catch"] for error in catch["ErrorEquals"]}
    assert set(contract.HUMAN_TASK_ERRORS) <= caught
    assert asl["States"]["Rejected"]["Error"] == contract.REJECTED_ERROR
    assert asl["States"]["TimedOut"]["Error"] == contract.TIMED_OUT_ERROR


def test_failure_branch_sends_the_contracts_failure_kind_and_error():
    """The failure branch notifies with PROCESS_FAILURE and ends with PROCESS_FAILED_ERROR."""
    asl = compile_spec(spec_parse(SPEC, source="p.yaml"), target=TARGET)
    assert _message_kinds(asl) == {contract.HUMAN_TASK, contract.PROCESS_FAILURE}
    assert asl["States"]["Failed"]["Error"] == contract.PROCESS_FAILED_ERROR


def test_placeholders_and_data_references_follow_the_contracts_syntax():
    """{path} in a title and "$" / "$.path" in a payload become ASL paths; "$ 5" stays text."""
    asl = compile_spec(spec_parse(SPEC, source="p.yaml"), target=TARGET)
    body = asl["States"]["h"]["Parameters"]["MessageBody"]
    assert contract.PLACEHOLDER.findall("Review {invoice_id}") == ["invoice_id"]
    assert body["title.$"] == "States.Format('Review {}', $.invoice_id)"
    payload = asl["States"]["a"]["Parameters"]["Payload"]
    assert payload == {"whole.$": "$", "amount.$": "$.amount", "fixed": "$ 5",
                       "idempotencyKey.$": "States.Format('{}:{}', $$.Execution.Id, 'a')"}
    assert [contract.is_data_reference(v) for v in ("$", "$.a.b", "$ 5", "a", 5)] == [
        True, True, False, False, False,
    ]


def test_fail_stage_defaults_to_the_contracts_process_failed_error():
    spec = spec_parse(SPEC.replace("kind: succeed", "kind: fail"), source="p.yaml")
    stage = spec.stage("done")
    assert isinstance(stage, FailStage)
    assert stage.error == contract.PROCESS_FAILED_ERROR


def test_there_are_golden_files():
    assert [path.name for path in GOLDEN] == [
        "document-check.asl.json", "invoice-approval.asl.json",
    ]


@pytest.mark.parametrize("path", GOLDEN, ids=[p.stem for p in GOLDEN])
def test_golden_asl_agrees_with_the_contract(path):
    """The golden files use only the contract's kinds and HumanTask.* error names."""
    asl = json.loads(path.read_text())
    assert _message_kinds(asl) == {contract.HUMAN_TASK, contract.PROCESS_FAILURE}
    named = set(HUMAN_TASK_NAME.findall(" ".join(_strings(asl))))
    assert named == set(contract.HUMAN_TASK_ERRORS)
    # The compiler's own Fail states; the spec's fail stages name their own errors.
    generated = {"Rejected": contract.REJECTED_ERROR, "TimedOut": contract.TIMED_OUT_ERROR,
                 "Failed": contract.PROCESS_FAILED_ERROR}
    fails = {name: state["Error"] for name, state in asl["States"].items()
             if state["Type"] == "Fail" and name in generated}
    assert "Failed" in fails
    assert fails == {name: generated[name] for name in fails}


def test_each_kind_has_a_schema_whose_kind_is_the_constant():
    assert set(KINDS) == set(contract.KINDS) == {contract.HUMAN_TASK, contract.PROCESS_FAILURE}
    for kind in contract.KINDS:
        assert envelope_schema(kind)["properties"]["kind"] == {"const": kind}


def test_docs_name_no_other_human_task_error():
    """Every HumanTask.* name in README.md and docs/ is one the contract defines."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    named = {name for path in texts for name in HUMAN_TASK_NAME.findall(path.read_text())}
    assert named == set(contract.HUMAN_TASK_ERRORS)
