"""How a human stage's task input is shown: the spec's ``display`` declaration, parsed.

A human stage may declare which input fields its task page shows, in which order, with
which label and format (docs/PROCESSES.md, "Display"). The declaration stays in the
deployed spec: the inbox looks it up by the task's process, version and stage when it
renders the page (processes.selectors.display_for), as it looks up the stage's form; the
envelope does not carry it. inbox/display.py renders the input with it, or without one
(a hand-written state machine) by a default.
"""

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from processes.contract import DATA_PATH, PLACEHOLDER

# auto: what an undeclared input gets (dates as dates, web addresses as links...).
FORMATS = ("auto", "text", "number", "money", "date", "datetime", "link", "long-text",
           "list", "json")
# What the input keys left out of the declaration get: a closed "Other input" disclosure
# (the default: nothing the worker may need is out of reach), or nothing on the page.
OTHERS = ("collapsed", "hidden")
MAX_FIELDS = 50
LABEL_MAX = 80
CURRENCY = re.compile(r"^[A-Z]{3}$")
LINK_SCHEMES = ("http", "https")
_DISPLAY_KEYS = {"fields", "others"}
_FIELD_KEYS = {"key", "label", "format", "currency", "currency_key", "url"}


@dataclass(frozen=True)
class DisplayField:
    key: str
    # "": the page words the key's last part ("invoice_id" -> "Invoice id").
    label: str = ""
    format: str = "auto"
    # money: a literal ISO 4217 code, or the data path of a field holding one.
    currency: str = ""
    currency_key: str = ""
    # link: an http(s) address with {data.path} placeholders; the key's value is its text.
    url: str = ""


@dataclass(frozen=True)
class Display:
    fields: tuple[DisplayField, ...]
    others: str = "collapsed"


def display_parse(raw: Any, *, path: str, problems: list[str]) -> Display | None:
    """Return the display declared at path, appending "path: message" for each problem."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        problems.append(f"{path}: a mapping with fields (a list) and optionally others")
        return None
    for key in sorted(set(raw) - _DISPLAY_KEYS, key=str):
        problems.append(f"{path}.{key}: unknown field (known: "
                        f"{', '.join(sorted(_DISPLAY_KEYS))})")
    others = raw.get("others", "collapsed")
    if others not in OTHERS:
        problems.append(f"{path}.others: must be one of {', '.join(OTHERS)}, not {others!r}")
        others = "collapsed"
    items = raw.get("fields")
    if not isinstance(items, list) or not items:
        problems.append(f"{path}.fields: required; a list of fields such as "
                        "{key: amount, format: money, currency: EUR}")
        return None
    if len(items) > MAX_FIELDS:
        problems.append(f"{path}.fields: {len(items)} fields; at most {MAX_FIELDS}")
    fields = []
    for index, item in enumerate(items):
        parsed = _field(item, f"{path}.fields[{index}]", problems)
        if parsed:
            fields.append(parsed)
    keys = [f.key for f in fields]
    for duplicate in sorted({k for k in keys if keys.count(k) > 1}):
        problems.append(f"{path}.fields: key {duplicate!r} is shown more than once")
    return Display(fields=tuple(fields), others=others)


def _field(raw: Any, path: str, problems: list[str]) -> DisplayField | None:
    if not isinstance(raw, dict):
        problems.append(f"{path}: a field is a mapping such as {{key: invoice_id, label: "
                        "Invoice}")
        return None
    key = raw.get("key")
    if not isinstance(key, str) or not DATA_PATH.match(key):
        problems.append(f"{path}.key: required; the data path of an input field, such as "
                        "invoice_id or supplier.name")
        return None
    path = f"{path} ({key})"
    for unknown in sorted(set(raw) - _FIELD_KEYS, key=str):
        problems.append(f"{path}.{unknown}: unknown field (known: "
                        f"{', '.join(sorted(_FIELD_KEYS))})")
    label = raw.get("label", "")
    if not isinstance(label, str) or ("label" in raw and not label.strip()) \
            or len(label) > LABEL_MAX:
        problems.append(f"{path}.label: must be text of 1 to {LABEL_MAX} characters")
        label = ""
    kind = raw.get("format", "auto")
    if kind not in FORMATS:
        problems.append(f"{path}.format: unknown format {kind!r} (known: "
                        f"{', '.join(FORMATS)})")
        return None
    currency, currency_key = raw.get("currency"), raw.get("currency_key")
    if kind == "money":
        if (currency is None) == (currency_key is None):
            problems.append(f"{path}: a money field needs exactly one of currency (a code "
                            "such as EUR) or currency_key (the data path of a field holding "
                            "one)")
        if currency is not None and (not isinstance(currency, str)
                                     or not CURRENCY.match(currency)):
            problems.append(f"{path}.currency: must be an ISO 4217 code of three capital "
                            "letters, such as EUR")
            currency = None
        if currency_key is not None and (not isinstance(currency_key, str)
                                         or not DATA_PATH.match(currency_key)):
            problems.append(f"{path}.currency_key: must be a data path such as currency")
            currency_key = None
    else:
        for name in ("currency", "currency_key"):
            if name in raw:
                problems.append(f"{path}.{name}: only for format money")
    url = raw.get("url")
    if url is not None:
        if kind != "link":
            problems.append(f"{path}.url: only for format link")
        elif problem := url_template_problem(url):
            problems.append(f"{path}.url: {problem}")
            url = None
    return DisplayField(key=key, label=label.strip(), format=kind,
                        currency=currency if isinstance(currency, str) else "",
                        currency_key=currency_key if isinstance(currency_key, str) else "",
                        url=url if isinstance(url, str) and kind == "link" else "")


def url_template_problem(url: Any) -> str:
    """Return why a link's url template is refused, or "" when it is a web address.

    Its scheme (http or https) and host are written out: a placeholder may fill the path,
    query or fragment only, so no input can turn the link into javascript: or another site.
    """
    if not isinstance(url, str) or not url:
        return "must be an http or https address such as https://erp.example.com/{invoice_id}"
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        return "must not contain spaces or control characters"
    scheme, _, rest = url.partition("://")
    if scheme.lower() not in LINK_SCHEMES:
        return (f"must start with http:// or https:// (a link never runs script: "
                f"{scheme.split(':', 1)[0] or url[:20]!r} is refused)")
    host = rest.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if not host or PLACEHOLDER.search(host):
        return "must name its host itself; placeholders may fill the path and query only"
    try:
        urlsplit(url)
    except ValueError as exc:
        return f"is not a valid address: {exc}"
    for placeholder in PLACEHOLDER.findall(url):
        if not DATA_PATH.match(placeholder):
            return f"placeholder {{{placeholder}}} is not a data path such as {{invoice_id}}"
    return ""
