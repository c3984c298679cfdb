"""Live signals: what changed reaches every open page that may see it, and nothing else."""

import asyncio
import json
import threading
import time

import pytest
from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.test import AsyncClient

from accounts.roles import Role
from inbox import live, views_live
from inbox.live import Audience, LiveHub, Signal, Subscription, signals_after
from inbox.selectors import Visibility
from inbox.services.worker import task_claim, task_release

# Supervises skill 1: hears of every task of it.
SKILL_1_SUPERVISOR = Visibility(user_id=1, supervisor=True, skills={1: (3, "own")})
SIGNAL_KEYS = {"task", "version", "action", "state", "skill", "process", "stage"}


def _run(scenario):
    """Run an async scenario to its end in a thread with its own event loop.

    Not async_to_sync: the browser tests' Playwright keeps an event loop running in the
    test thread for the session, and async_to_sync refuses to run beside it.
    """
    outcome: dict = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(scenario())
        except BaseException as exc:  # handed to the test's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(60)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _signal(event: int, *, skill_id: int = 1, assignee_id: int | None = None) -> Signal:
    return Signal(event=event, task=f"task-{event}", version=2, action="claim",
                  state="in_progress", skill="invoice-review", process="p", stage="s",
                  skill_id=skill_id, assignee_id=assignee_id)


def test_a_signal_names_what_changed_and_carries_no_data(make_task, worker):
    task = make_task(input={"secret": "the-input"}, title="Pay INV-9")
    since = live.latest_event_id()
    task_claim(worker=worker, task_id=task.pk)

    [signal] = signals_after(since)

    assert signal.as_json() == {"task": str(task.pk), "version": 2, "action": "claim",
                                "state": "in_progress", "skill": "invoice-review",
                                "process": "invoice-approval", "stage": "review"}
    assert "the-input" not in json.dumps(signal.as_json())
    assert "INV-9" not in json.dumps(signal.as_json())


def test_each_user_hears_of_the_tasks_they_may_see(make_task, make_worker, make_user, worker,
                                                  approval_skill):
    task = make_task()
    since = live.latest_event_id()
    task_claim(worker=worker, task_id=task.pk)
    [signal] = signals_after(since)

    other_skill = make_worker({"finance-approval": 3})
    admin = make_user(roles=(Role.ADMIN,))
    nobody = make_user(roles=())
    assert live.audience_for(user=worker).wants(signal)
    assert live.audience_for(user=admin).wants(signal)
    assert not live.audience_for(user=other_skill).wants(signal)
    assert not live.audience_for(user=nobody).wants(signal)


def test_the_holder_hears_of_their_task_without_its_skill():
    audience = Audience(Visibility(user_id=7, worker=True, skills={}))
    assert audience.wants(_signal(1, skill_id=3, assignee_id=7))
    assert not audience.wants(_signal(2, skill_id=3, assignee_id=8))


def test_an_event_committed_out_of_order_is_told_once_and_not_lost(monkeypatch):
    """Event 4 commits after event 5 was read: reading again past an older floor finds it."""
    reads = iter([[_signal(5)], [_signal(4), _signal(5)], []])
    monkeypatch.setattr(live, "signals_after", lambda floor, **kwargs: next(reads))
    monkeypatch.setattr(live, "latest_event_id", lambda: 3)
    monkeypatch.setattr(live, "presence_since", lambda at, **kwargs: [])
    monkeypatch.setattr(live, "LAG_SECONDS", 3600)  # every read goes back to the start

    async def scenario() -> list[int]:
        hub = LiveHub()
        page = Subscription(Audience(SKILL_1_SUPERVISOR))
        hub.subscriptions.add(page)
        for _ in range(4):
            await hub._poll()
        told = []
        while not page.queue.empty():
            told.append(page.queue.get_nowait().event)
        return told

    assert _run(scenario) == [5, 4]


def test_a_page_that_does_not_read_is_ended_not_held(monkeypatch):
    monkeypatch.setattr(live, "QUEUE_LIMIT", 2)

    async def scenario() -> list:
        page = Subscription(Audience(SKILL_1_SUPERVISOR))
        for event in range(1, 5):
            page.offer(_signal(event))
        return [page.queue.get_nowait() for _ in range(page.queue.qsize())]

    told = _run(scenario)
    assert told[-1] is None  # the end of its stream: the browser reconnects


async def _open_stream(user, query: str, **headers: str):
    """Open /live/ as the signed-in user; return the response (its stream not read yet)."""
    client = AsyncClient()
    await client.aforce_login(user)
    return await client.get(f"/live/?{query}", headers=headers)


async def _read_until(stream, wanted: str, *, seconds: float = 5.0) -> list[str]:
    """Read the stream's chunks until one contains wanted; return every chunk read."""
    chunks: list[str] = []

    async def read() -> None:
        async for chunk in stream:
            chunks.append(chunk.decode() if isinstance(chunk, bytes) else chunk)
            if wanted in chunks[-1]:
                return

    await asyncio.wait_for(read(), seconds)
    return chunks


@pytest.mark.django_db(transaction=True)
def test_a_change_reaches_an_open_stream_of_a_page_rendered_before_it(make_task, worker):
    task = make_task()
    since = live.latest_event_id()

    async def scenario() -> list[str]:
        response = await _open_stream(worker, f"since={since}")
        assert response["Content-Type"] == "text/event-stream"
        stream = response.streaming_content
        await _read_until(stream, ": connected")
        await sync_to_async(task_claim)(worker=worker, task_id=task.pk)
        return await _read_until(stream, "event: task")

    chunks = _run(scenario)
    event = chunks[-1]
    assert event.startswith("id: ")
    payload = json.loads(event.split("data: ", 1)[1])
    assert (payload["task"], payload["version"], payload["action"]) == (str(task.pk), 2,
                                                                        "claim")


@pytest.mark.django_db(transaction=True)
def test_a_reconnecting_page_hears_what_it_missed(make_task, worker):
    task = make_task()
    since = live.latest_event_id()
    task_claim(worker=worker, task_id=task.pk)
    task_release(worker=worker, task_id=task.pk)
    missed = [signal.event for signal in signals_after(since)]

    async def scenario() -> list[str]:
        response = await _open_stream(worker, "since=0", **{"Last-Event-ID": str(since)})
        return await _read_until(response.streaming_content, f"id: {missed[-1]}")

    chunks = _run(scenario)
    told = [int(c.split("\n", 1)[0][4:]) for c in chunks if c.startswith("id: ")]
    assert told == missed


@pytest.mark.django_db(transaction=True)
def test_a_stream_tells_nothing_of_tasks_its_user_may_not_see(make_task, make_worker, worker,
                                                             approval_skill, monkeypatch):
    monkeypatch.setattr(views_live, "KEEPALIVE_SECONDS", 0.5)
    outsider = make_worker({"finance-approval": 3})
    task = make_task()
    since = live.latest_event_id()

    async def scenario() -> list[str]:
        response = await _open_stream(outsider, f"since={since}")
        stream = response.streaming_content
        await _read_until(stream, ": connected")
        await sync_to_async(task_claim)(worker=worker, task_id=task.pk)
        return await _read_until(stream, ": keep-alive", seconds=3)

    chunks = _run(scenario)
    assert not [chunk for chunk in chunks if "event: task" in chunk]


def test_signed_out_visitors_get_no_stream(client):
    response = client.get("/live/")
    assert response.status_code in (302, 401)
    assert response.get("Content-Type", "") != "text/event-stream"


def test_a_reader_that_stopped_for_want_of_pages_starts_afresh(monkeypatch):
    """Events of the quiet hour are not poured on the next page: it replays its own."""
    monkeypatch.setattr(live, "latest_event_id", lambda: 9)
    monkeypatch.setattr(live, "signals_after", lambda floor, **kwargs: [])
    monkeypatch.setattr(live, "presence_since", lambda at, **kwargs: [])
    monkeypatch.setattr(live, "POLL_SECONDS", 0)

    async def scenario() -> int:
        hub = LiveHub()
        hub.last_id = 3  # where an earlier reader stopped
        hub.seen.append((0.0, 3))
        page = Subscription(Audience(SKILL_1_SUPERVISOR))
        hub.subscribe(page)
        await asyncio.sleep(0.05)
        hub.unsubscribe(page)
        await asyncio.wait_for(hub.reader, 2)
        return hub.last_id

    assert _run(scenario) == -1


@pytest.mark.parametrize("ending", ["the last page left", "the server stopped"])
def test_the_reader_gives_its_connection_back_when_it_stops(monkeypatch, ending):
    """No page listening, or the server stopping (the reader cancelled): the shared
    thread's connection goes back, in that thread. Left open, an idle web held one for
    nothing, and a test server's outlived the run (its database could not be dropped)."""
    import threading

    closed = []
    monkeypatch.setattr(live, "latest_event_id", lambda: 9)
    monkeypatch.setattr(live, "signals_after", lambda floor, **kwargs: [])
    monkeypatch.setattr(live, "presence_since", lambda at, **kwargs: [])
    monkeypatch.setattr(live, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(live, "connection_close",
                        lambda: closed.append(threading.current_thread().name))

    async def scenario() -> None:
        hub = LiveHub()
        page = Subscription(Audience(SKILL_1_SUPERVISOR))
        hub.subscribe(page)
        await asyncio.sleep(0.05)
        assert closed == []  # Listening: the connection is kept.
        if ending == "the last page left":
            hub.unsubscribe(page)
            await asyncio.wait_for(hub.reader, 2)
        else:
            hub.reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await hub.reader

    _run(scenario)
    assert len(closed) == 1
    assert closed[0] != threading.current_thread().name  # the reader's thread, not ours


def test_an_availability_change_is_told_once_to_the_supervisors_of_the_worker(monkeypatch):
    """Read again while it is recent, a presence change reaches a page once; a page of
    another skill's supervisor hears nothing of it."""
    change = live.PresenceSignal(audit=7, worker=42, availability="away",
                                 skill_ids=frozenset({1}))
    monkeypatch.setattr(live, "signals_after", lambda floor, **kwargs: [])
    monkeypatch.setattr(live, "latest_event_id", lambda: 3)
    monkeypatch.setattr(live, "presence_since", lambda at, **kwargs: [change])

    async def scenario() -> tuple[list, list]:
        hub = LiveHub()
        mine = Subscription(Audience(SKILL_1_SUPERVISOR))
        other = Subscription(Audience(
            Visibility(user_id=2, supervisor=True, skills={9: (3, "own")})))
        hub.subscriptions.update({mine, other})
        for _ in range(3):
            await hub._poll()
        return ([mine.queue.get_nowait() for _ in range(mine.queue.qsize())],
                [other.queue.get_nowait() for _ in range(other.queue.qsize())])

    assert _run(scenario) == ([change], [])


def _connection_open() -> bool:
    from django.db import connection

    return connection.connection is not None


@pytest.mark.postgres  # SQLite's in-memory test database never closes its connection
@pytest.mark.django_db(transaction=True)
def test_an_open_stream_holds_no_database_connection_even_when_its_session_was_saved(worker):
    from accounts.sessions import SEEN_AT

    async def scenario() -> bool:
        client = AsyncClient()
        await client.aforce_login(worker)
        # A session the request changes (here: one without its activity time yet) is saved
        # by the middleware after the view ran: that takes a connection again.
        session = await client.asession()
        await session.apop(SEEN_AT)
        await session.asave()
        # As Django's ASGI handler serves a request: its sync parts in a thread of its own.
        async with ThreadSensitiveContext():
            response = await client.get("/live/")
            await _read_until(response.streaming_content, ": connected")
            return await sync_to_async(_connection_open)()

    assert _run(scenario) is False


def test_a_page_is_handed_what_was_told_between_its_replay_and_its_subscription():
    """A change told after the page's replay was read, before its stream subscribed,
    reaches it; one told before the read (the replay has it) is not handed again."""

    async def scenario() -> tuple[list[int], bool]:
        hub = LiveHub()
        hub.last_id = 3  # a reader already running for other pages
        hub.reader = asyncio.get_running_loop().create_future()  # not done: no new reader
        hub._tell(_signal(4))
        read_at = time.monotonic()
        hub._tell(_signal(5))
        hub._tell(_signal(6))
        page = Subscription(Audience(SKILL_1_SUPERVISOR))
        complete = hub.subscribe(page, read_at=read_at, replayed_to=4)
        hub.reader.cancel()
        return [page.queue.get_nowait().event for _ in range(page.queue.qsize())], complete

    assert _run(scenario) == ([5, 6], True)  # oldest first


def test_a_page_whose_handover_is_no_longer_kept_is_told_to_read_again(monkeypatch):
    monkeypatch.setattr(live, "TOLD_LIMIT", 2)

    async def scenario() -> tuple[bool, bool]:
        hub = LiveHub()
        hub.last_id = 3
        hub.reader = asyncio.get_running_loop().create_future()
        before = time.monotonic()
        hub._tell(_signal(4))
        middle = time.monotonic()
        for event in (5, 6):
            hub._tell(_signal(event))  # 4 dropped: told after `before`, not after `middle`
        early = hub.subscribe(Subscription(Audience(SKILL_1_SUPERVISOR)), read_at=before)
        late = hub.subscribe(Subscription(Audience(SKILL_1_SUPERVISOR)), read_at=middle)
        hub.reader.cancel()
        return early, late

    assert _run(scenario) == (False, True)


@pytest.mark.parametrize(("replayed_to", "starts_at"), [(5, 5), (20, 9), (None, 9)])
def test_a_reader_that_starts_afresh_reads_past_what_its_pages_replayed(
        monkeypatch, replayed_to, starts_at):
    """Its first read finds event 9 the newest: a page whose replay read up to 5 would miss
    6 to 9 if the reader went on from 9. A Last-Event-ID past the newest event moves it
    nowhere (every other page would miss what comes before it)."""
    monkeypatch.setattr(live, "latest_event_id", lambda: 9)

    async def scenario() -> int:
        hub = LiveHub()
        hub.reader = asyncio.get_running_loop().create_future()
        hub.subscribe(Subscription(Audience(SKILL_1_SUPERVISOR)), read_at=time.monotonic(),
                      replayed_to=replayed_to)
        hub.reader.cancel()
        await hub._poll()
        return hub.last_id

    assert _run(scenario) == starts_at


def test_a_page_that_subscribes_while_the_last_reader_stops_gets_a_reader(monkeypatch):
    """The reader found no page and was giving its connection back when one subscribed:
    it was not done, so no new one started, and the page waited for signals nobody read."""
    monkeypatch.setattr(live, "latest_event_id", lambda: 9)
    monkeypatch.setattr(live, "signals_after",  # 10 commits after the page's read
                        lambda floor, **kwargs: [_signal(10)] if release.is_set() else [])
    monkeypatch.setattr(live, "presence_since", lambda at, **kwargs: [])
    monkeypatch.setattr(live, "POLL_SECONDS", 0.01)
    closing = threading.Event()
    release = threading.Event()

    def slow_close() -> None:
        closing.set()
        release.wait(5)

    monkeypatch.setattr(live, "connection_close", slow_close)

    async def scenario() -> int:
        hub = LiveHub()
        first = Subscription(Audience(SKILL_1_SUPERVISOR))
        hub.subscribe(first)
        await asyncio.sleep(0.05)
        hub.unsubscribe(first)
        await asyncio.get_running_loop().run_in_executor(None, closing.wait, 5)
        page = Subscription(Audience(SKILL_1_SUPERVISOR))
        hub.subscribe(page, read_at=time.monotonic(), replayed_to=9)
        release.set()
        signal = await asyncio.wait_for(page.queue.get(), 5)
        hub.unsubscribe(page)
        return signal.event

    assert _run(scenario) == 10


@pytest.mark.django_db(transaction=True)
def test_a_stream_reads_its_replay_in_the_request_not_after_its_200(make_task, worker,
                                                                    monkeypatch):
    """The replay is read on the connection the sign-in used: once the response has begun,
    the stream takes none from the pool (a thousand reconnecting at once waited past its
    timeout there, and broke their streams)."""
    task = make_task()
    since = live.latest_event_id()
    task_claim(worker=worker, task_id=task.pk)
    [missed] = [signal.event for signal in signals_after(since)]

    def no_replay_read(floor, *, limit=live.READ_LIMIT):
        # The hub's own reads go on (nothing new); a replay's read here is the failure.
        assert limit != live.REPLAY_LIMIT, "the stream read its replay after its 200"
        return []

    async def scenario() -> list[str]:
        response = await _open_stream(worker, f"since={since}")
        monkeypatch.setattr(live, "signals_after", no_replay_read)
        monkeypatch.setattr(live, "latest_event_id", lambda: missed)
        return await _read_until(response.streaming_content, f"id: {missed}")

    chunks = _run(scenario)
    assert [c for c in chunks if c.startswith(f"id: {missed}\n")]


@pytest.mark.django_db(transaction=True)
def test_a_change_told_while_a_stream_was_starting_reaches_it(make_task, worker):
    """Stream B's replay is read in its request; the change commits and is told (stream A
    hears it) before B's stream starts: the hub hands it to B as B subscribes."""
    task = make_task()
    since = live.latest_event_id()

    async def scenario() -> list[str]:
        a = await _open_stream(worker, f"since={since}")
        await _read_until(a.streaming_content, ": connected")
        b = await _open_stream(worker, f"since={since}")  # replay read: nothing yet
        await sync_to_async(task_claim)(worker=worker, task_id=task.pk)
        await _read_until(a.streaming_content, "event: task")
        return await _read_until(b.streaming_content, "event: task")

    chunks = _run(scenario)
    payload = json.loads(chunks[-1].split("data: ", 1)[1])
    assert (payload["task"], payload["action"]) == (str(task.pk), "claim")
