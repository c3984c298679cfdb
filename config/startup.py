"""What a web process makes once, before it serves its first request."""

import gc

from django.db import connections
from django.urls import reverse

from config.celery import app


def web_warm() -> None:
    """Build what Django otherwise builds in the first requests: the URL resolver's
    reverse tables and each database's connection pool (not opened: no connection yet),
    and import the broker's transport (kombu's, with the Redis client under it).

    Django builds both on first use without a lock: under a burst right after a start
    (every open page reconnecting its live stream after a deploy), each request's thread
    built them at once. The reverse tables took seconds on a busy machine, while each
    builder held the database connection its sign-in had taken; hundreds of threads then
    queued on the import lock of the pool's module (py-spy dumps of bench/live.py, a
    thousand streams at once: most waited past the pool's 10 s timeout).

    Last, everything made so far (modules, settings, URL tables: what lives as long as the
    process) is moved out of the garbage collector's reach (gc.freeze): each full
    collection no longer walks it, and requests that make many objects trigger those
    collections often (docs/BENCHMARKS.md, "An HTTP take's instructions").
    """
    reverse("inbox:live")  # builds every reverse table of the URL resolver
    for connection in connections.all():
        getattr(connection, "pool", None)  # PostgreSQL's, when OPTIONS has a pool
    # The first message a request enqueued (a decision's callback) imported the transport:
    # with redis-py's asyncio and cluster modules, 130-150 ms of CPU in each process on
    # this kind of machine, spent inside that first decision's request.
    app.connection_for_write().get_transport_cls()  # a class: nothing is connected
    # Nothing frozen is ever collected as a cycle: only what lives as long as the process.
    gc.freeze()
