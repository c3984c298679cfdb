"""A human stage names the fields it shows; the envelope carries only those, and the rest
of the execution's state stays in Step Functions and comes out untouched."""

import datetime
import hashlib
import io
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command

from processes import aws
from processes.compiler import Target, compile_spec, state_machine_name
from processes.envelope import envelope_problems
from processes.models import Process, ProcessVersion
from processes.selectors import display_for
from processes.services import process_deploy
from processes.shown import show_state_names
from processes.spec import MAX_SHOWN, SpecError, spec_load, spec_parse
from tests.processes.lifecycle import unique_name
from tests.sfn import execution_wait, task_message_wait, unique

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
SOURCE = "s.yaml"
TARGET = Target(
    intake_queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/inbox-intake",
    state_machine_arn_prefix="arn:aws:states:eu-west-1:123456789012:stateMachine:",
)


def _spec(show: str | None, display: str = "") -> str:
    lines = ["process: shown", "version: 1", "stages:", "  - id: review", "    kind: human",
             "    skill: invoice-review", "    title: Review {invoice_id}",
             "    form: approve-reject", "    timeouts: {offer: 60, work: 600, overall: 3600}"]
    if show is not None:
        lines.append(f"    show: {show}")
    if display:
        lines.append("    display:\n" + textwrap.indent(textwrap.dedent(display).strip("\n"),
                                                     "      "))
    return "\n".join([*lines, "  - {id: done, kind: succeed}"]) + "\n"


def _problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec_parse(text, source=SOURCE)
    return caught.value.problems


# The spec ------------------------------------------------------------------------------------


def test_a_new_human_stage_must_name_the_fields_it_shows():
    assert _problems(_spec(None)) == [
        f"{SOURCE}: stages[0] (review).show: required; the data paths the task shows, such as "
        "[invoice_id, supplier.name]: only they leave the execution"]


@pytest.mark.django_db
def test_deploying_a_new_version_without_show_is_refused_before_anything_is_made():
    name = unique_name("noshow")
    with pytest.raises(SpecError) as caught:
        process_deploy(text=_spec(None).replace("process: shown", f"process: {name}"),
                       source=SOURCE)
    assert [problem.split(": ", 2)[1] for problem in caught.value.problems] == [
        "stages[0] (review).show"]
    assert not Process.objects.filter(name=name).exists()


def test_a_version_deployed_before_show_still_sends_the_whole_state():
    """Read as deployed, a stage without show compiles as it did: the whole state."""
    spec = spec_parse(_spec(None), source=SOURCE, deployed=True)
    asl = compile_spec(spec, target=TARGET)
    # A start enters through the router (processes/resume.py), by its default.
    assert asl["StartAt"] == "Resume"
    assert asl["States"]["Resume"]["Default"] == "review"
    assert asl["States"]["review"]["Parameters"]["MessageBody"]["input.$"] == "$"
    assert not [name for name in asl["States"] if name.startswith("review.")]


@pytest.mark.parametrize(("show", "problem"), [
    ("[]", "stages[0] (review).show: must be a non-empty list of data paths, such as "
           "[invoice_id, supplier.name]"),
    ("invoice_id", "stages[0] (review).show: must be a non-empty list of data paths, such as "
                   "[invoice_id, supplier.name]"),
    ("[invoice_id, $.amount]", "stages[0] (review).show[1]: must be a data path such as "
                               "invoice_id or supplier.name"),
    ("[invoice_id, invoice_id]", "stages[0] (review).show[1]: 'invoice_id' is shown more than "
                                 "once"),
    ("[supplier, supplier.name]", "stages[0] (review).show: 'supplier.name' is inside "
                                  "'supplier', which is shown whole: name one of them"),
    ("[" + ", ".join(f"f{n}" for n in range(MAX_SHOWN + 1)) + "]",
     f"stages[0] (review).show: {MAX_SHOWN + 1} fields; at most {MAX_SHOWN}"),
])
def test_show_is_a_list_of_distinct_data_paths(show, problem):
    assert _problems(_spec(show)) == [f"{SOURCE}: {problem}"]


def test_a_display_reads_only_fields_the_stage_shows():
    problems = _problems(_spec("[invoice_id, amount]", """
        fields:
          - {key: amount, format: money, currency_key: currency}
          - {key: invoice_id, format: link, url: "https://erp.example.com/{invoice_id}/{po}"}
          - {key: notes}
    """))
    where = f"{SOURCE}: stages[0] (review).display.fields"
    fix = "is not in show, so the task does not receive it: add it (or the object holding " \
          "it) to show"
    assert problems == [
        f"{where}[0] (amount).currency_key: currency_key 'currency' {fix}",
        f"{where}[1] (invoice_id).url: placeholder 'po' {fix}",
        f"{where}[2] (notes).key: key 'notes' {fix}",
    ]


def test_a_display_may_read_inside_a_shown_object():
    spec = spec_parse(_spec("[supplier]", "fields:\n  - {key: supplier.name}\n"), source=SOURCE)
    assert spec.stages[0].show == ("supplier",)


def test_the_demo_specs_show_every_field_their_displays_read():
    for path in sorted(SPECS.glob("*.yaml")):
        spec = spec_load(path)  # a display reading an unshown field would raise here
        assert all(stage.show for stage in spec.stages if stage.kind == "human"), path.name


# The compiled states -------------------------------------------------------------------------


def test_each_shown_field_is_copied_only_when_present_then_sent_as_the_input():
    asl = compile_spec(spec_parse(_spec("[invoice_id, supplier.name]"), source=SOURCE),
                       target=TARGET)
    states = asl["States"]
    # A start enters through the router (processes/resume.py), by its default.
    assert asl["StartAt"] == "Resume"
    assert asl["States"]["Resume"]["Default"] == "review.show"
    assert show_state_names("review", 2) == [
        "review.show", "review.show.1", "review.copy.1", "review.show.2", "review.copy.2"]
    assert states["review.show"] == {
        "Type": "Pass", "Comment": "Collect the fields review shows: only they go to the inbox.",
        "Result": {}, "ResultPath": "$.stages.review.input", "Next": "review.show.1"}
    assert states["review.show.2"] == {
        "Type": "Choice",
        "Choices": [{"Variable": "$.supplier.name", "IsPresent": True, "Next": "review.copy.2"}],
        "Default": "review"}
    assert states["review.copy.2"] == {
        "Type": "Pass", "InputPath": "$.supplier.name",
        "ResultPath": "$.stages.review.input.supplier.name", "Next": "review"}
    task = states["review"]
    assert task["Parameters"]["MessageBody"]["input.$"] == "$.stages.review.input"
    # The answer replaces the collected fields; the rest of the state passes through.
    assert task["ResultPath"] == "$.stages.review"


def test_every_edge_to_a_human_stage_leads_through_its_show_states():
    asl = compile_spec(spec_load(SPECS / "invoice-approval.yaml"), target=TARGET)
    into: dict[str, set[str]] = {}
    for name, state in asl["States"].items():
        targets = [state.get("Next"), state.get("Default"),
                   *(rule.get("Next") for rule in state.get("Choices", [])),
                   *(catch.get("Next") for catch in state.get("Catch", []))]
        for target in filter(None, targets):
            into.setdefault(target, set()).add(name)
    for stage, shown in (("review", 6), ("approval", 8)):
        # Only the stage's own last check and copy lead to its Task state.
        assert into[stage] == {f"{stage}.show.{shown}", f"{stage}.copy.{shown}"}
    # A start enters through the router (processes/resume.py), by its default.
    assert asl["StartAt"] == "Resume"
    assert asl["States"]["Resume"]["Default"] == "review.show"
    assert asl["States"]["route"]["Choices"][1]["Next"] == "approval.show"


KITCHEN_SINK = """
process: every-kind
version: 1
stages:
  - id: review
    kind: human
    skill: invoice-review
    title: Review {invoice_id}
    form: approve-reject
    timeouts: {offer: 60, work: 600, overall: 3600}
    show: [invoice_id]
  - {id: enrich, kind: automation, function: f, payload: {all: $, token: $.token}}
  - {id: documents, kind: process, process: document-check, version: 1}
  - {id: pause, kind: wait, seconds: 5}
  - {id: done, kind: succeed}
"""


def test_the_compiled_asl_names_the_task_token_only_where_step_functions_injects_it():
    """Token scan: $$.Task.Token appears once per human stage, as the envelope's taskToken,
    and no other value or key of the ASL reaches for it."""
    specs = [spec_load(path) for path in sorted(SPECS.glob("*.yaml"))]
    specs.append(spec_parse(KITCHEN_SINK, source="sink.yaml"))
    for spec in specs:
        asl = compile_spec(spec, target=TARGET, children={("document-check", 1): 20_000})
        found = [where for where, text in _strings(asl) if "Task.Token" in text]
        humans = [stage.id for stage in spec.stages if stage.kind == "human"]
        assert found == [f".States.{stage}.Parameters.MessageBody.taskToken.$"
                         for stage in humans], spec.name
        # The spec's own data paths (a payload naming $.token) are data, not the token.
        assert not [text for _where, text in _strings(asl) if "$$.Task" in text
                    and text != "$$.Task.Token"], spec.name


# On the emulator -----------------------------------------------------------------------------

# The invoice's data: what the stages show, and what only the execution needs.
INVOICE = {"invoice_id": "INV-88", "supplier": "ACME", "amount": 12_500, "currency": "EUR",
           "bank": {"iban": "AT611904300234573201", "holder": "ACME GmbH"},
           "internal": {"cost_centre": "4711", "owner": "finance@example.com"}}
SHOWN = {"invoice_id", "supplier", "amount", "currency"}


def _target() -> Target:
    queue_url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    _arn, partition, _sqs, region, account, _name = aws.queue_attributes(
        url=queue_url)["QueueArn"].split(":")
    return Target(queue_url, f"arn:{partition}:states:{region}:{account}:stateMachine:")


def _strings(value: Any, path: str = "") -> list[tuple[str, str]]:
    """Return (where, string) for every key and string value in a JSON value."""
    if isinstance(value, dict):
        return [found for key, item in value.items()
                for found in [(f"{path}.{key} (key)", key), *_strings(item, f"{path}.{key}")]]
    if isinstance(value, list):
        return [found for index, item in enumerate(value)
                for found in _strings(item, f"{path}[{index}]")]
    return [(path, value)] if isinstance(value, str) else []


def _answer(comment: str) -> dict:
    return {"answer": {"decision": "approve", "comment": comment}, "worker": "7",
            "completedAt": datetime.datetime.now(datetime.UTC).isoformat()}


@pytest.mark.emulator
def test_the_envelope_carries_only_shown_fields_and_the_execution_keeps_the_rest(emulator):
    asl = compile_spec(spec_load(SPECS / "invoice-approval.yaml"), target=_target())
    machine = aws.state_machine_create_or_update(name=unique("shown"), definition=asl,
                                                 role_arn=settings.INBOX_STATES_ROLE_ARN)
    # No due_date and no notes: a shown field the data lacks is left out, not an error.
    execution = aws.execution_start(state_machine_arn=machine, name=unique("inv"),
                                    input=INVOICE)
    review = task_message_wait(execution_arn=execution, stage="review")
    assert envelope_problems(review) == []
    assert review["input"] == {key: INVOICE[key] for key in SHOWN}
    assert (review["execution"], review["stage"], review["process"]) == (
        execution, "review", {"name": "invoice-approval", "version": 1})
    token = review["taskToken"]
    assert [where for where, text in _strings(review) if token in text] == [".taskToken"]
    review_answer = _answer("ok")
    aws.task_success(token=token, output=review_answer)

    approval = task_message_wait(execution_arn=execution, stage="approval")
    assert approval["input"] == {
        **{key: INVOICE[key] for key in SHOWN},
        "stages": {"review": {"completedAt": review_answer["completedAt"],
                              "answer": {"comment": "ok"}}},
    }
    assert [where for where, text in _strings(approval)
            if approval["taskToken"] in text] == [".taskToken"]
    approval_answer = _answer("fine")
    aws.task_success(token=approval["taskToken"], output=approval_answer)

    done = execution_wait(execution_arn=execution)
    assert done["status"] == "SUCCEEDED"
    # Everything the stages did not show came through untouched, and nothing was left of
    # the copies the envelopes were made from: each stage's result is its answer alone.
    assert json.loads(done["output"]) == {
        **INVOICE, "stages": {"review": review_answer, "approval": approval_answer}}
    assert not [text for _where, text in _strings(json.loads(done["output"]))
                if token in text or approval["taskToken"] in text]


@pytest.mark.emulator
def test_a_version_deployed_before_show_redeploys_unchanged_and_keeps_its_display(
        emulator, db, tmp_path):
    """Such a version cannot be deployed any more; it is written as the row it would be,
    with the state machine it has."""
    name = unique_name("legacy")
    text = (SPECS / "invoice-approval.yaml").read_text().replace(
        "process: invoice-approval", f"process: {name}")
    text = "\n".join(line for line in text.splitlines()
                     if not line.lstrip().startswith(("show:", "stages.review.answer.comment",
                                                      "# Only these")))
    spec = spec_parse(text, source="legacy", deployed=True)
    asl = compile_spec(spec, target=_target())
    machine = state_machine_name(name, 1)
    arn = aws.state_machine_create_or_update(name=machine, definition=asl,
                                             role_arn=settings.INBOX_STATES_ROLE_ARN)
    row = ProcessVersion.objects.create(
        process=Process.objects.create(name=name), version=1, spec_text=text,
        spec_sha256=hashlib.sha256(text.encode()).hexdigest(), asl=asl,
        state_machine_name=machine, state_machine_arn=arn)
    with pytest.raises(SpecError):
        spec_parse(text, source="legacy")  # as a new version it would be refused

    assert process_deploy(text=text, source="legacy") == (row, False)
    path = tmp_path / "legacy.yaml"
    path.write_text(text)
    out = io.StringIO()
    call_command("process_deploy", str(path), stdout=out)
    assert out.getvalue().startswith(f"unchanged {name} v1: {arn}")
    display = display_for(process_name=name, process_version=1, stage="review")
    assert display is not None and display.fields[0].key == "invoice_id"
