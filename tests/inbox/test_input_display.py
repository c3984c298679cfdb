"""The task page shows the input as the process author declared it, else by a default:
in order, labelled, formatted, escaped, links only to http(s)."""

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from inbox import display
from inbox.models import Task
from inbox.services.worker import task_take_next
from processes.display import DisplayField
from processes.services import process_deploy
from processes.spec import spec_load
from tests.sfn import unique

SPEC = """
process: {name}
version: 1
stages:
  - id: review
    kind: human
    skill: invoice-review
    title: "Review invoice {{invoice_id}}"
    form: approve-reject
    timeouts: {{offer: 300, work: 1800, overall: 86400}}
    show: [invoice_id, amount, currency, due_date, supplier, notes, po_number, internal_ref]
    display:
      fields:
        - {{key: invoice_id, label: Invoice, format: link,
           url: "https://erp.example.com/invoices/{{invoice_id}}"}}
        - {{key: amount, label: Amount, format: money, currency_key: currency}}
        - {{key: due_date, label: Due, format: date}}
        - {{key: supplier.name, label: Supplier}}
        - {{key: supplier.site, label: Supplier site, format: link}}
        - {{key: notes, format: long-text}}
        - {{key: po_number, label: Purchase order}}
      others: {others}
  - {{id: done, kind: succeed}}
"""
NOTES = "Check the VAT line against the contract. " * 12
# In an order neither alphabetical nor jsonb's (shorter keys first).
INPUT = {
    "supplier": {"site": "https://acme.example/", "name": "ACME <b>Ltd</b>", "vat": "AT1"},
    "notes": NOTES,
    "invoice_id": "INV 42/7",
    "currency": "EUR",
    "amount": 18250,
    "due_date": "2026-12-31",
    "internal_ref": "R-9",
}


class InputRows(HTMLParser):
    """Collect the Input card's top-level rows: (label, value as text), and its links."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.links: list[dict[str, str]] = []
        self.depth = 0  # dl depth inside #task-input; 0: outside
        self.cell = ""

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "dl" and (self.depth or attrs.get("id") == "task-input"):
            self.depth += 1
        elif self.depth == 1 and tag in ("dt", "dd"):
            self.cell = tag
            if tag == "dt":
                self.rows.append(["", ""])
        elif self.depth and tag == "a":
            self.links.append(attrs)

    def handle_endtag(self, tag):
        if tag == "dl" and self.depth:
            self.depth -= 1
        elif self.depth == 1 and tag in ("dt", "dd"):
            self.cell = ""

    def handle_data(self, data):
        if self.depth and self.rows and self.cell:
            self.rows[-1][0 if self.cell == "dt" else 1] += data


def input_rows(html: str) -> InputRows:
    parser = InputRows()
    parser.feed(html)
    return parser


@pytest.fixture
def declared(emulator, make_task, worker):
    """Return a function: the task page of a task whose deployed stage declares display."""

    def page(browser, *, others: str = "collapsed", data: dict | None = None) -> str:
        name = unique("display")
        process_deploy(text=SPEC.format(name=name, others=others), source="test")
        make_task(process={"name": name, "version": 1}, input=INPUT if data is None else data)
        task = task_take_next(worker=worker)
        return browser.get(f"/tasks/{task.pk}/").content.decode()

    return page


@pytest.mark.emulator
def test_declared_fields_show_in_their_order_with_labels_and_formats(declared, worker,
                                                                    browser_for):
    html = declared(browser_for(worker))
    parsed = input_rows(html)
    labels = [label for label, _ in parsed.rows]
    assert labels == ["Invoice", "Amount", "Due", "Supplier", "Supplier site", "Notes",
                      "Purchase order"]
    values = dict(parsed.rows)
    assert values["Amount"] == "18,250.00\u00a0EUR"
    assert '<data class="money" value="18250.00">18,250.00\u00a0EUR</data>' in html
    assert values["Due"] == "31 Dec 2026"
    assert '<time datetime="2026-12-31">31 Dec 2026</time>' in html
    assert values["Supplier"] == "ACME <b>Ltd</b>"  # as text...
    assert "ACME &lt;b&gt;Ltd&lt;/b&gt;" in html  # ...escaped
    # A field the input lacks: a dash, and words for a screen reader.
    assert values["Purchase order"] == "—not given"
    # The url template, each value quoted; the link opens apart from the task page.
    assert [link["href"] for link in parsed.links] == [
        "https://erp.example.com/invoices/INV%2042%2F7", "https://acme.example/"]
    assert all(link["rel"] == "noopener noreferrer" and link["target"] == "_blank"
               for link in parsed.links)
    # Long text: its start, and the whole behind "Show all".
    assert values["Notes"].startswith(NOTES[:display.LONG_TEXT] + "…Show all 492 characters")
    # The keys the display leaves out (the money's currency counts as shown), collapsed.
    # What the display leaves out, collapsed: the money's currency counts as shown, and of
    # the supplier only what no field shows is left.
    others = re.search(r'<details class="other-input">\s*<summary>Other input \(2 fields\)'
                       r"</summary>(.*?)</details>", html, re.S)
    assert others and re.findall(r"<dt>(.*?)</dt>", others.group(1)) == [
        "Supplier", "Vat", "Internal ref"]


@pytest.mark.emulator
def test_others_hidden_shows_only_the_declared_fields(declared, worker, browser_for):
    html = declared(browser_for(worker), others="hidden", data={"amount": "12.5",
                                                               "currency": "jpy", "x": 1})
    assert "other-input" not in html
    values = dict(input_rows(html).rows)
    assert values["Amount"] == "13\u00a0JPY"  # yen have no decimals
    assert values["Invoice"] == "—not given"


def test_without_a_declaration_the_input_keeps_its_own_order_and_shows_by_shape(
        make_task, worker, browser_for):
    """Not deployed here (a hand-written state machine): the default layout."""
    data = {
        "zeta_id": "Z-1",
        "invoiceId": "INV-7",
        "amount": 18250,
        "due_date": "2026-12-31",
        "sent_at": "2026-11-30T09:15:00+01:00",
        "document": "https://docs.example.com/inv/7.pdf",
        "bad_link": "javascript:alert(1)",
        "story": "x" * 600,
        "address": {"street": "Hauptplatz 1", "city": "Graz"},
        "tags": ["a", "b"],
    }
    make_task(input=data)
    task = task_take_next(worker=worker)
    html = browser_for(worker).get(f"/tasks/{task.pk}/").content.decode()
    parsed = input_rows(html)
    assert [label for label, _ in parsed.rows] == [
        "Zeta id", "Invoice id", "Amount", "Due date", "Sent at", "Document", "Bad link",
        "Story", "Address", "Tags"]
    values = dict(parsed.rows)
    assert values["Amount"] == "18250"  # a number may be an id: shown as it came
    assert values["Due date"] == "31 Dec 2026"
    assert values["Sent at"] == "30 Nov 2026, 08:15 UTC"
    assert '<time datetime="2026-11-30T08:15:00Z" data-local>' in html
    assert [link["href"] for link in parsed.links] == ["https://docs.example.com/inv/7.pdf"]
    assert values["Bad link"] == "javascript:alert(1)"  # text, never a link
    assert values["Story"].startswith("x" * 500 + "…Show all 600 characters")
    assert '<dt>Address</dt><dd><dl class="kv"><dt>Street</dt><dd>Hauptplatz 1</dd>' in html
    assert '<ol class="items"><li>a</li><li>b</li></ol>' in html
    assert "other-input" not in html


ORDERED = {"supplier_name": "ACME", "invoice_id": "INV-1", "amount": 5, "b": "B",
           "currency": "EUR", "nested": {"zz_long_key": 1, "a": 2}}


def _page_labels(make_task, worker, browser_for) -> tuple[Task, list[str], str]:
    make_task(input=ORDERED)
    task = task_take_next(worker=worker)
    html = browser_for(worker).get(f"/tasks/{task.pk}/").content.decode()
    return task, [label for label, _ in input_rows(html).rows], html


def test_the_input_order_is_recorded_at_intake_and_shown(make_task, worker, browser_for):
    task, labels, html = _page_labels(make_task, worker, browser_for)
    assert task.input_order == [["supplier_name"], ["invoice_id"], ["amount"], ["b"],
                                ["currency"], ["nested", [["zz_long_key"], ["a"]]]]
    assert labels == ["Supplier name", "Invoice id", "Amount", "B", "Currency", "Nested"]
    assert re.search(r"<dt>Zz long key</dt>.*<dt>A</dt>", html, re.S)


@pytest.mark.postgres
def test_on_postgresql_jsonb_sorts_the_keys_and_the_page_keeps_the_input_s_order(
        make_task, worker, browser_for):
    """jsonb stores keys shorter first (what put "Amount" before "Invoice id")."""
    task, labels, html = _page_labels(make_task, worker, browser_for)
    task.refresh_from_db()
    assert list(task.input) == ["b", "amount", "nested", "currency", "invoice_id",
                                "supplier_name"]
    assert list(task.input["nested"]) == ["a", "zz_long_key"]
    assert labels == ["Supplier name", "Invoice id", "Amount", "B", "Currency", "Nested"]
    assert re.search(r"<dt>Zz long key</dt>.*<dt>A</dt>", html, re.S)


def test_the_api_answers_the_input_in_the_order_it_arrived(make_task, worker, api_client):
    """The API's task carries the input in its own key order too, on either database."""
    make_task(input=ORDERED)
    task = task_take_next(worker=worker)
    body = api_client(worker).get(f"/api/inbox/tasks/{task.pk}/").json()
    assert list(body["input"]) == ["supplier_name", "invoice_id", "amount", "b", "currency",
                                   "nested"]
    assert list(body["input"]["nested"]) == ["zz_long_key", "a"]
    assert body["input"] == ORDERED


# Formats, one by one -----------------------------------------------------------------------


def text_of(html: str) -> str:
    return re.sub(r"<[^>]+>", "", str(html))


@pytest.mark.parametrize(("value", "currency", "shown"), [
    (18250, "EUR", "18,250.00\u00a0EUR"),
    ("1234567.891", "USD", "1,234,567.89\u00a0USD"),
    (-0.005, "EUR", "-0.01\u00a0EUR"),
    ("-0.001", "EUR", "0.00\u00a0EUR"),
    (1500, "KWD", "1,500.000\u00a0KWD"),
    (1500.4, "jpy", "1,500\u00a0JPY"),
    (99.9, "", "99.90 (currency unknown)"),
    (99.9, "euro", "99.90 (currency unknown)"),
    ("a lot", "EUR", "a lot (not an amount)"),
    (True, "EUR", "true (not an amount)"),
])
def test_money(value, currency, shown):
    assert text_of(display.money(value, currency)) == shown


@pytest.mark.parametrize(("value", "shown"), [
    (18250, "18,250"), (1234.5, "1,234.5"), ("0.10", "0.10"), ("1e3", "1,000"),
    ("NaN", "NaN (not a number)"), ([1], "[1] (not a number)"),
])
def test_number(value, shown):
    assert text_of(display.number(value)) == shown


@pytest.mark.parametrize(("value", "kind", "shown"), [
    ("2026-02-03", "date", "3 Feb 2026"),
    ("2026-02-03T23:30:00-05:00", "date", "3 Feb 2026"),
    ("2026-02-30", "date", "2026-02-30 (not a date)"),
    ("next week", "date", "next week (not a date)"),
    ("2026-02-03T23:30:00-05:00", "datetime", "4 Feb 2026, 04:30 UTC"),
    ("2026-02-03T23:30:00Z", "datetime", "3 Feb 2026, 23:30 UTC"),
    ("2026-02-03T23:30", "datetime", "3 Feb 2026, 23:30"),
    ("2026-02-03", "datetime", "3 Feb 2026"),
    (20260203, "datetime", "20260203 (not a date and time)"),
])
def test_dates_and_times(value, kind, shown):
    rendered = display.date(value) if kind == "date" else display.moment(value)
    assert text_of(rendered) == shown


@pytest.mark.parametrize("address", [
    "javascript:alert(1)", "JavaScript:alert(1)", " javascript:alert(1)",
    "java\tscript:alert(1)", "data:text/html,<b>x</b>", "/relative/path",
    "//evil.example/x", "https://", "mailto:a@example.com", "https://a.example/\x00",
])
def test_only_an_http_or_https_address_becomes_a_link(address):
    rendered = str(display.render_field({"site": address},
                                        DisplayField(key="site", format="link")))
    assert "<a " not in rendered and "(not a web address)" in rendered


def test_a_link_is_escaped_and_opens_apart():
    rendered = str(display.link('https://a.example/?q="><script>'))
    assert rendered.startswith('<a href="https://a.example/?q=&quot;&gt;&lt;script&gt;" '
                               'rel="noopener noreferrer" target="_blank">')
    assert "(opens in a new tab)" in rendered


def test_a_link_whose_address_needs_a_missing_value_is_text():
    spec = DisplayField(key="invoice_id", format="link",
                        url="https://erp.example.com/{supplier.id}/{invoice_id}")
    rendered = str(display.render_field({"invoice_id": "INV-1"}, spec))
    assert "<a " not in rendered and rendered.startswith("INV-1 ")


def test_list_json_text_and_missing():
    data = {"tags": ["a", {"b": 1}], "one": "x", "obj": {"k": [1, 2]}, "none": None}
    rendered = {key: str(display.render_field(data, DisplayField(key=key, format=kind)))
                for key, kind in [("tags", "list"), ("one", "list"), ("obj", "json"),
                                  ("none", "text"), ("absent", "number")]}
    assert rendered["tags"] == ('<ul class="items"><li>a</li><li><dl class="kv"><dt>B</dt>'
                                "<dd>1</dd></dl></li></ul>")
    assert rendered["one"] == '<ul class="items"><li>x</li></ul>'
    assert rendered["obj"] == ('<span class="multiline json">'
                               + json.dumps({"k": [1, 2]}, indent=2).replace('"', "&quot;")
                               + "</span>")
    assert "not given" in rendered["none"] and "not given" in rendered["absent"]


def test_long_text_collapses_by_length_or_by_lines():
    lines = "\n".join(f"line {n}" for n in range(8))
    rendered = str(display.long_text(lines, limit=display.LONG_TEXT,
                                     lines=display.LONG_TEXT_LINES))
    assert rendered.startswith('<span class="multiline">line 0\nline 1\nline 2\nline 3\n'
                               "line 4</span>…<details")
    assert str(display.long_text("short", limit=display.LONG_TEXT)) == "short"


def test_in_order_tolerates_an_order_that_does_not_fit():
    value = {"b": 1, "a": {"y": 1, "x": 2}, "c": [{"q": 1, "p": 2}]}
    order = display.key_order(value)
    jsonb_like = {"a": {"x": 2, "y": 1}, "b": 1, "c": [{"p": 2, "q": 1}]}
    assert json.dumps(display.in_order(jsonb_like, order)) == json.dumps(value)
    assert display.in_order(jsonb_like, None) == jsonb_like  # a task from before the order
    assert list(display.in_order(jsonb_like, [["zz"], ["b"], "bad"])) == ["b", "a", "c"]


def test_the_demo_approval_stage_shows_the_review_it_follows():
    """The demo spec's approval stage: amount first, then the review's time and comment."""
    specs = Path(__file__).resolve().parents[2] / "processes" / "specs"
    spec = spec_load(specs / "invoice-approval.yaml")
    data = {"invoice_id": "INV-1002", "supplier": "Globex", "amount": 18250, "currency": "EUR",
            "due_date": "2027-01-15",
            "stages": {"review": {"answer": {"decision": "approve"}, "worker": "7",
                                  "completedAt": "2026-12-01T07:20:05.123456+00:00"}}}
    view = display.declared_view(data, spec.stage("approval").display)
    shown = {row.label: text_of(row.value) for row in view.rows}
    assert list(shown)[:3] == ["Amount", "Invoice", "Supplier"]
    assert shown["Amount"] == "18,250.00\u00a0EUR"
    assert shown["Reviewed"] == "1 Dec 2026, 07:20 UTC"
    assert shown["Reviewer's comment"] == "—not given"
    # Of the review, what no field shows stays under "Other input".
    assert [row.label for row in view.others] == ["Stages"]
    assert "Decision" in view.others[0].value and "Completed at" not in view.others[0].value
