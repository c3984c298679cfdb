"""a2wsgi's WSGI-in-threads for the ASGI entry, without a wait on the event loop per message.

config.asgi serves every request but the live stream through Django's WSGI handler in a
pool of threads, with a2wsgi (docs/DECISIONS.md). a2wsgi hands each ASGI message between
the request's thread and the event loop and blocks the thread until the loop has taken it
(``run_coroutine_threadsafe(...).result()``): a POST waits on the loop four times (its
body, the response's start, its body, the closing empty chunk), a GET three. Each wait is
a thread put to sleep and woken, and the GIL handed over twice (docs/BENCHMARKS.md, "The
ASGI entry's threads without a wait per message", measures what they cost).

ThreadedWSGI keeps a2wsgi's pool, environ and streamed body, and changes two things:

- A small body (a Content-Length of at most BODY_PREREAD_BYTES; the API's JSON) is read
  on the event loop before the request goes to a thread; a request with no body
  (no Content-Length, no Transfer-Encoding) reads none. Other bodies stream from the
  thread as before (a2wsgi's Body). A thread no longer waits for a slow client's body.
- The thread hands each response message to the loop without waiting for it. At most
  a2wsgi's send_queue_size messages are in flight per response (a semaphore the loop
  releases as it sends each): a large streamed response still waits for a slow client,
  and memory stays bounded, as with a2wsgi's bounded queue.

The order of the messages is kept: each goes through loop.call_soon_threadsafe from the
request's thread, and the executor's completion (after which the loop ends the response)
is scheduled the same way after the last of them.
"""

import asyncio
import contextvars
import functools
import threading
from typing import Any

from a2wsgi import WSGIMiddleware
from a2wsgi.wsgi import Body, WSGIResponder, build_environ

# Bodies up to this size are read on the event loop before the view's thread starts: the
# API's JSON and the pages' forms. Larger ones stream from the thread (a2wsgi's Body).
BODY_PREREAD_BYTES = 64 * 1024
# How long a thread waiting for room to send checks again whether the loop's sender ended.
SENDER_CHECK_SECONDS = 1.0


class ReadBody(Body):
    """A request body already read: a2wsgi's Body over bytes, with nothing more to receive."""

    def __init__(self, data: bytes) -> None:
        self.buffer = bytearray(data)
        self._has_more = False


class SenderStopped(OSError):
    """The loop's sender of this response ended (the client's connection failed)."""


class ThreadedResponder(WSGIResponder):
    """One request: its body read, the WSGI application run in a thread of the pool."""

    def __init__(self, app: Any, executor: Any, send_queue_size: int) -> None:
        super().__init__(app, executor, send_queue_size)
        # Unbounded: room is the semaphore's, taken in the thread without the loop.
        self.send_queue = asyncio.Queue()
        # At most send_queue_size messages unsent: a slow client holds the thread, not memory.
        self.room = threading.Semaphore(send_queue_size)
        self.sender_task: asyncio.Task | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        body = await self.body_read(scope, receive)
        if body is None:
            return  # The client left before its body arrived: nobody to answer.
        environ = build_environ(scope, body)
        sender = self.sender_task = self.loop.create_task(self.sender(send))
        try:
            context = contextvars.copy_context()
            try:
                await self.loop.run_in_executor(
                    self.executor, functools.partial(context.run, self.wsgi), environ,
                    self.start_response)
            except SenderStopped:
                await sender  # Raises what stopped it: the client connection's error.
                raise
            # After every message of the thread: its completion was scheduled after them.
            self.send_queue.put_nowait(None)
            await sender
            if self.exc_info is not None:
                raise self.exc_info[0].with_traceback(self.exc_info[1], self.exc_info[2])
        finally:
            if not sender.done():
                sender.cancel()

    async def body_read(self, scope: Any, receive: Any) -> Body | None:
        """Return the request's body: read here if small or absent, else a2wsgi's stream;
        None if the client disconnected while it was read."""
        length, chunked = None, False
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                length = int(value) if value.isdigit() else None
            elif name == b"transfer-encoding":
                chunked = True
        if length is None and not chunked:
            return ReadBody(b"")
        if chunked or length is None or length > BODY_PREREAD_BYTES:
            return Body(self.loop, receive)
        chunks, more = [], True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return None
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        return ReadBody(b"".join(chunks))

    def send(self, message: Any) -> None:
        """Hand message to the loop's sender (called in the request's thread); wait only
        while send_queue_size messages are still unsent."""
        while not self.room.acquire(timeout=SENDER_CHECK_SECONDS):
            if self.sender_task is not None and self.sender_task.done():
                raise SenderStopped("The response's sender stopped; the rest is not sent.")
        self.loop.call_soon_threadsafe(self.send_queue.put_nowait, message)

    async def sender(self, send: Any) -> None:
        while True:
            message = await self.send_queue.get()
            if message is None:
                return
            try:
                await send(message)
            finally:
                self.room.release()


class ThreadedWSGI(WSGIMiddleware):
    """a2wsgi's WSGIMiddleware, its HTTP requests served by ThreadedResponder."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            responder = ThreadedResponder(self.app, self.executor, self.send_queue_size)
            return await responder(scope, receive, send)
        return await super().__call__(scope, receive, send)
