"""Live signals: what changed, told to every open page that shows it, within a second.

Every change of a task is a TaskEvent (inbox.lifecycle writes one per transition, in the
transition's transaction). Each web process has one reader per event loop, ``LiveHub``,
that reads the events past the last it saw a few times a second (one indexed query for
all of the process's connections, whatever their number) and hands each one, as a
``Signal``, to the connections whose user may see the task. A signal says what changed
(task id, version, action, state, skill, process and stage), never the task's data: a
page fetches what it shows through the normal, authorized views.

A worker going away or coming back is told the same way, as a ``PresenceSignal`` (who,
and to what), to the supervisors of the worker's skills: the reader also reads the audit
log's availability changes of the last few seconds (one indexed query), so the board
shows who is away within a second.

The reader works the same on SQLite and PostgreSQL, so the embedded default needs neither
Redis nor LISTEN/NOTIFY. Event ids are given at insert and a transaction may commit after
a later one: the reader reads again everything newer than what it had seen LAG_SECONDS
ago and skips what it sent, so a short transaction that commits out of order is not lost.
"""

import asyncio
import collections
import contextvars
import dataclasses
import datetime
import logging
import time
import weakref
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from accounts.models import AuditAction, AuditEvent, User, WorkerSkill
from inbox.models import TaskEvent
from inbox.selectors import Visibility, visibility_for

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.25
# A transaction that commits later than this after writing its event may be missed (the
# page still shows it on its next load); the lifecycle's transactions last milliseconds.
LAG_SECONDS = 2.0
# Events read per poll at most; a burst larger than this is read over several polls.
READ_LIMIT = 1000
# Events replayed to a page that reconnects (EventSource sends Last-Event-ID).
REPLAY_LIMIT = 500
# Signals waiting for a slow connection; past this it is closed and reconnects.
QUEUE_LIMIT = 1000
# Signals told lately, kept to hand a page that subscribes just after its replay's read
# whatever was told in between (LiveHub.subscribe).
TOLD_LIMIT = 5 * READ_LIMIT


@dataclasses.dataclass(frozen=True)
class Signal:
    """One change of one task, as a page is told of it: identifiers, never data."""

    event: int
    task: str
    version: int
    action: str
    state: str
    skill: str
    process: str
    stage: str
    # For routing only, never sent: whom the task concerns (inbox.selectors.Visibility),
    # now and before this change.
    skill_id: int
    assignee_id: int | None
    min_proficiency: int = 1
    from_state: str = ""
    holder_before: int | None = None

    def as_json(self) -> dict[str, Any]:
        return {"task": self.task, "version": self.version, "action": self.action,
                "state": self.state, "skill": self.skill, "process": self.process,
                "stage": self.stage}


_FIELDS = ("id", "task_id", "version", "action", "to_state", "task__skill__slug",
           "task__process_name", "task__stage", "task__skill_id", "task__assignee_id",
           "task__min_proficiency", "from_state", "data__holder_before")


def signals_after(event_id: int, *, limit: int = READ_LIMIT) -> list[Signal]:
    """Return the signals of the events after event_id, oldest first (at most limit)."""
    rows = (TaskEvent.objects.filter(pk__gt=event_id).order_by("pk")
            .values_list(*_FIELDS)[:limit])
    return [Signal(event=pk, task=str(task), version=version, action=action, state=state,
                   skill=skill, process=process, stage=stage, skill_id=skill_id,
                   assignee_id=assignee_id, min_proficiency=min_proficiency,
                   from_state=from_state, holder_before=holder_before)
            for (pk, task, version, action, state, skill, process, stage, skill_id, assignee_id,
                 min_proficiency, from_state, holder_before) in rows]


@dataclasses.dataclass(frozen=True)
class PresenceSignal:
    """A worker's availability changed, as a page is told of it: who and to what."""

    audit: int
    worker: int
    availability: str
    # For routing only, never sent: the worker's skills (their supervisors are told).
    skill_ids: frozenset[int] = frozenset()

    def as_json(self) -> dict[str, Any]:
        return {"worker": self.worker, "availability": self.availability}


# Availability changes are read again for this long: one that commits late is still told.
PRESENCE_WINDOW = datetime.timedelta(seconds=2 * LAG_SECONDS)


def presence_since(at: datetime.datetime, *, limit: int = READ_LIMIT) -> list[PresenceSignal]:
    """Return the availability changes recorded (accounts.audit) since at, oldest first."""
    rows = list(AuditEvent.objects.filter(action=AuditAction.AVAILABILITY_CHANGED, at__gte=at)
                .order_by("pk").values_list("pk", "subject", "detail")[:limit])
    if not rows:
        return []
    workers = dict(User.objects.filter(email__in={subject for _, subject, _ in rows})
                   .values_list("email", "pk"))
    skills: dict[int, set[int]] = collections.defaultdict(set)
    for worker_id, skill_id in WorkerSkill.objects.filter(
            worker_id__in=workers.values()).values_list("worker_id", "skill_id"):
        skills[worker_id].add(skill_id)
    return [PresenceSignal(audit=pk, worker=workers[subject],
                           availability=str(detail.get("after", "")),
                           skill_ids=frozenset(skills[workers[subject]]))
            for pk, subject, detail in rows if subject in workers]


def latest_event_id() -> int:
    """Return the id of the newest event (0 when there is none)."""
    return TaskEvent.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


def live_url() -> str:
    """Return the stream's URL for a page about to be rendered, from the newest event on.

    Read before the page reads what it shows: a change committed in between is then both
    on the page and told by the stream, never neither.
    """
    return f"{reverse('inbox:live')}?since={latest_event_id()}"


@dataclasses.dataclass(frozen=True)
class Audience:
    """Whose signals a connection gets: what its user may see (inbox.selectors.Visibility).

    A signal is wanted when the user sees the task as the change left it, or saw it as it
    was before (their queued task taken by a peer, their held task taken away), so a page
    hears that what it shows changed and nothing about tasks it may not show.
    """

    visibility: Visibility

    def wants(self, signal: Signal) -> bool:
        after = self.visibility.sees(skill_id=signal.skill_id,
                                     min_proficiency=signal.min_proficiency,
                                     state=signal.state, assignee_id=signal.assignee_id)
        return after or self.visibility.sees(
            skill_id=signal.skill_id, min_proficiency=signal.min_proficiency,
            state=signal.from_state,
            assignee_id=(signal.holder_before if signal.holder_before is not None
                         else signal.assignee_id))

    def wants_presence(self, signal: PresenceSignal) -> bool:
        """Whether the user supervises the worker: an admin, or a supervisor of a skill the
        worker holds (whom the board's presence shows them)."""
        visibility = self.visibility
        if visibility.everything:
            return True
        return bool(visibility.supervisor and visibility.skills
                    and signal.skill_ids & visibility.skills.keys())


def audience_for(*, user: User) -> Audience:
    """Return the audience of a user: what inbox.selectors.visible_tasks lets them see."""
    return Audience(visibility=visibility_for(user=user).loaded())


class Recent:
    """The last few thousand event ids handled, to skip one read again."""

    def __init__(self, size: int) -> None:
        self.order: collections.deque[int] = collections.deque()
        self.ids: set[int] = set()
        self.size = size

    def add(self, event_id: int) -> bool:
        """Remember event_id; return False if it was known already."""
        if event_id in self.ids:
            return False
        self.ids.add(event_id)
        self.order.append(event_id)
        if len(self.order) > self.size:
            self.ids.discard(self.order.popleft())
        return True


class Subscription:
    """One open page: its audience and the signals waiting for it."""

    def __init__(self, audience: Audience) -> None:
        self.audience = audience
        self.queue: asyncio.Queue[Signal | PresenceSignal | None] = asyncio.Queue(
            maxsize=QUEUE_LIMIT)
        # A signal both replayed (after a reconnect) and read live is sent once.
        self.sent = Recent(REPLAY_LIMIT + QUEUE_LIMIT)

    def offer(self, signal: Signal | PresenceSignal) -> None:
        if isinstance(signal, PresenceSignal):
            if not self.audience.wants_presence(signal):
                return
        elif not self.audience.wants(signal) or not self.sent.add(signal.event):
            return
        try:
            self.queue.put_nowait(signal)
        except asyncio.QueueFull:
            # A page that does not read: end its stream; its browser reconnects and the
            # page reloads what it shows.
            self.queue.get_nowait()
            self.queue.put_nowait(None)


def connection_close() -> None:
    """Close this thread's database connection (a broken one is opened afresh next time).

    Called through sync_to_async, in the thread whose connection it is.
    """
    connection.close()


class LiveHub:
    """The one reader of new events in an event loop, and the pages it tells."""

    def __init__(self) -> None:
        self.subscriptions: set[Subscription] = set()
        self.reader: asyncio.Task | None = None
        self.seen: collections.deque[tuple[float, int]] = collections.deque()
        self.last_id = -1
        # Read again within LAG_SECONDS, told once.
        self.told = Recent(20 * READ_LIMIT)
        self.told_presence = Recent(READ_LIMIT)
        # The signals told lately, with when (time.monotonic()), oldest first; and when the
        # newest one dropped from it was told.
        self.recent: collections.deque[tuple[float, Signal]] = collections.deque()
        self.dropped_at = -1.0
        # Where a reader that starts afresh reads from at the latest: the newest event the
        # replays of the pages that subscribed meanwhile had read.
        self.start_at: int | None = None

    def subscribe(self, subscription: Subscription, *, read_at: float | None = None,
                  replayed_to: int | None = None) -> bool:
        """Tell subscription every signal from now on; return whether none was missed.

        A page whose replay was read at read_at (time.monotonic(), before the read) is
        handed at once what was told since, so a change committed between its read and now
        reaches it. False means some of that is no longer kept (more than TOLD_LIMIT told
        since): the page reads its replay again, after subscribing. replayed_to is the
        newest event its read saw: a reader that starts afresh reads past it, not past the
        newest event of its own first read, or a change committed in between is lost.
        """
        self.subscriptions.add(subscription)
        if replayed_to is not None and self.last_id < 0:
            self.start_at = (replayed_to if self.start_at is None
                             else min(self.start_at, replayed_to))
        complete = True
        if read_at is not None:
            complete = self.dropped_at < read_at
            since: list[Signal] = []
            for told_at, signal in reversed(self.recent):  # newest first, only as far back
                if told_at < read_at:
                    break
                since.append(signal)
            for signal in reversed(since):
                subscription.offer(signal)
        if self.reader is None or self.reader.done():
            self._start_reader()
        return complete

    def unsubscribe(self, subscription: Subscription) -> None:
        self.subscriptions.discard(subscription)

    def _start_reader(self) -> None:
        # In a context of its own, not the first page's request: its database calls then
        # run in asgiref's one shared thread, on one connection kept for the process,
        # instead of a request's thread that ends with the request.
        self.reader = asyncio.get_running_loop().create_task(
            self._read(), context=contextvars.Context())

    def _tell(self, signal: Signal) -> None:
        now = time.monotonic()
        self.recent.append((now, signal))
        if len(self.recent) > TOLD_LIMIT:
            self.dropped_at = self.recent.popleft()[0]
        for subscription in list(self.subscriptions):
            subscription.offer(signal)

    async def _read(self) -> None:
        """Read new events and fan them out while anyone listens; a failure is retried."""
        try:
            while self.subscriptions:
                try:
                    await self._poll()
                except Exception:
                    logger.exception("Reading live signals failed; trying again")
                    await sync_to_async(connection_close)()
                    await asyncio.sleep(1)
                await asyncio.sleep(POLL_SECONDS)
            # Nobody listens: the next reader starts from the newest event then (each page
            # replays what it missed from its own ?since=), not from where this one stopped.
            self.last_id = -1
            self.seen.clear()
            self.start_at = None
        finally:
            # The shared thread's connection goes back (to the pool, or closed) when nobody
            # listens any more or the server stops (the reader cancelled): a web with no
            # live page open holds none for the hub.
            await sync_to_async(connection_close)()
        if self.subscriptions:
            # A page subscribed while the connection went back, and found this reader not
            # yet done: it would wait for a signal that no reader reads.
            self._start_reader()

    async def _poll(self) -> None:
        if self.last_id < 0:
            latest = await sync_to_async(latest_event_id)()
            if self.start_at is not None:
                # From the oldest of their replays, never past the newest event: a
                # Last-Event-ID from the future must not make every page miss what precedes it.
                latest = min(latest, self.start_at)
                self.start_at = None
            self.last_id = latest
            self.seen.append((time.monotonic(), self.last_id))
            return
        floor = self._floor()
        signals = await sync_to_async(signals_after)(floor)
        for signal in signals:
            if self.told.add(signal.event):
                self._tell(signal)
        if signals:
            self.last_id = max(self.last_id, signals[-1].event)
        self.seen.append((time.monotonic(), self.last_id))
        changes = await sync_to_async(presence_since)(timezone.now() - PRESENCE_WINDOW)
        for change in changes:
            if self.told_presence.add(change.audit):
                for subscription in list(self.subscriptions):
                    subscription.offer(change)

    def _floor(self) -> int:
        """Return the newest event id seen at least LAG_SECONDS ago: read again past it."""
        now = time.monotonic()
        floor = self.seen[0][1]
        while len(self.seen) > 1 and now - self.seen[1][0] >= LAG_SECONDS:
            self.seen.popleft()
            floor = self.seen[0][1]
        return floor


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LiveHub]" = (
    weakref.WeakKeyDictionary())


def hub() -> LiveHub:
    """Return the running event loop's hub (one per web process under uvicorn)."""
    loop = asyncio.get_running_loop()
    if loop not in _hubs:
        _hubs[loop] = LiveHub()
    return _hubs[loop]
