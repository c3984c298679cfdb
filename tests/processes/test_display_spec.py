"""A human stage's display declaration: parsed when valid, each problem named where it is."""

import textwrap
from pathlib import Path

import pytest

from processes.display import Display, DisplayField, url_template_problem
from processes.spec import SpecError, spec_load, spec_parse
from tests.processes.test_spec_rules import SOURCE, human, spec

SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
# What the displays below read: each must be shown (test_a_display_reads_only_shown_fields).
SHOWN = "[invoice_id, amount, currency, due, supplier, total, money, a, b, c]"


def with_display(display: str) -> str:
    """Return a one-stage spec whose human stage declares display (YAML, indented)."""
    stage = human("review", show=SHOWN) + "  display:\n" + textwrap.indent(
        textwrap.dedent(display), "    ")
    return spec(stage + "- {id: done, kind: succeed}\n")


def problems_of(display: str) -> list[str]:
    with pytest.raises(SpecError) as caught:
        spec_parse(with_display(display), source=SOURCE)
    return caught.value.problems


def test_a_declared_display_keeps_its_fields_in_order_with_labels_and_formats():
    parsed = spec_parse(with_display("""
        fields:
          - {key: invoice_id, label: Invoice, format: link, url: "https://erp.example.com/i/{invoice_id}"}
          - {key: amount, format: money, currency: EUR}
          - {key: total, format: money, currency_key: money.currency}
          - {key: supplier.name}
          - {key: due, format: date}
        others: hidden
    """), source=SOURCE)
    assert parsed.stages[0].display == Display(fields=(
        DisplayField(key="invoice_id", label="Invoice", format="link",
                     url="https://erp.example.com/i/{invoice_id}"),
        DisplayField(key="amount", format="money", currency="EUR"),
        DisplayField(key="total", format="money", currency_key="money.currency"),
        DisplayField(key="supplier.name"),
        DisplayField(key="due", format="date"),
    ), others="hidden")


def test_a_stage_without_display_has_none():
    parsed = spec_parse(spec(human("review") + "- {id: done, kind: succeed}\n"), source=SOURCE)
    assert parsed.stages[0].display is None


def test_the_demo_invoice_spec_declares_each_human_stage_s_display():
    invoice = spec_load(SPECS / "invoice-approval.yaml")
    review, approval = (invoice.stage("review"), invoice.stage("approval"))
    assert [f.key for f in review.display.fields][:3] == ["invoice_id", "supplier", "amount"]
    amount = next(f for f in approval.display.fields if f.key == "amount")
    assert (amount.format, amount.currency_key) == ("money", "currency")


def test_an_unknown_format_is_named_with_its_stage_and_field():
    assert problems_of("fields:\n  - {key: amount, format: moneys}\n") == [
        f"{SOURCE}: stages[0] (review).display.fields[0] (amount).format: unknown format "
        "'moneys' (known: auto, text, number, money, date, datetime, link, long-text, list, "
        "json)"]


def test_a_field_without_a_key_is_refused():
    assert problems_of("fields:\n  - {label: Amount, format: number}\n") == [
        f"{SOURCE}: stages[0] (review).display.fields[0].key: required; the data path of an "
        "input field, such as invoice_id or supplier.name"]


@pytest.mark.parametrize("key", ["invoice id", "$.amount", "lines[0]", 7])
def test_a_key_must_be_a_data_path(key):
    [problem] = problems_of(f"fields:\n  - {{key: {key!r}}}\n")
    assert "display.fields[0].key: required; the data path" in problem


@pytest.mark.parametrize("url", [
    "javascript:alert(1)//{invoice_id}",
    "JAVASCRIPT://x/{invoice_id}",
    "data:text/html,{invoice_id}",
    "//erp.example.com/{invoice_id}",
    "/invoices/{invoice_id}",
    "ftp://erp.example.com/{invoice_id}",
])
def test_a_link_url_must_be_http_or_https(url):
    [problem] = problems_of(f"fields:\n  - {{key: invoice_id, format: link, url: {url!r}}}\n")
    assert problem.startswith(f"{SOURCE}: stages[0] (review).display.fields[0] (invoice_id)"
                              ".url: must start with http:// or https://")


def test_a_link_url_names_its_own_host():
    [problem] = problems_of(
        'fields:\n  - {key: a, format: link, url: "https://{host}/x"}\n')
    assert problem.endswith(".url: must name its host itself; placeholders may fill the path "
                            "and query only")
    assert url_template_problem("https://erp.example.com/a/{b.c}?d={e}") == ""
    assert "is not a data path" in url_template_problem("https://erp.example.com/{a-b}")


def test_money_needs_exactly_one_currency():
    for field in ("{key: amount, format: money}",
                  "{key: amount, format: money, currency: EUR, currency_key: currency}"):
        [problem] = problems_of(f"fields:\n  - {field}\n")
        assert problem == (f"{SOURCE}: stages[0] (review).display.fields[0] (amount): a money "
                           "field needs exactly one of currency (a code such as EUR) or "
                           "currency_key (the data path of a field holding one)")
    [problem] = problems_of("fields:\n  - {key: amount, format: money, currency: euro}\n")
    assert problem.endswith("(amount).currency: must be an ISO 4217 code of three capital "
                            "letters, such as EUR")


def test_format_options_belong_to_their_format():
    problems = problems_of("""
        fields:
          - {key: a, format: number, currency: EUR}
          - {key: b, url: "https://x.example/{b}"}
          - {key: c, colour: red}
    """)
    assert problems == [
        f"{SOURCE}: stages[0] (review).display.fields[0] (a).currency: only for format money",
        f"{SOURCE}: stages[0] (review).display.fields[1] (b).url: only for format link",
        f"{SOURCE}: stages[0] (review).display.fields[2] (c).colour: unknown field (known: "
        "currency, currency_key, format, key, label, url)",
    ]


def test_the_display_itself_is_checked():
    assert problems_of("fields: []\n") == [
        f"{SOURCE}: stages[0] (review).display.fields: required; a list of fields such as "
        "{key: amount, format: money, currency: EUR}"]
    assert problems_of("fields:\n  - {key: a}\nothers: shown\nsort: true\n") == [
        f"{SOURCE}: stages[0] (review).display.sort: unknown field (known: fields, others)",
        f"{SOURCE}: stages[0] (review).display.others: must be one of collapsed, hidden, "
        "not 'shown'",
    ]
    assert problems_of("fields:\n  - {key: a}\n  - {key: a, label: Again}\n") == [
        f"{SOURCE}: stages[0] (review).display.fields: key 'a' is shown more than once"]
    assert problems_of("fields:\n  - {key: a, label: ''}\n") == [
        f"{SOURCE}: stages[0] (review).display.fields[0] (a).label: must be text of 1 to 80 "
        "characters"]


def test_only_a_human_stage_has_a_display():
    text = spec(human("review") + "- {id: done, kind: succeed, display: {fields: []}}\n")
    with pytest.raises(SpecError) as caught:
        spec_parse(text, source=SOURCE)
    assert caught.value.problems[0].startswith(
        f"{SOURCE}: stages[1] (done).display: unknown field for a succeed stage")
