"""The callbacks' sender's wake-up: PostgreSQL tells it when an answer is written.

A trigger (migration 0015) notifies the channel ``inbox_outbox`` when a statement inserts
outbox rows or requeues a dead one; PostgreSQL delivers the notification when the
transaction commits, so the row is there to read when the sender wakes. The notification
says only that something was written; the sender reads the outbox itself
(inbox.services.callback.Sender). So an answer due at once (the undo window off, an
abort, a requeue) is sent within milliseconds, and an idle sender does not poll.

SQLite (the embedded default) has no NOTIFY: there, and while the listening connection
is down, the sender wakes on its own at least every INBOX_CALLBACKS_MAX_WAIT_MS. With a
listening connection it still wakes every LISTEN_MOST_SECONDS, a backstop against a
notification that never came (a row written while the connection was being replaced is
read at once: after (re)connecting, wait returns at once).
"""

import enum
import logging
import os
import select
import time
from typing import Any

from django.db import connections

logger = logging.getLogger("inbox.clock")

CHANNEL = "inbox_outbox"
# The longest sleep while listening: a backstop only; every write notifies.
LISTEN_MOST_SECONDS = 5.0


class Woken(enum.StrEnum):
    TOLD = "told"  # a notification: an answer was written
    INTERRUPTED = "interrupted"  # interrupt(): the process is stopping
    LISTENING = "listening"  # the listening connection was made, or lost: read once now
    TIMEOUT = "timeout"


class Wakeup:
    """Wait until an answer is written (PostgreSQL's NOTIFY), interrupt() or a timeout.

    One per sender process, used from its loop's thread; interrupt() may be called from a
    signal handler. The listening connection is its own (autocommit, LISTEN only), not
    Django's, so the relay's transactions never hold notifications back.
    """

    def __init__(self, *, alias: str = "default") -> None:
        self._alias = alias
        self._listener: Any = None  # a psycopg.Connection once listening
        self._failed = False  # the last attempt to listen failed (logged once per streak)
        # A pipe interrupt() writes to, so a stop does not wait out the sleep.
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    @property
    def notified(self) -> bool:
        """Whether this database can notify (PostgreSQL) at all."""
        return connections[self._alias].vendor == "postgresql"

    def most(self, polling: float) -> float:
        """The longest sleep the sender should ask for: polling when nothing will notify
        it (SQLite, or the listening connection down), else LISTEN_MOST_SECONDS."""
        if self.notified and self._listener is not None:
            return max(polling, LISTEN_MOST_SECONDS)
        return polling

    def wait(self, seconds: float) -> Woken:
        """Return when told, interrupted or after seconds, and say which."""
        if self._pipe_emptied():
            return Woken.INTERRUPTED  # a stop wins over (re)connecting
        if self.notified and self._listener is None:
            if self._listen():
                return Woken.LISTENING
        readers = [self._wake_r]
        if self._listener is not None:
            readers.append(self._listener.fileno())
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            # What arrived before the wait, or made the socket readable: a notification,
            # or another message of the server (a parameter's change, or the error it
            # sends before it closes the connection, whose end the next read sees), after
            # which the wait goes on.
            if self._listener is not None:
                try:
                    if self._drained():
                        return Woken.TOLD
                except Exception:
                    self._lost()
                    return Woken.LISTENING
            ready, _, _ = select.select(readers, [], [],
                                        max(0.0, deadline - time.monotonic()))
            if self._wake_r in ready and self._pipe_emptied():
                return Woken.INTERRUPTED
            if not ready:
                return Woken.TIMEOUT

    def interrupt(self) -> None:
        """Wake a wait at once (a stop); safe in a signal handler."""
        try:
            os.write(self._wake_w, b"!")
        except BlockingIOError:
            pass  # the pipe is full: a wake-up is pending anyway

    def close(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    def _listen(self) -> bool:
        import psycopg  # only PostgreSQL gets here

        params = connections[self._alias].get_connection_params()
        try:
            listener = psycopg.connect(**params, autocommit=True)
            listener.execute(f"LISTEN {CHANNEL}")
        except Exception:
            if not self._failed:
                logger.exception(
                    "The callbacks' sender cannot listen on %s; it polls every round "
                    "instead until it can", CHANNEL)
            self._failed = True
            return False
        if self._failed:
            logger.info("The callbacks' sender listens on %s again", CHANNEL)
        self._failed = False
        self._listener = listener
        return True

    def _drained(self) -> bool:
        """Consume the notifications that have arrived, without waiting; any? Raise if the
        connection is gone (a server that closes it says so without an error here, and
        its socket would be readable for ever)."""
        told = sum(1 for _ in self._listener.notifies(timeout=0)) > 0
        if self._listener.broken or self._listener.closed:
            raise ConnectionError("the server closed the listening connection")
        return told

    def _lost(self) -> None:
        logger.exception("The callbacks' sender's listening connection failed; "
                         "listening again")
        self._failed = True
        try:
            self._listener.close()
        finally:
            self._listener = None

    def _pipe_emptied(self) -> bool:
        """Read what interrupt() wrote; was there anything?"""
        emptied = False
        try:
            while os.read(self._wake_r, 512):
                emptied = True
        except BlockingIOError:
            pass
        return emptied
