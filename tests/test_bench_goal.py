"""The goal lines the benches print (bench/_common.goal_print), which bench/run_all gathers:
a figure never reads as its goal unless it is the goal."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from _common import goal_figure, goal_print


@pytest.mark.parametrize(("value", "goal", "printed"), [
    (0.498, 0.5, "0.498"),        # under a floor, would read "0.50"
    (0.4999, 0.5, "0.4999"),
    (0.5004, 0.5, "0.5004"),      # over it by less than three decimals show
    (25.003, 25.0, "25.003"),     # over a ceiling
    (0.5, 0.5, "0.50"),           # the goal itself
    (0.4321, 0.5, "0.43"),        # far from it: two decimals
    (12891.4, 2000.0, "12,891.40"),
])
def test_a_figure_has_the_decimals_that_tell_it_from_its_goal(value, goal, printed):
    assert goal_figure(value, goal) == printed


def test_a_goal_line_says_the_figure_the_goal_and_whether_it_is_met(capsys):
    goal_print("take next service / raw", 0.498, 0.5, unit="x")
    goal_print("p99", 24.9996, 25.0, unit="ms", most=True)
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "GOAL take next service / raw: 0.498x (goal >= 0.5x): NOT met",
        "GOAL p99: 24.9996ms (goal <= 25ms): met",
    ]
