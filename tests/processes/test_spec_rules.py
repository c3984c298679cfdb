"""One test per workflow rule: each error names the file and the path inside it."""

import textwrap

import pytest

from processes.compiler import Target, compile_spec
from processes.spec import SpecError, spec_load, spec_parse

SOURCE = "specs/example.yaml"
TARGET = Target(
    "https://sqs.eu-west-1.amazonaws.com/1/q", "arn:aws:states:eu-west-1:1:stateMachine:"
)

HUMAN = """
  - id: {id}
    kind: human
    skill: invoice-review
    title: Review {{invoice_id}}
    form: approve-reject
    timeouts: {{offer: 60, work: 600, overall: 3600}}
    show: [invoice_id]
"""


def spec(stages: str, header: str = "process: example\nversion: 1\n") -> str:
    return header + "stages:\n" + textwrap.indent(textwrap.dedent(stages).strip("\n"), "  ") + "\n"


def problems_of(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        compile_spec(spec_parse(text, source=SOURCE), target=TARGET)
    return caught.value.problems


def human(stage_id: str, **overrides: str) -> str:
    """Return a valid human stage, with the named fields' lines replaced."""
    lines = textwrap.dedent(HUMAN.format(id=stage_id)).strip("\n").splitlines()
    for key, value in overrides.items():
        lines = [f"  {key}: {value}" if line.startswith(f"  {key}:") else line for line in lines]
    return "\n".join(lines) + "\n"


def test_a_valid_spec_parses():
    parsed = spec_parse(spec(human("review") + "\n- id: done\n  kind: succeed\n"), source=SOURCE)
    assert (parsed.name, parsed.version, [s.id for s in parsed.stages]) == (
        "example", 1, ["review", "done"])


def test_more_than_five_stages_per_state_machine():
    stages = "".join(
        f"- id: w{i}\n  kind: wait\n  seconds: 1\n" for i in range(6)
    ) + "- id: done\n  kind: succeed\n"
    assert problems_of(spec(stages)) == [
        f"{SOURCE}: stages: 6 stages; at most 5 per state machine (succeed and fail do not "
        "count): move some into a child process (kind: process)"
    ]


def test_unknown_stage_kind():
    problems = problems_of(spec("- id: a\n  kind: telepathy\n- id: done\n  kind: succeed\n"))
    assert problems[0].startswith(f"{SOURCE}: stages[0] (a).kind: unknown stage kind 'telepathy'")


def test_unknown_field_on_a_stage():
    problems = problems_of(spec("- id: a\n  kind: wait\n  seconds: 1\n  colour: red\n"
                                "- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (a).colour: unknown field for a wait stage "
                        "(known: comment, id, kind, next, seconds, until)"]


def test_unknown_top_level_field():
    problems = problems_of(spec("- id: done\n  kind: succeed\n") + "owner: me\n")
    assert problems[0].startswith(f"{SOURCE}: owner: unknown field")


def test_missing_timeouts_on_a_human_stage():
    stage = "\n".join(line for line in human("review").splitlines() if "timeouts" not in line)
    problems = problems_of(spec(stage + "\n- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (review).timeouts: required on a human stage: "
                        "{offer, work, overall} in seconds"]


@pytest.mark.parametrize(("timeouts", "clock"), [
    ("{offer: 60, work: 600, overall: 300}", "work (600)"),
    ("{offer: 900, work: 60, overall: 300}", "offer (900)"),
])
def test_overall_smaller_than_work_or_offer(timeouts, clock):
    stage = human("review", timeouts=timeouts)
    problems = problems_of(spec(stage + "\n- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (review).timeouts.overall: 300 is smaller than "
                        f"{clock}; the overall clock must cover it"]


def test_a_task_without_retry():
    problems = problems_of(spec("- id: score\n  kind: automation\n  function: scorer\n"
                                "  retry: {}\n- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (score).retry: a Task without Retry is not "
                        "allowed: give {attempts, interval, backoff} or leave retry out for the "
                        "default"]


def test_an_empty_catch():
    problems = problems_of(spec("- id: score\n  kind: automation\n  function: scorer\n"
                                "  catch: []\n- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (score).catch: an empty Catch is not allowed: "
                        "name the stage to go to on failure, or leave catch out for the default "
                        "failure branch"]


def test_a_dangling_stage_reference():
    problems = problems_of(spec("- id: a\n  kind: wait\n  seconds: 1\n  next: nowhere\n"
                                "- id: done\n  kind: succeed\n"))
    assert problems[0] == (f"{SOURCE}: stages[0] (a).next: goes to 'nowhere', which is no "
                           "stage (stages: a, done)")


def test_an_unreachable_stage():
    problems = problems_of(spec("- id: a\n  kind: wait\n  seconds: 1\n  next: done\n"
                                "- id: orphan\n  kind: wait\n  seconds: 1\n"
                                "- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[1] (orphan): unreachable: no stage leads here "
                        "from 'a'"]


def test_falling_off_the_end():
    problems = problems_of(spec("- id: a\n  kind: wait\n  seconds: 1\n"))
    assert problems == [f"{SOURCE}: stages[0] (a): the last stage must end the process (kind "
                        "succeed or fail) or name its next stage"]


def test_unknown_timeout_policy():
    stage = human("review") + "  on_timeout: shrug\n"
    problems = problems_of(spec(stage + "- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (review).on_timeout: unknown policy 'shrug' "
                        "(known: abort, escalate)"]


def test_escalate_needs_an_escalation_clock():
    stage = human("review") + "  on_timeout: escalate\n"
    problems = problems_of(spec(stage + "- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (review).timeouts.escalation: required; a number "
                        "of seconds"]


def test_unknown_form():
    stage = human("review", form="mystery")
    problems = problems_of(spec(stage + "\n- id: done\n  kind: succeed\n"))
    assert problems[0].startswith(f"{SOURCE}: stages[0] (review).form: unknown form 'mystery'")


def test_separation_of_duties_must_name_another_human_stage():
    stage = human("review") + "  not_by: ghost\n"
    problems = problems_of(spec(stage + "- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (review).not_by: 'ghost' is not another human stage"]


def test_choice_needs_a_default():
    problems = problems_of(spec("- id: c\n  kind: choice\n  rules:\n"
                                "    - {if: {var: amount, greater_than: 1}, next: done}\n"
                                "- id: done\n  kind: succeed\n"))
    assert problems == [f"{SOURCE}: stages[0] (c).default: required; where to go when no rule "
                        "matches"]


def test_bad_title_placeholder():
    stage = human("review", title="'Review {invoice id}'")
    problems = problems_of(spec(stage + "\n- id: done\n  kind: succeed\n"))
    assert problems[0].startswith(f"{SOURCE}: stages[0] (review).title: placeholder "
                                  "{invoice id} is not a data path")


def test_invalid_yaml_names_the_line():
    problems = problems_of("process: x\nstages: [\n")
    assert problems[0].startswith(f"{SOURCE}: line 3, column 1: not valid YAML")


def test_version_must_be_a_positive_whole_number():
    problems = problems_of(spec("- id: done\n  kind: succeed\n", header="process: x\nversion: 0\n"))
    assert problems == [f"{SOURCE}: version: required; a whole number from 1 up"]


def test_all_problems_are_reported_at_once():
    problems = problems_of(spec("- id: a\n  kind: wait\n  colour: red\n  next: nowhere\n"
                                "- id: done\n  kind: succeed\n", header="process: Bad Name\n"))
    assert len(problems) == 6
    assert all(p.startswith(f"{SOURCE}: ") for p in problems)


def test_spec_load_names_the_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("process: x\nversion: 1\nstages: []\n")
    with pytest.raises(SpecError, match=f"{path}: stages: required; a non-empty list"):
        spec_load(path)


# The heartbeat budget ----------------------------------------------------------------------


def _heartbeat_spec(heartbeat: int, expected_open: int | None = None) -> str:
    extra = f"\n    expected_open: {expected_open}" if expected_open is not None else ""
    return f"""
process: beating
version: 1
stages:
  - id: review
    kind: human
    skill: invoice-review
    title: Review
    form: approve-reject
    timeouts: {{offer: 300, work: 3600, overall: 86400}}
    heartbeat: {heartbeat}{extra}
    show: [ref]
    next: done
  - id: done
    kind: succeed
"""


def test_a_heartbeat_that_fits_its_share_of_the_budget_warns_of_nothing():
    from processes.spec import heartbeat_budget_warnings

    spec = spec_parse(_heartbeat_spec(300, expected_open=12_500), source="s.yaml")
    # 3 x 12,500 / 300 = 125 calls a second: exactly half of 250.
    assert heartbeat_budget_warnings(spec, source="s.yaml", rate=250, share_percent=50) == []


def test_a_heartbeat_beyond_its_share_is_named_with_the_arithmetic_and_the_fix():
    from processes.spec import heartbeat_budget_warnings

    spec = spec_parse(_heartbeat_spec(60, expected_open=10_000), source="s.yaml")
    assert heartbeat_budget_warnings(spec, source="s.yaml", rate=250, share_percent=50) == [
        "s.yaml: stages[0] (review).heartbeat: 60 s with 10000 open tasks needs 500.0 "
        "SendTaskHeartbeat calls a second, more than heartbeats' 50% of INBOX_SENDTASK_RATE "
        "(250/s, 125/s): raise heartbeat to 240 s or more, lower expected_open, or give "
        "heartbeats a larger share"]


def test_expected_open_defaults_to_a_hundred_and_must_be_a_count():
    spec = spec_parse(_heartbeat_spec(300), source="s.yaml")
    assert spec.stages[0].expected_open == 100
    with pytest.raises(SpecError) as refused:
        spec_parse(_heartbeat_spec(300, expected_open=0), source="s.yaml")
    assert refused.value.problems == [
        "s.yaml: stages[0] (review).expected_open: must be a whole number from 1 to 10000000"]


def test_deploy_says_so_when_heartbeats_would_need_more_than_their_share(
        db, emulator, tmp_path, settings, capsys):
    from django.core.management import call_command

    settings.INBOX_SENDTASK_RATE = 10
    path = tmp_path / "beating.yaml"
    path.write_text(_heartbeat_spec(30, expected_open=1000))
    call_command("process_deploy", str(path))
    assert "warning: " in capsys.readouterr().err
