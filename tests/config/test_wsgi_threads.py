"""config.wsgi_threads: the WSGI requests of the ASGI entry, each read, answered in order and
bounded in what it holds, without a wait on the event loop per message."""

import asyncio
import functools
import threading
import time

import pytest

from config import wsgi_threads
from config.wsgi_threads import BODY_PREREAD_BYTES, SenderStopped, ThreadedWSGI


def _scope(method: str = "GET", headers: list[tuple[bytes, bytes]] | None = None) -> dict:
    return {"type": "http", "method": method, "path": "/", "root_path": "", "query_string": b"",
            "http_version": "1.1", "scheme": "http", "server": ("127.0.0.1", 80),
            "client": ("127.0.0.1", 5000), "headers": headers or []}


def _serve(app, scope: dict, messages: list[dict], *, send=None,
           arrivals: list[float] | None = None) -> tuple[list[dict], int]:
    """Run one ASGI request through app with the request messages given (a slow client's:
    each after the one before by 20 ms); return what it sent and how many request messages
    it took, noting in arrivals when each was given. In a thread of its own: the browser
    tests' Playwright keeps an event loop running in this one."""
    sent: list[dict] = []
    taken = 0

    async def receive() -> dict:
        nonlocal taken
        taken += 1
        if taken > len(messages):
            await asyncio.sleep(3600)  # as a server does: nothing more comes
        if taken > 1:
            await asyncio.sleep(0.02)
        if arrivals is not None:
            arrivals.append(time.monotonic())
        return messages[taken - 1]

    async def record(message: dict) -> None:
        sent.append(message)

    async def run() -> None:
        await app(scope, receive, send or record)

    failed: list[BaseException] = []

    def serve() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # raised again in the test's thread
            failed.append(exc)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    thread.join(timeout=30)
    if thread.is_alive():
        pytest.fail("The request did not end within 30 s: a thread waits for good.")
    if failed:
        raise failed[0]
    return sent, taken


def _echo(environ, start_response, began: list[float] | None = None):
    """A WSGI application answering the request's body, read as Django reads it; began
    notes when it started."""
    if began is not None:
        began.append(time.monotonic())
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Type", "application/octet-stream")])
    return [body]


def _body(sent: list[dict]) -> bytes:
    return b"".join(message.get("body", b"") for message in sent[1:])


def test_a_small_body_is_read_whole_before_the_view_runs():
    # A slow client's JSON: no thread of the pool waits for it.
    data = b'{"skill": "invoices"}'
    began, arrivals = [], []
    sent, taken = _serve(
        ThreadedWSGI(functools.partial(_echo, began=began)),
        _scope("POST", [(b"content-length", str(len(data)).encode())]),
        [{"type": "http.request", "body": data[:5], "more_body": True},
         {"type": "http.request", "body": data[5:], "more_body": False}], arrivals=arrivals)
    assert taken == 2
    assert began[0] >= arrivals[-1]
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    assert _body(sent) == data


def test_a_large_body_streams_from_the_view_s_thread():
    chunk = b"x" * 16384
    count = BODY_PREREAD_BYTES // len(chunk) + 2
    messages = [{"type": "http.request", "body": chunk, "more_body": i < count - 1}
                for i in range(count)]
    began, arrivals = [], []
    sent, taken = _serve(
        ThreadedWSGI(functools.partial(_echo, began=began)),
        _scope("POST", [(b"content-length", str(len(chunk) * count).encode())]), messages,
        arrivals=arrivals)
    assert taken == count
    assert began[0] < arrivals[0]  # the view ran first and read the body as it came
    assert _body(sent) == chunk * count


def test_a_chunked_body_of_no_length_is_read_to_its_end():
    sent, _ = _serve(
        ThreadedWSGI(_echo), _scope("POST", [(b"transfer-encoding", b"chunked")]),
        [{"type": "http.request", "body": b"ab", "more_body": True},
         {"type": "http.request", "body": b"cd", "more_body": False}])
    assert _body(sent) == b"abcd"


def test_a_request_without_a_body_receives_nothing():
    sent, taken = _serve(ThreadedWSGI(_echo), _scope("GET"), [])
    assert taken == 0
    assert sent[0]["status"] == 200 and _body(sent) == b""


def test_a_client_gone_before_its_body_came_gets_no_answer_and_runs_no_view():
    ran = []

    def app(environ, start_response):
        ran.append(True)
        return _echo(environ, start_response)

    sent, _ = _serve(ThreadedWSGI(app), _scope("POST", [(b"content-length", b"10")]),
                     [{"type": "http.disconnect"}])
    assert sent == [] and ran == []


def test_a_long_response_arrives_whole_in_order_with_at_most_the_queue_s_size_unsent():
    size, chunks = 4, 60
    delivered = 0
    unsent_seen = []

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        for index in range(chunks):
            # Every chunk before this one was handed over: those the client has not got
            # yet are in flight.
            unsent_seen.append(1 + index - delivered)  # the start and chunks 0..index-1
            yield f"{index:03d}".encode()

    async def slow_client(message: dict) -> None:
        nonlocal delivered
        await asyncio.sleep(0.001)
        sent.append(message)
        delivered += 1

    sent: list[dict] = []
    _serve(ThreadedWSGI(app, send_queue_size=size), _scope("GET"), [], send=slow_client)
    assert [message["type"] for message in sent] == (
        ["http.response.start"] + ["http.response.body"] * (chunks + 1))
    assert _body(sent) == b"".join(f"{index:03d}".encode() for index in range(chunks))
    assert sent[-1] == {"type": "http.response.body", "body": b""}
    assert max(unsent_seen) <= size
    assert max(unsent_seen) == size  # the client was slow: the thread did wait for room


def test_a_failed_sender_stops_the_view_s_thread_instead_of_leaving_it_waiting(monkeypatch):
    monkeypatch.setattr(wsgi_threads, "SENDER_CHECK_SECONDS", 0.05)
    closed = threading.Event()

    class Chunks:
        def __iter__(self):
            for _ in range(100):
                yield b"chunk"

        def close(self):
            closed.set()

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain")])
        return Chunks()

    async def broken_client(message: dict) -> None:
        if message["type"] == "http.response.body":
            raise OSError("connection reset")

    began = time.monotonic()
    with pytest.raises(OSError, match="connection reset") as failure:
        _serve(ThreadedWSGI(app, send_queue_size=2), _scope("GET"), [], send=broken_client)
    assert isinstance(failure.value.__context__, SenderStopped)  # the thread stopped
    assert closed.is_set()  # the response's iterable was closed (Django's request ends)
    assert time.monotonic() - began < 10


def test_the_view_s_exception_reaches_the_server():
    def app(environ, start_response):
        raise RuntimeError("the view failed")

    with pytest.raises(RuntimeError, match="the view failed"):
        _serve(ThreadedWSGI(app), _scope("GET"), [])

