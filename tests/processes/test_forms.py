import pytest

from processes.forms import BUILTIN_FORMS, Field, Form, FormInvalid, form_validate
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
    show: [x]
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

    import processes.answer_fields
    import processes.forms

    for module in (processes.forms, processes.answer_fields):
        tree = ast.parse(Path(module.__file__).read_text())
        imported = {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom)}
        imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for alias in node.names}
        assert {name for name in imported if name.startswith("processes")} <= {
            "processes.answer_fields"}, module.__name__


# What an answer of each field type becomes, from the API's JSON and from a page's strings ---

EVERY_TYPE = Form(name="every-type", title="Every type", fields=(
    Field(name="amount", type="number", label="Amount", min=0, max=100),
    Field(name="due", type="date", label="Due"),
    Field(name="ok", type="checkbox", label="OK"),
    Field(name="ref", type="text", label="Reference", max_length=5),
    Field(name="note", type="textarea", label="Note", max_length=5),
    Field(name="share", type="choice", label="Share", choices=(("50%", "Half"), ("1", "One"))),
))


@pytest.mark.parametrize(("given", "cleaned"), [
    ({"amount": " 12 "}, 12),
    ({"amount": "12.5"}, 12.5),
    ({"amount": "1e1"}, 10),
    ({"amount": 7}, 7),
    ({"ref": "  ab "}, "ab"),
    ({"note": " ab "}, " ab "),
    ({"note": "   "}, None),
    ({"ok": "OFF"}, False),
    ({"ok": "Yes"}, True),
    ({"ok": ""}, False),
    ({"ok": True}, True),
    ({"share": 1}, "1"),
    ({"share": "50%"}, "50%"),
    ({"share": "  "}, None),
    ({"due": "20261201"}, "2026-12-01"),
])
def test_each_value_is_cleaned_as_it_always_was(given, cleaned):
    (name, _value), = given.items()
    result = form_validate(EVERY_TYPE, given)
    assert result[name] == cleaned and type(result[name]) is type(cleaned)
    assert set(result) == {f.name for f in EVERY_TYPE.fields}


def test_a_json_float_stays_a_float_and_a_posted_whole_number_becomes_an_int():
    assert type(form_validate(EVERY_TYPE, {"amount": 12.0})["amount"]) is float
    assert type(form_validate(EVERY_TYPE, {"amount": "12.0"})["amount"]) is int


@pytest.mark.parametrize(("given", "error"), [
    ({"amount": True}, "must be a number"),
    ({"amount": [1]}, "must be a finite number"),
    ({"amount": "nan"}, "must be a finite number"),
    ({"amount": "-inf"}, "must be a finite number"),
    ({"amount": "-1"}, "must be at least 0"),
    ({"amount": "100.5"}, "must be at most 100"),
    ({"amount": "x" * 50}, f"must be a number, not {'x' * 40!r}"),
    ({"ref": 12}, "must be text"),
    ({"ref": "  abcde  "}, "at most 5 characters, got 9"),
    ({"note": "abcdef"}, "at most 5 characters, got 6"),
    ({"ok": 1}, "must be true or false"),
    ({"ok": "maybe"}, "must be true or false"),
    ({"share": "2"}, "must be one of 50%, 1"),
    ({"share": ["1"]}, "must be one of 50%, 1"),
    ({"due": "2026-02-30"}, "must be a date as YYYY-MM-DD"),
])
def test_each_bad_value_is_refused_with_its_message(given, error):
    (name, _value), = given.items()
    with pytest.raises(FormInvalid) as caught:
        form_validate(EVERY_TYPE, given)
    assert caught.value.errors == {name: error}


def test_errors_come_unknown_fields_first_then_bad_values_then_missing_ones():
    """The order of the message the page and the API show."""
    with pytest.raises(FormInvalid) as caught:
        form_validate(APPROVE_REJECT, {"zeta": 1, "comment": "x" * 2001, "alpha": 2})
    assert str(caught.value) == (
        "alpha: unknown field; the form 'approve-reject' has no such field; "
        "zeta: unknown field; the form 'approve-reject' has no such field; "
        "comment: at most 2000 characters, got 2001; decision: required")
    form = Form(name="order", title="Order", fields=(
        Field(name="first", type="text", label="First", required_if=(("kind", ("x",)),)),
        Field(name="second", type="text", label="Second", required=True),
        Field(name="kind", type="choice", label="Kind", choices=(("x", "X"),)),
        Field(name="size", type="number", label="Size"),
    ))
    with pytest.raises(FormInvalid) as caught:
        form_validate(form, {"kind": "x", "size": "big"})
    assert str(caught.value) == (
        "size: must be a number, not 'big'; first: required when kind is x; second: required")


def test_a_definition_with_a_list_among_its_required_if_values_still_validates():
    """YAML may give such a value; the definition cannot key a cache, the answer is checked."""
    form = Form(name="odd", title="Odd", fields=(
        Field(name="kind", type="text", label="Kind"),
        Field(name="why", type="text", label="Why", required_if=(("kind", ("x", ["x"])),)),
    ))
    assert form_validate(form, {"kind": "y"}) == {"kind": "y", "why": None}
    with pytest.raises(FormInvalid, match="why: required when kind is x or"):
        form_validate(form, {"kind": "x"})


def test_a_required_checkbox_must_be_ticked_and_a_required_zero_is_given():
    acknowledge = BUILTIN_FORMS["acknowledge"]
    for unticked in ({}, {"done": False}, {"done": "off"}, {"done": ""}):
        with pytest.raises(FormInvalid) as caught:
            form_validate(acknowledge, unticked)
        assert caught.value.errors == {"done": "required"}
    assert form_validate(acknowledge, {"done": "on"}) == {"done": True, "note": None}
    count = Form(name="count", title="Count", fields=(
        Field(name="n", type="number", label="N", required=True),))
    assert form_validate(count, {"n": 0}) == {"n": 0}
    with pytest.raises(FormInvalid, match="n: required"):
        form_validate(count, {"n": " "})


@pytest.mark.parametrize("answer", [None, "approve", 3])
def test_an_answer_that_is_not_an_object_is_refused_whole(answer):
    with pytest.raises(FormInvalid) as caught:
        form_validate(APPROVE_REJECT, answer)
    assert caught.value.errors == {"answer": "must be an object of field values"}
