"""The loop of a long-running process of the inbox (the clock, the callbacks' sender).

Each loop runs one step again and again, sleeping as long as the step says; a step that
fails is logged with its traceback and tried again after a pause, so a database restart
or a bug met by one row never stops the process.
"""

import logging
import time
from collections.abc import Callable
from typing import Any

from django.db import close_old_connections, connection

logger = logging.getLogger("inbox.clock")

# After an unexpected error a loop waits this long before it tries again.
ERROR_PAUSE_SECONDS = 1.0


def every(seconds: float, work: Callable[[], Any]) -> Callable[[], float]:
    """Return a step that does work, then waits what is left of seconds."""

    def step() -> float:
        started = time.monotonic()
        work()
        return max(0.0, seconds - (time.monotonic() - started))

    return step


def loop_run(name: str, step: Callable[[], float], stop: Any, *, what: str = "clock",
             sleep: Callable[[float], Any] | None = None) -> None:
    """Run step until stop (a threading.Event) is set, sleeping as long as it says; an error
    is logged, not fatal. what names the loop's kind in the log ("The deadlines clock
    failed"). sleep, if given, sleeps instead of stop.wait between steps and may return
    early (the sender's wake-up); the pause after an error is always stop.wait's, so an
    error met again and again is not retried faster than that."""
    sleep = sleep or stop.wait
    try:
        while not stop.is_set():
            close_old_connections()
            try:
                wait = step()
            except Exception:
                # Loud, and the loop goes on: a database restart or a bug in one task must
                # not stop every deadline or answer. The connection may be broken: start a
                # fresh one.
                logger.exception("The %s %s failed; trying again in %.0f s", name, what,
                                 ERROR_PAUSE_SECONDS)
                connection.close()
                stop.wait(ERROR_PAUSE_SECONDS)
                continue
            sleep(wait)
    finally:
        connection.close()
