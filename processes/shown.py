"""The fields a human stage shows: the states that copy them into its envelope's input.

A human stage's spec names the data paths its task shows (``show``); the envelope
carries only those, and the rest of the execution's state stays in Step Functions.
Step Functions fails an execution (States.Runtime, which no Catch sees) on a path
missing from the data, and a field may be missing (an optional note), so before the
stage's Task state a chain of states tests each path with IsPresent and copies it, when
present, to ``stages.<id>.input``; the Task sends that as the envelope's ``input``. Its
ResultPath (``stages.<id>``) then replaces it with the answer, so nothing of the copy
stays in the state of an execution whose task was completed.
"""

import re
from typing import Any

from processes.spec import HumanStage

# The names show_state_names makes: "<stage id>.show", ".show.<n>" and ".copy.<n>".
_SHOW_STATE = re.compile(r"^[a-z][a-z0-9-]{0,63}\.(show|show\.[0-9]+|copy\.[0-9]+)$")


def result_path(stage_id: str) -> str:
    """Return where a stage's result is stored: stage ids may hold dashes, paths may not."""
    return f"$.stages.{stage_id.replace('-', '_')}"


def shown_input_path(stage_id: str) -> str:
    """Return where a human stage's shown fields are collected before its Task state."""
    return f"{result_path(stage_id)}.input"


def show_state_names(stage_id: str, count: int) -> list[str]:
    """Return the names of the states that collect a human stage's count shown fields.

    The first is where every edge to the stage leads; the stage's own Task state keeps
    the stage's id, so the envelope's stage and the history name the stage itself. Stage
    ids hold no dots, so these names never clash with a stage.
    """
    names = [f"{stage_id}.show"]
    for number in range(1, count + 1):
        names += [f"{stage_id}.show.{number}", f"{stage_id}.copy.{number}"]
    return names


def is_show_state(name: str) -> bool:
    """Return whether a state's name is one that show_state_names makes."""
    return bool(_SHOW_STATE.match(name))


def show_states(stage: HumanStage) -> dict[str, Any]:
    """Return the states that collect the fields stage shows, ending at its Task state."""
    assert stage.show is not None
    scratch = shown_input_path(stage.id)
    names = show_state_names(stage.id, len(stage.show))
    states: dict[str, Any] = {names[0]: {
        "Type": "Pass",
        "Comment": f"Collect the fields {stage.id} shows: only they go to the inbox.",
        "Result": {},
        "ResultPath": scratch,
        "Next": names[1],
    }}
    for number, path in enumerate(stage.show, start=1):
        check, copy = names[2 * number - 1], names[2 * number]
        following = names[2 * number + 1] if 2 * number + 1 < len(names) else stage.id
        states[check] = {
            "Type": "Choice",
            "Choices": [{"Variable": f"$.{path}", "IsPresent": True, "Next": copy}],
            "Default": following,
        }
        states[copy] = {
            "Type": "Pass",
            "InputPath": f"$.{path}",
            "ResultPath": f"{scratch}.{path}",
            "Next": following,
        }
    return states
