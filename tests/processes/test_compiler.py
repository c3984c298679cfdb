import json
import os
from pathlib import Path

import pytest

from processes.compiler import Target, asl_check, compile_spec
from processes.spec import spec_load

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "processes" / "specs").glob("*.yaml"))
GOLDEN = Path(__file__).resolve().parent / "golden"
TARGET = Target(
    intake_queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/inbox-intake",
    state_machine_arn_prefix="arn:aws:states:eu-west-1:123456789012:stateMachine:",
)


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_demo_spec_compiles_to_the_expected_asl(path):
    """Golden test: regenerate with INBOX_UPDATE_GOLDEN=1 and review the diff."""
    asl = compile_spec(spec_load(path), target=TARGET)
    golden = GOLDEN / f"{path.stem}.asl.json"
    if os.environ.get("INBOX_UPDATE_GOLDEN"):
        golden.write_text(json.dumps(asl, indent=2, sort_keys=True) + "\n")
    assert asl == json.loads(golden.read_text())


def test_there_are_two_demo_specs():
    assert [p.stem for p in SPECS] == ["document-check", "invoice-approval"]


def test_every_task_gets_retry_with_jitter_and_a_catch():
    for path in SPECS:
        asl = compile_spec(spec_load(path), target=TARGET)
        tasks = {n: s for n, s in asl["States"].items() if s["Type"] == "Task"}
        assert tasks
        for name, state in tasks.items():
            assert state["Retry"][0]["JitterStrategy"] == "FULL", name
            assert 1 <= state["Retry"][0]["MaxAttempts"] <= 10, name
            assert "States.ALL" not in state["Retry"][0]["ErrorEquals"], name
            assert "States.TaskFailed" not in state["Retry"][0]["ErrorEquals"], name
            assert state["Catch"], name


def test_human_stage_carries_the_envelope_and_a_backstop_timeout():
    asl = compile_spec(spec_load(ROOT / "processes/specs/invoice-approval.yaml"), target=TARGET)
    review = asl["States"]["review"]
    assert review["Resource"] == "arn:aws:states:::sqs:sendMessage.waitForTaskToken"
    body = review["Parameters"]["MessageBody"]
    assert body["taskToken.$"] == "$$.Task.Token"
    assert body["kind"] == "human-task/v1"
    assert body["timeouts"] == {"offer": 300, "work": 1800, "overall": 86400}
    assert review["TimeoutSeconds"] > body["timeouts"]["overall"]
    caught = {error for c in review["Catch"] for error in c["ErrorEquals"]}
    assert {"HumanTask.Rejected", "HumanTask.TimedOut", "States.Timeout"} <= caught
    approval = asl["States"]["approval"]["Parameters"]["MessageBody"]
    assert approval["excludeWorkersOf"] == ["review"]


def test_escalating_stage_backstop_covers_the_escalation_clock_and_heartbeat():
    asl = compile_spec(spec_load(ROOT / "processes/specs/document-check.yaml"), target=TARGET)
    check = asl["States"]["check"]
    assert check["TimeoutSeconds"] > 3600 + 14400
    assert check["HeartbeatSeconds"] == 300
    assert check["Parameters"]["MessageBody"]["onTimeout"] == "escalate"


def test_title_template_is_escaped_for_states_format():
    from processes.spec import spec_parse

    spec = spec_parse(_one_human_stage(title="It's {a} {{b}} \\\\ {c.d}"), source="t.yaml")
    body = compile_spec(spec, target=TARGET)["States"]["h"]["Parameters"]["MessageBody"]
    assert body["title.$"] == "States.Format('It\\'s {} \\{{}\\} \\\\\\\\ {}', $.a, $.b, $.c.d)"


def test_asl_check_finds_a_task_without_retry_and_an_empty_catch():
    asl = {
        "StartAt": "a",
        "States": {
            "a": {"Type": "Task", "Resource": "x", "Catch": [], "Next": "b"},
            "b": {"Type": "Succeed"},
            "c": {"Type": "Pass", "Next": "nowhere"},
        },
    }
    assert asl_check(asl) == [
        "States.a: a Task without Retry",
        "States.a: an empty Catch",
        "States.c.Next: goes to 'nowhere', which is no state",
        "States.c: unreachable from 'a'",
    ]


def _one_human_stage(title: str = "T") -> str:
    return f"""
process: p
version: 1
stages:
  - id: h
    kind: human
    skill: s
    title: {json.dumps(title)}
    form: approve-reject
    timeouts: {{offer: 1, work: 2, overall: 3}}
    show: [a]
  - id: done
    kind: succeed
"""
