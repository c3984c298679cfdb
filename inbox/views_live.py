"""The live stream: Server-Sent Events telling an open page what changed (inbox.live).

Served by ASGI (uvicorn), where one process holds many open streams; each stream is an
async generator waiting on its subscription. Every signal names a task and its version;
the page fetches what it shows through the authorized views.
"""

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.http import require_safe

from config.query import row_id
from inbox import live

# A comment line this often keeps proxies from closing an idle stream.
KEEPALIVE_SECONDS = 15
# How long a browser waits before it reconnects a stream that ended.
RETRY_MS = 2000


@require_safe
def live_stream(request: HttpRequest) -> HttpResponse:
    """Stream the signals of the tasks the signed-in user may see, as text/event-stream.

    A sync view on purpose: under ASGI, Django runs the middleware and a sync view in one
    go on the request's thread, so the sign-in's reads, the audience's and giving the
    connection back happen without a turn of the event loop between them. An async view
    took the pool's connection in the middleware and gave it back two awaits later, and
    with a thousand pages reconnecting at once each held it across the loop's turns for
    everyone else: on a slow machine they waited past the pool's timeout (500s, and an
    EventSource does not reconnect after one). The stream itself is an async generator,
    served in the event loop.
    """
    if not isinstance(request, ASGIRequest):
        # A WSGI server would hold a thread per open stream and never end it: say there is
        # no stream here (204 stops EventSource reconnecting); pages work without it.
        return HttpResponse(status=204)
    after = _last_event_id(request)
    try:
        if not request.user.is_authenticated:
            return HttpResponse("Sign in to follow changes.", status=401,
                                content_type="text/plain")
        audience = live.audience_for(user=request.user)
        # What happened since the page was rendered (or while the browser was away before
        # it reconnected), read here on the connection the sign-in used: read in the
        # stream, after its 200, it took a second one from the pool, and with a thousand
        # pages reconnecting at once it waited past the pool's timeout and broke the stream.
        replay = Replay.read(after) if after is not None else None
    finally:
        # The stream reads nothing more in this request's thread (the hub reads for it):
        # give the connection back now, not when the stream ends, or every open page
        # holds one.
        live.connection_close()
    response = StreamingHttpResponse(_events(audience, replay), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each event on at once
    return response


def _last_event_id(request: HttpRequest) -> int | None:
    """Return the event the page is up to date with: the last one a reconnecting browser
    had (its Last-Event-ID header), else the one the page was rendered at (?since=)."""
    for value in (request.headers.get("Last-Event-ID"), request.GET.get("since")):
        event_id = row_id(value, minimum=0)  # "²" or 30 digits: no event id; the next
        if event_id is not None:
            return event_id
    return None


@dataclasses.dataclass(frozen=True)
class Replay:
    """The signals after the event a page had, as read when its stream was asked for."""

    after: int
    read_at: float  # time.monotonic() before the read: the hub hands over what it told since
    signals: list[live.Signal]

    @classmethod
    def read(cls, after: int) -> "Replay":
        read_at = time.monotonic()
        return cls(after=after, read_at=read_at,
                   signals=live.signals_after(after, limit=live.REPLAY_LIMIT))

    @property
    def newest(self) -> int | None:
        """The newest event the read saw (all of them up to it), None if it was cut short."""
        if len(self.signals) >= live.REPLAY_LIMIT:
            return None
        return self.signals[-1].event if self.signals else self.after


def _read_again(after: int) -> list[live.Signal]:
    """Return the signals after the event the page had, and give the connection back."""
    try:
        return live.signals_after(after, limit=live.REPLAY_LIMIT)
    finally:
        live.connection_close()


async def _events(audience: live.Audience, replay: Replay | None) -> AsyncIterator[str]:
    subscription = live.Subscription(audience)
    complete = True
    hub = live.hub()
    if replay is None:
        hub.subscribe(subscription)
    else:
        # What the page missed first, oldest first, then what the hub told since the read
        # (subscribe hands it over), then what it tells from now on: no await in between.
        for signal in replay.signals:
            subscription.offer(signal)
        complete = hub.subscribe(subscription, read_at=replay.read_at,
                                 replayed_to=replay.newest)
    try:
        # What the response's middleware wrote after the view gave its connection back (a
        # session saved, say) took one again in this request's thread, to be held until the
        # stream ends: give it back before the stream waits.
        await sync_to_async(live.connection_close)()
        yield f"retry: {RETRY_MS}\n: connected\n\n"
        if replay is not None and not complete:
            # More was told between the read and the subscription than the hub keeps (rare:
            # thousands of changes): read it again, now that it is subscribed.
            for signal in await sync_to_async(_read_again)(replay.after):
                subscription.offer(signal)
        while True:
            try:
                signal = await asyncio.wait_for(subscription.queue.get(), KEEPALIVE_SECONDS)
            except TimeoutError:
                yield ": keep-alive\n\n"
                continue
            if signal is None:
                return  # Too far behind: the browser reconnects and reloads what it shows.
            if isinstance(signal, live.PresenceSignal):
                # No id: a reconnecting browser replays task events only.
                yield f"event: presence\ndata: {json.dumps(signal.as_json())}\n\n"
                continue
            yield f"id: {signal.event}\nevent: task\ndata: {json.dumps(signal.as_json())}\n\n"
    finally:
        hub.unsubscribe(subscription)
