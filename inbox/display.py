"""A task's input as the task page shows it: in order, labelled, formatted, escaped.

A human stage of a deployed spec may declare its display (processes.display): the fields to
show, in order, each with a label and a format. Without one (a hand-written state machine,
or a stage that declares none) the input is laid out by default: in the input's own key
order, keys as words, ISO dates as dates, http(s) addresses as links, long text collapsed,
nested objects as nested lists. Either way every value is escaped (format_html), a link is
only ever http or https, and a field the input lacks shows as "—".

PostgreSQL's jsonb keeps no key order (it sorts keys by length, then bytes): intake records
the input's order in Task.input_order (key_order) and the page puts it back (in_order).

Formats are fixed, not the browser's locale: numbers as 18,250.5; money with its currency's
decimals (2 for most) and code, 18,250.00 EUR; dates as 31 Dec 2026; times with an offset
as 31 Dec 2026, 14:05 UTC (inbox.js shows them in the reader's time zone).
"""

import datetime
import json
import re
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any
from urllib.parse import quote, urlsplit

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from inbox.models import Task
from inbox.templatetags.inbox_pages import LONG_VALUE, MAX_DEPTH, key_label
from processes.contract import PLACEHOLDER
from processes.display import LINK_SCHEMES, Display, DisplayField
from processes.selectors import display_for

# A declared long-text shows this many characters, or this many lines, before "Show all".
LONG_TEXT = 280
LONG_TEXT_LINES = 5
# A link's text is cut to this; the whole address stays its href.
LINK_TEXT = 120
# ISO 4217 currencies whose minor unit is not two decimals; every other code gets two.
MINOR_UNITS = {
    "BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0,
    "PYG": 0, "RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0,
    "XPF": 0, "BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
    "CLF": 4, "UYW": 4,
}
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# Keys named like a task token are never shown (as inbox_pages.value_tree hides them).
TOKEN_KEY = re.compile(r"(?i)^(task_?)?token$")
ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
ISO_DATETIME = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?"
                          r"(Z|[+-]\d{2}:?\d{2})?$")
_MISSING = object()
_CURRENCY = re.compile(r"^[A-Za-z]{3}$")


@dataclass(frozen=True)
class Row:
    """One line of the input: its label and its value, rendered."""

    key: str
    label: str
    value: SafeString


@dataclass(frozen=True)
class InputView:
    """What the Input card shows: rows, and the undeclared rest behind a disclosure."""

    rows: list[Row]
    others: list[Row] = field(default_factory=list)
    declared: bool = False


def input_view(*, task: Task) -> InputView:
    """Return the task's input as its stage declares it, else laid out by default."""
    data = in_order(task.input, task.input_order)
    if not isinstance(data, dict):
        return InputView(rows=[Row(key="", label="Input", value=auto(data))])
    display = display_for(process_name=task.process_name,
                          process_version=task.process_version, stage=task.stage)
    if display is None:
        return InputView(rows=default_rows(data))
    return declared_view(data, display)


def declared_view(data: dict[str, Any], display: Display) -> InputView:
    """Return the declared rows of data, and the rows of its keys the display leaves out."""
    rows = [Row(key=f.key, label=f.label or key_label(f.key.rsplit(".", 1)[-1]),
                value=render_field(data, f))
            for f in display.fields if not TOKEN_KEY.match(f.key.rsplit(".", 1)[-1])]
    shown = [f.key for f in display.fields] + [f.currency_key for f in display.fields
                                               if f.currency_key]
    others = [] if display.others == "hidden" else default_rows(_without(data, shown))
    return InputView(rows=rows, others=others, declared=True)


def _without(data: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """Return data without the values at paths; an object left empty by it goes too."""
    rest = dict(data)
    for path in paths:
        head, _, tail = path.partition(".")
        if head not in rest:
            continue
        if not tail:
            del rest[head]
        elif isinstance(rest[head], dict):
            inner = _without(rest[head], [tail])
            if inner:
                rest[head] = inner
            else:
                del rest[head]
    return rest


def default_rows(data: dict[str, Any]) -> list[Row]:
    """Return a row per key, in the input's order, each value laid out by default."""
    return [Row(key=str(key), label=key_label(key),
                value=_muted("(hidden)") if TOKEN_KEY.match(str(key)) else auto(value))
            for key, value in data.items()]


# The input's key order -------------------------------------------------------------------


def key_order(value: Any) -> Any:
    """Return the key order of every object in value, as lists jsonb keeps in order.

    An object gives [[key, order of its value], ...] ([key] alone when the value holds no
    object); a list holding objects gives {"items": [order of each item]}; anything else
    None. Walked as deep as the input goes (intake bounds it: processes.envelope).
    """
    if isinstance(value, dict):
        order = []
        for key, item in value.items():
            inner = key_order(item)
            order.append([key] if inner is None else [key, inner])
        return order
    if isinstance(value, list):
        items = [key_order(item) for item in value]
        return {"items": items} if any(item is not None for item in items) else None
    return None


def in_order(value: Any, order: Any) -> Any:
    """Return value with its objects' keys in the recorded order (key_order).

    Keys the order does not name follow in stored order; an order that does not fit the
    value (none recorded: a task from before the order was) leaves it as stored.
    """
    if isinstance(value, dict) and isinstance(order, list):
        ordered = {}
        for entry in order:
            if isinstance(entry, list) and entry and entry[0] in value:
                key = entry[0]
                ordered[key] = in_order(value[key], entry[1] if len(entry) > 1 else None)
        ordered.update((key, item) for key, item in value.items() if key not in ordered)
        return ordered
    if isinstance(value, list) and isinstance(order, dict) \
            and isinstance(order.get("items"), list) and len(order["items"]) == len(value):
        return [in_order(item, inner) for item, inner in zip(value, order["items"],
                                                             strict=True)]
    return value


def lookup(data: Any, path: str) -> Any:
    """Return the value at a data path ("supplier.name") in data, or _MISSING."""
    for part in path.split("."):
        if not isinstance(data, dict) or part not in data:
            return _MISSING
        data = data[part]
    return data


# One declared field ------------------------------------------------------------------------


def render_field(data: dict[str, Any], spec: DisplayField) -> SafeString:
    """Render the value spec.key names in data in spec's format; "—" if it is not there."""
    value = lookup(data, spec.key)
    if value is _MISSING or value is None:
        return missing()
    kind = spec.format
    if kind == "money":
        currency = spec.currency or lookup(data, spec.currency_key)
        return money(value, currency if isinstance(currency, str) else "")
    if kind == "link":
        if not spec.url:
            return link(value)
        href = _filled(spec.url, data)
        return link(value, href=href) if href else _unfit(value, "no link: its address "
                                                          "needs a value the input lacks")
    if kind == "list":
        items = value if isinstance(value, list) else [value]
        if not items:
            return _muted("(none)")
        return format_html('<ul class="items">{}</ul>', format_html_join(
            "", "<li>{}</li>", ((auto(item, depth=1),) for item in items)))
    if kind == "json":
        return long_text(json.dumps(value, indent=2, ensure_ascii=False), limit=LONG_VALUE,
                         css="json")
    renderers = {"auto": auto, "text": lambda v: long_text(_plain(v)),
                 "long-text": lambda v: long_text(_plain(v), limit=LONG_TEXT,
                                                  lines=LONG_TEXT_LINES),
                 "number": number, "date": date, "datetime": moment}
    return renderers[kind](value)


def number(value: Any) -> SafeString:
    """Render a number with thousands separators ("18,250.5"), as precise as it came."""
    amount = _decimal(value)
    if amount is None:
        return _unfit(value, "not a number")
    return format_html('<data value="{}">{}</data>', amount, f"{amount:,f}")


def money(value: Any, currency: str) -> SafeString:
    """Render an amount with its currency's decimals and code: "18,250.00 EUR"."""
    amount = _decimal(value)
    if amount is None:
        return _unfit(value, "not an amount")
    code = currency.upper() if _CURRENCY.match(currency or "") else ""
    places = MINOR_UNITS.get(code, 2)
    rounded = amount.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)
    rounded = rounded if rounded else abs(rounded)  # -0.001 is 0.00, not -0.00
    text = f"{rounded:,.{places}f}"
    if not code:
        return format_html('<data value="{}">{}</data> {}', rounded, text,
                           _muted("(currency unknown)"))
    return format_html('<data class="money" value="{}">{}\u00a0{}</data>', rounded, text, code)


def date(value: Any) -> SafeString:
    """Render an ISO date (or the date of an ISO time) as "31 Dec 2026"."""
    day = _date(value)
    if day is None:
        return _unfit(value, "not a date")
    return format_html('<time datetime="{}">{}</time>', day.isoformat(), _day_text(day))


def moment(value: Any) -> SafeString:
    """Render an ISO time as "31 Dec 2026, 14:05 UTC" (in its own terms when it has no offset)."""
    if isinstance(value, str) and ISO_DATE.match(value):
        return date(value)
    when = _datetime(value)
    if when is None:
        return _unfit(value, "not a date and time")
    if when.tzinfo is None:
        return format_html('<time datetime="{}">{}, {}</time>', when.isoformat(),
                           _day_text(when.date()), f"{when:%H:%M}")
    when = when.astimezone(datetime.UTC)
    return format_html('<time datetime="{}" data-local>{}, {} UTC</time>',
                       when.isoformat().replace("+00:00", "Z"), _day_text(when.date()),
                       f"{when:%H:%M}")


def link(value: Any, *, href: str | None = None) -> SafeString:
    """Render a link to href (else to the value, when it is an http(s) address).

    Any other address (javascript:, data:, a relative path) stays text: never a link.
    """
    text = _plain(value)
    target = href if href is not None else text
    if not web_address(target):
        return _unfit(value, "not a web address")
    shown = text if len(text) <= LINK_TEXT else f"{text[:LINK_TEXT]}…"
    return format_html('<a href="{}" rel="noopener noreferrer" target="_blank">{}'
                       '<span class="sr-only"> (opens in a new tab)</span></a>', target, shown)


def web_address(text: Any) -> bool:
    """Return True if text is an absolute http or https address with a host."""
    if not isinstance(text, str) or not text or any(ord(c) <= 0x20 or ord(c) == 0x7F
                                                    for c in text):
        return False
    try:
        parts = urlsplit(text)
    except ValueError:
        return False
    return parts.scheme.lower() in LINK_SCHEMES and bool(parts.hostname)


def missing() -> SafeString:
    """Render a field the input does not have, or has as null."""
    return mark_safe('<span class="muted"><span aria-hidden="true">—</span>'
                     '<span class="sr-only">not given</span></span>')


# The default layout ------------------------------------------------------------------------


def auto(value: Any, *, depth: int = 0) -> SafeString:
    """Render a value by its shape: objects as definition lists, lists as lists, ISO dates
    and times as dates, http(s) addresses as links, long text collapsed."""
    if isinstance(value, dict):
        if not value:
            return _muted("(empty)")
        if depth >= MAX_DEPTH:
            return _muted("(nested too deep to lay out)")
        rows = format_html_join("", "<dt>{}</dt><dd>{}</dd>", (
            (key_label(key), _muted("(hidden)") if TOKEN_KEY.match(str(key))
             else auto(item, depth=depth + 1)) for key, item in value.items()))
        return format_html('<dl class="kv">{}</dl>', rows)
    if isinstance(value, list):
        if not value:
            return _muted("(none)")
        if depth >= MAX_DEPTH:
            return _muted("(nested too deep to lay out)")
        return format_html('<ol class="items">{}</ol>', format_html_join(
            "", "<li>{}</li>", ((auto(item, depth=depth + 1),) for item in value)))
    if value is None:
        return _muted("(blank)")
    if isinstance(value, bool):
        return format_html("{}", "yes" if value else "no")
    if isinstance(value, str):
        if ISO_DATE.match(value) and _date(value):
            return date(value)
        if ISO_DATETIME.match(value) and _datetime(value):
            return moment(value)
        if len(value) <= LONG_VALUE and web_address(value):
            return link(value)
    return long_text(str(value))


def long_text(text: str, *, limit: int = LONG_VALUE, lines: int = 0,
              css: str = "") -> SafeString:
    """Render text; past limit characters (or lines), its start and the whole behind
    "Show all" (the markup inbox_pages.value_tree gives a long value)."""
    cut = len(text) > limit
    start = text[:limit]
    if lines and start.count("\n") >= lines:
        start, cut = "\n".join(start.split("\n")[:lines]), True
    if cut:
        count = f"{len(text):,}"
        return format_html(
            '{}…<details class="long-value"><summary>Show all {} characters</summary>'
            '<div class="long-all" tabindex="0" role="region" aria-label="All {} characters">'
            "{}</div></details>",
            long_text(start, limit=limit, css=css), count, count, text)
    classes = " ".join(c for c in ("multiline" if "\n" in text else "", css) if c)
    if classes:
        return format_html('<span class="{}">{}</span>', classes, text)
    return format_html("{}", text)


# Pieces --------------------------------------------------------------------------------


def _plain(value: Any) -> str:
    """Return a value as text: strings as they are, anything else as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _decimal(value: Any) -> Decimal | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    return amount if amount.is_finite() else None


def _date(value: Any) -> datetime.date | None:
    if not isinstance(value, str):
        return None
    if ISO_DATE.match(value):
        try:
            return datetime.date.fromisoformat(value)
        except ValueError:
            return None
    when = _datetime(value)
    return when.date() if when else None


def _datetime(value: Any) -> datetime.datetime | None:
    if not isinstance(value, str) or not ISO_DATETIME.match(value):
        return None
    try:
        return datetime.datetime.fromisoformat(value)
    except ValueError:
        return None


def _day_text(day: datetime.date) -> str:
    return f"{day.day} {MONTHS[day.month - 1]} {day.year}"


def _filled(url: str, data: dict[str, Any]) -> str | None:
    """Return a link's url template with its placeholders filled, each value URL-quoted;
    None when one is missing (the link cannot be built)."""
    values = {}
    for placeholder in PLACEHOLDER.findall(url):
        value = lookup(data, placeholder)
        if value is _MISSING or value is None or isinstance(value, dict | list):
            return None
        values[placeholder] = quote(_plain(value), safe="")
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], url)


def _unfit(value: Any, why: str) -> SafeString:
    """Render a value that does not fit its declared format: as text, saying so."""
    return format_html("{} {}", long_text(_plain(value)), _muted(f"({why})"))


def _muted(text: str) -> SafeString:
    return format_html('<span class="muted">{}</span>', text)
