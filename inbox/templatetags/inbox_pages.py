"""Template helpers of the inbox pages: a task's input laid out, clocks as text."""

import datetime
import re
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from inbox.models import TaskState

register = template.Library()

# Nested deeper than this, a value is not laid out (the API gives the whole input).
MAX_DEPTH = 8
# A value longer than this shows its start, and the whole behind "Show all". Values wrap
# anywhere (overflow-wrap: anywhere), and Chromium's cost of breaking one unbroken run
# grows with the square of its length: a 100 KB one took 17-19 s to lay out. The whole
# value sits in a box that scrolls instead of breaking it (inbox.css, .long-all).
LONG_VALUE = 500
# Keys named like a task token are never shown, whatever a process put in its input.
_TOKEN_KEY = re.compile(r"(?i)^(task_?)?token$")
_WORD_BREAK = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|[_\-\s]+")


def span_text(seconds: float) -> str:
    """Return a duration as "29 min 05 s", "2 h 03 min 09 s" or "3 d 4 h 05 min".

    inbox.js formats the same way, so a countdown keeps its text when the script takes over.
    """
    total = int(abs(seconds))
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h {minutes:02d} min"
    if hours:
        return f"{hours} h {minutes:02d} min {secs:02d} s"
    if minutes:
        return f"{minutes} min {secs:02d} s"
    return f"{secs} s"


@register.filter
def countdown(deadline: datetime.datetime | None) -> str:
    """Return the time left until deadline ("4 min 59 s left"), or how long it is overdue."""
    if deadline is None:
        return ""
    left = (deadline - timezone.now()).total_seconds()
    return f"{span_text(left)} left" if left >= 0 else f"{span_text(left)} overdue"


@register.filter
def age(since: datetime.datetime | None) -> str:
    """Return how long ago since was ("3 min 12 s")."""
    if since is None:
        return ""
    return span_text(max(0.0, (timezone.now() - since).total_seconds()))


@register.filter
def state_label(value: str) -> str:
    """Return a task state's label ("In progress"), or the value if it is no state."""
    try:
        return TaskState(value).label
    except ValueError:
        return value


@register.filter(name="words")
def key_label(key: str) -> str:
    """Return a key as words: "invoice_id" and "invoiceId" both read "Invoice id"."""
    words = [w for w in _WORD_BREAK.split(str(key)) if w]
    text = " ".join(words).lower() or str(key)
    return text[:1].upper() + text[1:]


@register.simple_tag
def value_tree(value: Any) -> SafeString:
    """Render a JSON value readably: objects as definition lists, nested ones indented."""
    return _render(value, depth=0)


def _render(value: Any, *, depth: int) -> SafeString:
    if isinstance(value, dict):
        if not value:
            return _muted("(empty)")
        if depth >= MAX_DEPTH:
            return _muted("(nested too deep to lay out)")
        rows = format_html_join(
            "", "<dt>{}</dt><dd>{}</dd>",
            ((key_label(key), _muted("(hidden)") if _TOKEN_KEY.match(str(key))
              else _render(item, depth=depth + 1)) for key, item in value.items()),
        )
        return format_html('<dl class="kv">{}</dl>', rows)
    if isinstance(value, list):
        if not value:
            return _muted("(none)")
        if depth >= MAX_DEPTH:
            return _muted("(nested too deep to lay out)")
        items = format_html_join("", "<li>{}</li>",
                                 ((_render(item, depth=depth + 1),) for item in value))
        return format_html('<ol class="items">{}</ol>', items)
    if value is None:
        return _muted("(blank)")
    if isinstance(value, bool):
        return format_html("{}", "yes" if value else "no")
    return _text(str(value))


def _text(text: str) -> SafeString:
    """Render a text value; a long one as its start and the whole behind a disclosure."""
    if len(text) > LONG_VALUE:
        count = f"{len(text):,}"
        return format_html(
            '{}…<details class="long-value"><summary>Show all {} characters</summary>'
            '<div class="long-all" tabindex="0" role="region" aria-label="All {} characters">'
            "{}</div></details>",
            _text(text[:LONG_VALUE]), count, count, text)
    if "\n" in text:
        return format_html('<span class="multiline">{}</span>', text)
    return format_html("{}", text)


def _muted(text: str) -> SafeString:
    return format_html('<span class="muted">{}</span>', text)
