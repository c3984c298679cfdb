"""ASGI entry point: the pages' live streams over ASGI, every other request over WSGI.

Run by uvicorn (``./dev run``) or by gunicorn with uvicorn's worker in production (see
docs/OPERATIONS.md).

Only the live stream needs ASGI (one coroutine per open page instead of a thread). Every
other view is synchronous, and Django's ASGI handler serves a synchronous request at a
cost: a new thread per request (asgiref's ThreadSensitiveContext) and a hop between the
event loop and a thread at each boundary between sync-only and async-capable middleware.
That was most of a request's CPU (docs/BENCHMARKS.md, "The web server": three times the
/healthz requests a second, twice the API takes, once split). So this application sends
the stream's path to Django's ASGI handler and every other request to Django's WSGI
handler, run in a pool of threads by a2wsgi (config.wsgi_threads: without a wait on the
event loop per message). Both handlers are the same site: the same settings, URLs,
middleware and views.
"""

import os

from django.conf import settings
from django.core.asgi import get_asgi_application
from django.core.handlers.wsgi import WSGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

streams = get_asgi_application()

from django.urls import reverse  # noqa: E402  (needs the settings set up above)

from config.startup import web_warm  # noqa: E402
from config.wsgi_threads import ThreadedWSGI  # noqa: E402

STREAM_PATHS = frozenset({reverse("inbox:live")})


def _threads() -> int:
    """Threads serving WSGI requests in this process: at most the database pool's size
    (ASGI's web pools its connections), so a request never waits for a connection that
    another thread of the same process holds."""
    pool = settings.DATABASES["default"].get("OPTIONS", {}).get("pool")
    return min(10, pool["max_size"]) if isinstance(pool, dict) else 10


# The handler itself, not get_wsgi_application(): that would run django.setup() (and
# configure logging) a second time; get_asgi_application() above ran it.
requests = ThreadedWSGI(WSGIHandler(), workers=_threads())


async def application(scope: dict, receive, send) -> None:
    """Route one ASGI connection: the live stream (and any scope but HTTP, which Django's
    handler answers as it always did) to ASGI, every other HTTP request to WSGI."""
    if scope["type"] == "http" and scope["path"] not in STREAM_PATHS:
        await requests(scope, receive, send)
    else:
        await streams(scope, receive, send)


web_warm()
