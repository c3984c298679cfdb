"""Starting a version at one of its human stages: what an explicit migration needs.

Step Functions starts every execution at its StartAt, so a compiled state machine that
has human stages starts at a router (``Resume``): a Choice that sends an execution whose
input holds ``inboxResume.stage`` to that stage, through a Pass state (``Resume.<id>``)
that unwraps the state carried in ``inboxResume.state``; any other input goes to the first
stage, as it did before the router existed. The stage is entered as an edge to it would
enter it, through its show states (processes/shown.py), so its envelope is made the way
the stage makes it in every execution.

``inboxResume.from`` names the execution the state came from: the new execution's
ExecutionStarted event (its history) says where it was moved from.

Pure functions, no I/O; inbox.services.migration starts and stops the executions.
"""

from collections.abc import Callable, Iterable
from typing import Any

# The key of a start input that resumes at a stage; process_start refuses it in an input.
RESUME_KEY = "inboxResume"
ROUTER_STATE = "Resume"
_RESUME_PREFIX = ROUTER_STATE + "."


def resume_state_name(stage_id: str) -> str:
    """Return the Pass state that enters stage_id with the carried state."""
    return _RESUME_PREFIX + stage_id


def is_resume_state(name: str) -> bool:
    """Return whether a state's name is the router's or one of its Pass states."""
    return name == ROUTER_STATE or name.startswith(_RESUME_PREFIX)


def resume_states(stage_ids: Iterable[str], *, first: str,
                  entry: Callable[[str], str]) -> dict[str, Any]:
    """Return the router and its Pass states for the human stages stage_ids.

    first: the state a normal start goes to; entry(stage_id): the state an edge to the
    stage goes to (its first show state, or the stage itself).
    """
    ids = list(stage_ids)
    stage_path = f"$.{RESUME_KEY}.stage"
    states: dict[str, Any] = {ROUTER_STATE: {
        "Type": "Choice",
        "Comment": "A migrated execution resumes at its stage; any other starts at the "
                   "first stage.",
        # IsPresent first: a string comparison on a missing path fails the execution.
        "Choices": [{"And": [{"Variable": stage_path, "IsPresent": True},
                             {"Variable": stage_path, "StringEquals": stage_id}],
                     "Next": resume_state_name(stage_id)} for stage_id in ids],
        "Default": first,
    }}
    for stage_id in ids:
        states[resume_state_name(stage_id)] = {
            "Type": "Pass",
            "Comment": f"Resume at {stage_id} with the state the execution carried there.",
            "InputPath": f"$.{RESUME_KEY}.state",
            "Next": entry(stage_id),
        }
    return states


def resume_input(*, stage: str, state: Any, source: str) -> dict[str, Any]:
    """Return the start input that resumes at stage with state, moved from source."""
    return {RESUME_KEY: {"stage": stage, "state": state, "from": source}}


def resumable_stages(asl: dict[str, Any]) -> set[str]:
    """Return the stages a deployed definition can start at (none: compiled before this)."""
    router = asl.get("States", {}).get(ROUTER_STATE)
    if asl.get("StartAt") != ROUTER_STATE or not isinstance(router, dict):
        return set()
    found = set()
    for rule in router.get("Choices", []):
        target = rule.get("Next", "")
        if isinstance(target, str) and target.startswith(_RESUME_PREFIX):
            found.add(target.removeprefix(_RESUME_PREFIX))
    return found
