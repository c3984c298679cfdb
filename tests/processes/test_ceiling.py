"""Every state machine has a ceiling (top-level TimeoutSeconds): the stages' ceilings along
the longest path plus a margin, or the spec's own timeout; each refusal names the field."""

import io
import textwrap
from pathlib import Path

import pytest
from django.core.management import call_command

from config.errors import Conflict
from processes.ceiling import EXECUTION_MARGIN_SECONDS
from processes.compiler import Target, compile_spec
from processes.models import Process, ProcessVersion
from processes.services import child_ceilings, process_deploy
from processes.spec import SpecError, spec_load, spec_parse
from tests.processes.lifecycle import unique_name

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
SOURCE = "c.yaml"
TARGET = Target(
    intake_queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/inbox-intake",
    state_machine_arn_prefix="arn:aws:states:eu-west-1:123456789012:stateMachine:",
)
YEAR = 31_536_000
# A human stage's send is retried 3 times after 2, 4 and 8 s (full jitter only shortens).
SEND_RETRIES = 2 + 4 + 8


def _spec(stages: str, *, timeout: int | str | None = None) -> str:
    top = f"timeout: {timeout}\n" if timeout is not None else ""
    return (f"process: ceiling\nversion: 1\n{top}stages:\n"
            + textwrap.indent(textwrap.dedent(stages).strip("\n"), "  ") + "\n")


def _human(stage_id: str, overall: int, **extra: str) -> str:
    lines = [f"- id: {stage_id}", "  kind: human", "  skill: invoice-review", "  title: T",
             "  form: approve-reject", f"  timeouts: {{offer: 60, work: 60, overall: {overall}}}",
             "  show: [invoice_id]", *(f"  {key}: {value}" for key, value in extra.items())]
    return "\n".join(lines) + "\n"


def _timeout(text: str, children: dict | None = None) -> int:
    return compile_spec(spec_parse(text, source=SOURCE), target=TARGET,
                        children=children)["TimeoutSeconds"]


def _problems(text: str, children: dict | None = None) -> list[str]:
    with pytest.raises(SpecError) as caught:
        compile_spec(spec_parse(text, source=SOURCE), target=TARGET, children=children)
    return caught.value.problems


def test_the_demo_invoice_ceiling_is_both_human_stages_plus_the_margin():
    """review (overall 86,400) then approval (172,800), each with its 60 s backstop."""
    asl = compile_spec(spec_load(SPECS / "invoice-approval.yaml"), target=TARGET)
    review = asl["States"]["review"]["TimeoutSeconds"]
    approval = asl["States"]["approval"]["TimeoutSeconds"]
    assert (review, approval) == (86_460, 172_860)
    assert asl["TimeoutSeconds"] == (review + SEND_RETRIES) + (approval + SEND_RETRIES) \
        + EXECUTION_MARGIN_SECONDS


def test_an_escalating_stage_counts_its_escalation_clock():
    asl = compile_spec(spec_load(SPECS / "document-check.yaml"), target=TARGET)
    assert asl["TimeoutSeconds"] == 3600 + 14_400 + 60 + SEND_RETRIES + EXECUTION_MARGIN_SECONDS


def test_choice_branches_count_the_longest_path_not_every_stage():
    text = _spec("""
        - id: route
          kind: choice
          rules:
            - if: {var: big, equals: true}
              next: long
          default: short
        - {id: long, kind: wait, seconds: 5000, next: done}
        - {id: short, kind: wait, seconds: 100, next: done}
        - {id: done, kind: succeed}
    """)
    assert _timeout(text) == 5000 + EXECUTION_MARGIN_SECONDS


def test_an_automation_stage_counts_every_attempt_and_the_delays_between_them():
    """timeout 30 s, 2 retries after 5 and 15 s: 3 attempts of 30 s and 20 s of delays."""
    text = _spec("""
        - id: enrich
          kind: automation
          function: f
          timeout: 30
          retry: {attempts: 2, interval: 5, backoff: 3}
        - {id: done, kind: succeed}
    """)
    assert _timeout(text) == 3 * 30 + 5 + 15 + EXECUTION_MARGIN_SECONDS


def test_retry_delays_are_capped_at_a_minute_each():
    """Delays of 10, 50, 250 (60) and 1,250 (60) s."""
    text = _spec("""
        - id: enrich
          kind: automation
          function: f
          timeout: 1
          retry: {attempts: 4, interval: 10, backoff: 5}
        - {id: done, kind: succeed}
    """)
    assert _timeout(text) == 5 * 1 + 10 + 50 + 60 + 60 + EXECUTION_MARGIN_SECONDS


def test_a_child_process_counts_the_child_s_own_ceiling():
    text = _spec("""
        - id: documents
          kind: process
          process: document-check
          version: 1
          retry: {attempts: 1, interval: 3}
        - {id: done, kind: succeed}
    """)
    assert _timeout(text, {("document-check", 1): 20_000}) == 20_000 + 3 \
        + EXECUTION_MARGIN_SECONDS


def test_a_child_whose_ceiling_is_unknown_is_named():
    text = _spec("""
        - {id: documents, kind: process, process: document-check, version: 4}
        - {id: done, kind: succeed}
    """)
    assert _problems(text) == [
        f"{SOURCE}: stages[0] (documents).process: the execution ceiling of document-check v4 "
        "is not known: deploy it first (its TimeoutSeconds bounds this stage)"]


def test_the_spec_s_own_timeout_is_the_ceiling():
    text = _spec(_human("review", 3600) + "- {id: done, kind: succeed}\n", timeout=7200)
    assert _timeout(text) == 7200


def test_a_timeout_shorter_than_a_stage_is_refused_naming_both():
    text = _spec(_human("review", 3600) + "- {id: done, kind: succeed}\n", timeout=3000)
    assert _problems(text) == [
        f"{SOURCE}: timeout: 3,000 s is shorter than stage review's ceiling (3,674 s); a "
        "whole execution must be allowed at least its longest stage"]


@pytest.mark.parametrize("value", [0, -5, "a day", "true", 1.5, YEAR + 1])
def test_the_timeout_must_be_whole_seconds_within_a_year(value):
    text = _spec("- {id: done, kind: succeed}\n", timeout=value)
    with pytest.raises(SpecError) as caught:
        spec_parse(text, source=SOURCE)
    assert caught.value.problems == [
        f"{SOURCE}: timeout: the seconds a whole execution may run: a whole number from 1 to "
        "31,536,000 (the year Step Functions allows)"]


def test_a_loop_needs_the_spec_s_own_timeout():
    stages = _human("review", 3600) + textwrap.dedent("""\
        - id: route
          kind: choice
          rules:
            - if: {var: stages.review.answer.decision, equals: reject}
              next: fix
          default: done
        - {id: fix, kind: automation, function: f, next: review}
        - {id: done, kind: succeed}
    """)
    assert _problems(_spec(stages)) == [
        f"{SOURCE}: timeout: required, because stages review → route → fix → review can "
        "repeat, so no sum of their ceilings bounds an execution: set timeout to the seconds "
        "a whole execution may run (at most 31,536,000)"]
    assert _timeout(_spec(stages, timeout=86_400)) == 86_400


def test_a_catch_back_to_the_same_stage_is_a_loop():
    text = _spec("""
        - {id: fetch, kind: automation, function: f, catch: fetch}
        - {id: done, kind: succeed}
    """)
    assert "stages fetch → fetch can repeat" in _problems(text)[0]


def test_waiting_until_a_time_in_the_data_needs_the_spec_s_own_timeout():
    text = _spec("""
        - {id: hold, kind: wait, until: due_at}
        - {id: done, kind: succeed}
    """)
    assert _problems(text) == [
        f"{SOURCE}: timeout: required, because stages[0] (hold) waits until the time at "
        "due_at, which nothing bounds: set timeout to the seconds a whole execution may run "
        "(at most 31,536,000)"]
    assert _timeout(_spec("- {id: hold, kind: wait, until: due_at}\n"
                          "- {id: done, kind: succeed}\n", timeout=600)) == 600


def test_stages_adding_up_to_more_than_a_year_are_refused_unless_the_spec_ends_sooner():
    """Refused, not clamped: the stages' clocks would promise more than Step Functions runs."""
    stages = _human("first", 20_000_000) + _human("second", 20_000_000) \
        + "- {id: done, kind: succeed}\n"
    assert _problems(_spec(stages)) == [
        f"{SOURCE}: timeout: the ceilings of stages first → second add up to 40,000,448 s "
        "with the 300 s margin, more than the 31,536,000 s (a year) Step Functions runs an "
        "execution: shorten their clocks, or set timeout (at most 31,536,000) to end "
        "executions sooner"]
    assert _timeout(_spec(stages, timeout=YEAR)) == YEAR


# Children's ceilings, from the deployed versions ---------------------------------------------


def _parent(child: str) -> str:
    return (f"process: {unique_name('parent')}\nversion: 1\nstages:\n"
            f"  - {{id: run, kind: process, process: {child}, version: 1}}\n"
            "  - {id: done, kind: succeed}\n")


@pytest.mark.emulator
def test_a_deployed_parent_s_ceiling_includes_its_deployed_child_s(emulator, db):
    child = unique_name("child")
    text = (SPECS / "document-check.yaml").read_text().replace(
        "process: document-check", f"process: {child}")
    child_version, _ = process_deploy(text=text, source="child")
    parent, _ = process_deploy(text=_parent(child), source="parent")
    assert parent.asl["TimeoutSeconds"] == child_version.asl["TimeoutSeconds"] \
        + SEND_RETRIES + EXECUTION_MARGIN_SECONDS


@pytest.mark.django_db
def test_a_child_deployed_before_ceilings_is_refused_with_what_to_do():
    """A version deployed before state machines had a ceiling cannot be made through the
    services any more; it is written as the row it would be."""
    child = unique_name("old")
    process = Process.objects.create(name=child)
    ProcessVersion.objects.create(process=process, version=1, spec_text="(old)",
                                  spec_sha256="0" * 64, asl={"StartAt": "done"},
                                  state_machine_name=f"{child}-v1",
                                  state_machine_arn=f"arn:aws:states:x:1:stateMachine:{child}-v1")
    spec = spec_parse(_parent(child), source="parent.yaml")
    with pytest.raises(Conflict) as caught:
        child_ceilings(spec=spec)
    assert caught.value.message == (
        f"{spec.name} v1 starts {child} v1, which was deployed without an execution ceiling "
        f"(TimeoutSeconds): deploy a new version of {child} and start that one.")


@pytest.mark.django_db
def test_children_compiled_in_the_same_batch_come_before_deployed_ones():
    spec = spec_parse(_parent("not-deployed"), source="parent.yaml")
    assert child_ceilings(spec=spec) == {}
    assert child_ceilings(spec=spec, compiled={("not-deployed", 1): 900}) == {
        ("not-deployed", 1): 900}


@pytest.mark.emulator
def test_the_deploy_command_takes_a_child_s_ceiling_from_the_same_batch(
        emulator, db, tmp_path):
    """Both files are checked before either is deployed: the parent's ceiling comes from
    the child compiled beside it, as it will be deployed."""
    child = unique_name("batch-child")
    (tmp_path / "child.yaml").write_text((SPECS / "document-check.yaml").read_text().replace(
        "process: document-check", f"process: {child}"))
    parent = _parent(child)
    (tmp_path / "parent.yaml").write_text(parent)
    call_command("process_deploy", str(tmp_path / "parent.yaml"), str(tmp_path / "child.yaml"),
                 stdout=io.StringIO())
    deployed_child = ProcessVersion.objects.get(process__name=child)
    deployed_parent = ProcessVersion.objects.get(
        process__name=spec_parse(parent, source="p").name)
    assert deployed_parent.asl["TimeoutSeconds"] == deployed_child.asl["TimeoutSeconds"] \
        + SEND_RETRIES + EXECUTION_MARGIN_SECONDS
