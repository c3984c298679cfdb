"""Reading query parameters that pages and streams take: never a 500 from a crafted one.

A row id in a link ("before", "worker", "since") is ASCII digits within a bigint:
"²" (a Unicode digit str.isdigit accepts and int refuses), a 5,000-digit number or a
negative one are a mangled link, answered as such by the caller. Text kept in a filter
or cursor holds no NUL (PostgreSQL refuses it in a query) and has a bounded length.
"""

import re

_ROW_ID = re.compile(r"[0-9]{1,18}", re.ASCII)


def row_id(value: str | None, *, minimum: int = 1) -> int | None:
    """Return value as a row id (minimum to 10^18 - 1), or None if it is not one.

    Rows are numbered from 1; an event cursor passes minimum=0 ("before the first").
    """
    if value is None or not _ROW_ID.fullmatch(value) or int(value) < minimum:
        return None
    return int(value)


def text_ok(value: str, *, longest: int) -> bool:
    """Return whether value may go into a query: no NUL, at most longest characters."""
    return "\x00" not in value and len(value) <= longest
