"""The router a compiled state machine starts at: a migrated execution resumes at its stage."""

import pytest

from config.errors import InboxError
from inbox.timeline import timeline_reduce
from processes.compiler import asl_check, compile_spec
from processes.resume import (
    RESUME_KEY,
    ROUTER_STATE,
    is_resume_state,
    resumable_stages,
    resume_input,
    resume_state_name,
)
from processes.services import _input_canonical
from processes.spec import spec_parse
from tests.processes.test_compiler import SPECS, TARGET


def _invoice():
    path = next(p for p in SPECS if p.stem == "invoice-approval")
    return compile_spec(spec_parse(path.read_text(), source=str(path)), target=TARGET)


def test_a_spec_with_human_stages_starts_at_the_router():
    asl = _invoice()
    assert asl["StartAt"] == ROUTER_STATE
    router = asl["States"][ROUTER_STATE]
    assert router["Type"] == "Choice"
    # A normal start goes where it always went: the first stage's first show state.
    assert router["Default"] == "review.show"
    assert resumable_stages(asl) == {"review", "approval"}
    assert asl_check(asl) == []


def test_each_resume_unwraps_the_carried_state_and_enters_the_stage_through_its_show_states():
    asl = _invoice()
    for stage in ("review", "approval"):
        resume = asl["States"][resume_state_name(stage)]
        assert resume == {"Type": "Pass", "InputPath": f"$.{RESUME_KEY}.state",
                          "Next": f"{stage}.show", "Comment": resume["Comment"]}
    rules = {rule["Next"]: rule["And"] for rule in asl["States"][ROUTER_STATE]["Choices"]}
    assert rules[resume_state_name("review")] == [
        {"Variable": f"$.{RESUME_KEY}.stage", "IsPresent": True},
        {"Variable": f"$.{RESUME_KEY}.stage", "StringEquals": "review"}]


def test_a_spec_without_human_stages_has_no_router():
    spec = spec_parse("process: auto\nversion: 1\nstages:\n  - id: done\n    kind: succeed\n",
                      source="auto.yaml")
    asl = compile_spec(spec, target=TARGET)
    assert asl["StartAt"] == "done"
    assert ROUTER_STATE not in asl["States"]
    assert resumable_stages(asl) == set()


def test_a_definition_compiled_before_the_router_resumes_nowhere():
    asl = _invoice()
    old = {**asl, "StartAt": "review.show"}
    assert resumable_stages(old) == set()
    assert resumable_stages({"StartAt": "x", "States": {}}) == set()


def test_the_resume_input_names_the_stage_the_state_and_where_it_came_from():
    assert resume_input(stage="review", state={"a": 1}, source="arn:old") == {
        RESUME_KEY: {"stage": "review", "state": {"a": 1}, "from": "arn:old"}}


def test_the_router_states_are_told_from_stages():
    assert is_resume_state(ROUTER_STATE)
    assert is_resume_state(resume_state_name("review"))
    assert not is_resume_state("review")
    assert not is_resume_state("Rejected")


def test_a_start_input_may_not_hold_the_resume_key():
    with pytest.raises(InboxError, match="reserved for migrations"):
        _input_canonical(input={RESUME_KEY: {"stage": "review"}})
    assert _input_canonical(input={"b": 1, "a": 2}) == {"a": 2, "b": 1}


def test_the_timeline_leaves_the_router_out():
    def entered(event_id, name, kind="Choice"):
        return {"id": event_id, "type": f"{kind}StateEntered",
                "timestamp": f"2026-01-01T00:00:0{event_id}Z",
                "stateEnteredEventDetails": {"name": name}}

    def exited(event_id, name, kind="Choice"):
        return {"id": event_id, "type": f"{kind}StateExited",
                "timestamp": f"2026-01-01T00:00:0{event_id}Z",
                "stateExitedEventDetails": {"name": name}}

    events = [entered(1, ROUTER_STATE), exited(2, ROUTER_STATE),
              entered(3, resume_state_name("review"), "Pass"),
              exited(4, resume_state_name("review"), "Pass"),
              entered(5, "review", "Task")]
    stages = timeline_reduce(events=events, status="RUNNING")
    assert [stage["name"] for stage in stages] == ["review"]
