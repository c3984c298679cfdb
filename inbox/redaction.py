"""A logging filter that redacts token-shaped values: the second line of defence.

The first line is never passing a task token to a logger at all. This filter catches
the mistakes: a logged envelope, message body or request parameters (any value under
a key named like "taskToken" or "token"), and long opaque runs such as AWS task tokens
(hundreds of URL-safe base64 characters).
"""

import logging
import re

REDACTED = "[redacted]"
_KEYED = re.compile(
    r"""(?ix)
    (["']?(?:task_?token|token)["']?\s*[:=]\s*)   # a key named like a token
    (["']?)                                          # an optional opening quote
    [^\s"',}\]]+                                     # the value
    """
)
_OPAQUE = re.compile(r"[A-Za-z0-9+/_\-]{64,}={0,2}")


def redact(text: str) -> str:
    """Return text with token-shaped values replaced by [redacted]."""
    text = _KEYED.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return _OPAQUE.sub(REDACTED, text)


class RedactTokens(logging.Filter):
    """Rewrite each record's message (with its arguments) and exception text, redacted."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: keep its raw text, redacted
            message = str(record.msg)
        record.msg, record.args = redact(message), None
        if record.exc_info:
            formatted = logging.Formatter().formatException(record.exc_info)
            record.exc_text = redact(formatted)
            record.exc_info = None
        return True
