"""Small specs and helpers shared by the version, start, reconcile and API tests."""

import time
from collections.abc import Callable

from processes.models import Execution
from tests.sfn import unique


def unique_name(prefix: str = "t") -> str:
    """Return a process name no other test uses: the emulator lives for the whole session."""
    return unique(prefix)


def succeed_spec(*, name: str, version: int = 1, description: str = "Ends at once.") -> str:
    """Return a one-stage spec that succeeds immediately, its output being its input."""
    return f"""\
process: {name}
version: {version}
description: {description}
stages:
  - id: done
    kind: succeed
"""


def wait_spec(*, name: str, version: int = 1, seconds: int = 60) -> str:
    """Return a spec that waits seconds, then succeeds."""
    return f"""\
process: {name}
version: {version}
description: Waits {seconds} s, then succeeds.
stages:
  - id: pause
    kind: wait
    seconds: {seconds}
    next: done
  - id: done
    kind: succeed
"""


def parent_spec(*, name: str, child: str, child_version: int = 1) -> str:
    """Return a spec that runs child (a nested execution), then succeeds."""
    return f"""\
process: {name}
version: 1
description: Runs {child} v{child_version}.
stages:
  - id: run-child
    kind: process
    process: {child}
    version: {child_version}
    next: done
  - id: done
    kind: succeed
"""


def wait_for(
    condition: Callable[[], bool], *, timeout: float = 30, what: str = "the condition"
) -> None:
    """Poll condition every 50 ms until it holds; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout} s")
        time.sleep(0.05)


def status_of(execution: Execution) -> str:
    return Execution.objects.get(pk=execution.pk).status
