"""bench/live.py's client keeps its stream as a browser's EventSource does: a 503 waited
out, a stream that ends after its 200 opened again from the last event it read."""

import asyncio
import concurrent.futures
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import live


def _event(event_id: int, task: str, version: int) -> bytes:
    return (f'id: {event_id}\nevent: task\ndata: {{"task": "{task}", "version": {version}, '
            f'"state": "queued"}}\n\n').encode()


def test_a_stream_that_ends_is_opened_again_from_the_last_event_read(monkeypatch):
    monkeypatch.setattr(live, "RETRY_FIRST_S", 0.01)
    requests: list[bytes] = []
    answers = [
        b"HTTP/1.1 503 Service Unavailable\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\nretry: 10\n: connected\n\n" + _event(7, "a", 2),
        b"HTTP/1.1 200 OK\r\n\r\nretry: 10\n: connected\n\n" + _event(9, "b", 3),
    ]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(answers[len(requests) - 1] if len(requests) <= len(answers) else b"")
        await writer.drain()
        if len(requests) < len(answers):
            writer.close()  # The 503, and the first stream ending after its event.
        else:
            await asyncio.sleep(5)  # The last stream stays open.

    async def scenario() -> tuple[dict, list, list]:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        seen: dict = {}
        refused: list = []
        reopened: list = []
        connected = asyncio.Semaphore(0)
        client = asyncio.create_task(
            live._client(port, "s", 4, seen, connected, refused, reopened))
        await asyncio.wait_for(connected.acquire(), 5)
        for _ in range(200):
            if ("b", 3) in seen:
                break
            await asyncio.sleep(0.01)
        client.cancel()
        await asyncio.gather(client, return_exceptions=True)
        server.close()
        return seen, refused, reopened

    # A loop of its own in a thread of its own: an earlier test of the suite may leave
    # this thread's loop running, where asyncio.run() refuses to start.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        seen, refused, reopened = pool.submit(asyncio.run, scenario()).result(timeout=30)
    assert set(seen) == {("a", 2), ("b", 3)}
    assert len(refused) == 1 and reopened == [7]
    assert b"?since=4 " in requests[1] and b"Last-Event-ID" not in requests[1]
    assert b"Last-Event-ID: 7\r\n" in requests[2]
