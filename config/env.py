"""Typed readers for settings taken from the environment.

Each reader returns a value of one type or raises ImproperlyConfigured naming
the variable and what is wrong with it. Secret values are never echoed back.
"""

import os
from collections.abc import Sequence

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_MISSING = object()


def _raw(name: str) -> str | None:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def env_str(name: str, default: str | object | None = _MISSING) -> str | None:
    """Return the variable as a string, or default; raise if required and unset."""
    value = _raw(name)
    if value is not None:
        return value
    if default is _MISSING:
        raise ImproperlyConfigured(f"{name} is required but not set.")
    return default  # type: ignore[return-value]


def env_bool(name: str, default: bool) -> bool:
    """Return the variable as a boolean (true/false, 1/0, yes/no, on/off)."""
    value = _raw(name)
    if value is None:
        return default
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name}={value!r} is not a boolean; use one of "
        f"{', '.join(sorted(_TRUE | _FALSE))}."
    )


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    """Return the variable as an integer, optionally bounded."""
    value = _raw(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name}={number} is below the minimum {minimum}.")
    if maximum is not None and number > maximum:
        raise ImproperlyConfigured(f"{name}={number} is above the maximum {maximum}.")
    return number


def env_list(name: str, default: Sequence[str] = ()) -> list[str]:
    """Return the variable split on commas, blanks dropped."""
    value = _raw(name)
    if value is None:
        return list(default)
    return [item.strip() for item in value.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: Sequence[str]) -> str:
    """Return the variable if it is one of choices."""
    value = _raw(name)
    if value is None:
        return default
    if value not in choices:
        raise ImproperlyConfigured(
            f"{name}={value!r} is not one of: {', '.join(choices)}."
        )
    return value
