import pytest

from processes.forms import BUILTIN_FORMS, FormInvalid, form_validate
from processes.spec import spec_load, spec_parse

APPROVE_REJECT = BUILTIN_FORMS["approve-reject"]


def test_approve_needs_no_comment():
    assert form_validate(APPROVE_REJECT, {"decision": "approve"}) == {
        "decision": "approve", "comment": None}


def test_reject_needs_a_comment():
    with pytest.raises(FormInvalid) as caught:
        form_validate(APPROVE_REJECT, {"decision": "reject", "comment": "  "})
    assert caught.value.errors == {"comment": "required when decision is reject"}


def test_missing_decision_and_unknown_field_are_named():
    with pytest.raises(FormInvalid) as caught:
        form_validate(APPROVE_REJECT, {"verdict": "yes"})
    assert caught.value.errors == {
        "verdict": "unknown field; the form 'approve-reject' has no such field",
        "decision": "required",
    }


def test_choice_outside_its_values():
    with pytest.raises(FormInvalid, match="decision: must be one of approve, reject"):
        form_validate(APPROVE_REJECT, {"decision": "maybe"})


def test_comment_length_limit():
    with pytest.raises(FormInvalid, match="comment: at most 2000 characters, got 2001"):
        form_validate(APPROVE_REJECT, {"decision": "reject", "comment": "x" * 2001})


def test_answer_must_be_an_object():
    with pytest.raises(FormInvalid, match="answer: must be an object"):
        form_validate(APPROVE_REJECT, ["approve"])


def _form(fields: str):
    text = f"""
process: f
version: 1
forms:
  custom:
    title: Custom
    fields:
{fields}
stages:
  - id: h
    kind: human
    skill: s
    title: T
    form: custom
    timeouts: {{offer: 1, work: 1, overall: 1}}
  - id: done
    kind: succeed
"""
    return spec_parse(text, source="f.yaml").form("custom")


def test_number_date_checkbox_fields_are_cleaned_from_html_strings():
    form = _form("""      - {name: amount, type: number, min: 0, max: 100}
      - {name: due, type: date}
      - {name: ok, type: checkbox}""")
    assert form_validate(form, {"amount": "12", "due": "2026-12-01", "ok": "on"}) == {
        "amount": 12, "due": "2026-12-01", "ok": True}
    assert form_validate(form, {"amount": 2.5, "ok": False}) == {
        "amount": 2.5, "due": None, "ok": False}


def test_number_and_date_errors_say_why():
    form = _form("""      - {name: amount, type: number, min: 0, max: 100}
      - {name: due, type: date}""")
    with pytest.raises(FormInvalid) as caught:
        form_validate(form, {"amount": "101", "due": "1/12/2026"})
    assert caught.value.errors == {"amount": "must be at most 100",
                                   "due": "must be a date as YYYY-MM-DD"}
    with pytest.raises(FormInvalid, match="amount: must be a number, not 'twelve'"):
        form_validate(form, {"amount": "twelve"})


def test_document_check_form_from_the_demo_spec():
    from pathlib import Path

    spec = spec_load(Path(__file__).resolve().parents[2] / "processes/specs/document-check.yaml")
    form = spec.form("document-check")
    assert form_validate(form, {"outcome": "valid", "expires_on": "2030-01-31"})["outcome"] == (
        "valid")
    with pytest.raises(FormInvalid) as caught:
        form_validate(form, {"outcome": "missing"})
    assert caught.value.errors == {"note": "required when outcome is invalid or missing"}


def test_form_definition_errors_name_the_path():
    from processes.spec import SpecError

    with pytest.raises(SpecError) as caught:
        _form("      - {name: pick, type: choice}\n      - {name: x, type: colour}")
    assert caught.value.problems == [
        "f.yaml: forms.custom.fields[0].choices: a choice field needs a non-empty list",
        "f.yaml: forms.custom.fields[1].type: must be one of text, textarea, number, choice, "
        "checkbox, date, not 'colour'",
    ]


def test_form_definitions_import_neither_specs_nor_models():
    """processes.spec imports processes.forms, so forms must not import spec (a cycle)."""
    import ast
    from pathlib import Path

    import processes.forms

    tree = ast.parse(Path(processes.forms.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for alias in node.names}
    assert not {name for name in imported if name.startswith("processes")}
