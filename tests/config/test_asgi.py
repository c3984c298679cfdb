"""The ASGI entry point serves the live stream over ASGI and every other request over WSGI."""

import asyncio
import hashlib
import http.client
import importlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.test import Client


def _asgi():
    """config.asgi, imported when a test runs: at collection its WSGI handler's WhiteNoise
    would find no static files yet (the session collects them before the first test), and
    the browser tests, served by this same module, would get 404s for every script."""
    return importlib.import_module("config.asgi")


def _request(server: str, path: str, *, method: str = "GET", body: bytes = b"",
             headers: dict[str, str] | None = None) -> tuple[int, dict, bytes]:
    """Send one request to the uvicorn serving config.asgi; return its status, headers and
    body: the whole body, or a stream's first chunk (a stream does not end by itself)."""
    address = urlsplit(server)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        answer = {name.lower(): value for name, value in response.getheaders()}
        if answer.get("content-type", "").startswith("text/event-stream"):
            return response.status, answer, response.read1()
        return response.status, answer, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize(("scope", "handler"), [
    ({"type": "http", "path": "/healthz"}, "requests"),
    ({"type": "http", "path": "/api/inbox/tasks/next/"}, "requests"),
    ({"type": "http", "path": "/"}, "requests"),
    ({"type": "http", "path": "/live/"}, "streams"),
    ({"type": "lifespan"}, "streams"),
])
def test_each_connection_goes_to_one_handler(monkeypatch, scope, handler):
    asgi = _asgi()
    reached = []
    for name in ("requests", "streams"):
        async def record(scope, receive, send, name=name):
            reached.append(name)
        monkeypatch.setattr(asgi, name, record)
    # In a thread of its own: the browser tests' Playwright keeps an event loop running in
    # this one, and asyncio.run refuses to run beside it.
    with ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, asgi.application(scope, None, None)).result()
    assert reached == [handler]


def test_the_stream_path_is_the_live_views_url():
    from django.urls import reverse

    assert reverse("inbox:live") in _asgi().STREAM_PATHS


def test_a_plain_request_is_served(asgi_server):
    status, headers, body = _request(asgi_server, "/healthz")
    assert status == 200
    assert json.loads(body) == {"status": "ok"}
    assert "no-cache" in headers["cache-control"]


def test_a_request_body_and_headers_reach_the_view(asgi_server):
    # An API take with a token of characters no token has: the token check read the
    # header (the refusal is the API's JSON), the body was read as JSON.
    status, headers, body = _request(
        asgi_server, "/api/inbox/tasks/next/", method="POST", body=b"{}",
        headers={"Content-Type": "application/json", "Authorization": "Token ünïcode"})
    assert status == 401
    assert headers["www-authenticate"].startswith("Token")
    assert "characters no token has" in json.loads(body)["detail"]


def test_the_live_stream_is_served_by_the_asgi_handler(asgi_server, worker):
    # Django's WSGI handler answers the stream's URL 204 (no stream there): a stream that
    # opens was served by the ASGI handler.
    client = Client()
    client.force_login(worker)
    session = client.cookies[settings.SESSION_COOKIE_NAME].value
    status, headers, body = _request(
        asgi_server, "/live/", headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={session}"})
    assert status == 200
    assert headers["content-type"].startswith("text/event-stream")
    assert b"connected" in body


def test_a_static_file_of_many_chunks_is_served_byte_for_byte(asgi_server):
    # WhiteNoise's file response, iterated by Django in blocks of 4 KiB: far more messages
    # than config.wsgi_threads lets wait unsent.
    path = Path(settings.STATIC_ROOT) / "admin" / "js" / "vendor" / "jquery" / "jquery.js"
    expected = path.read_bytes()
    assert len(expected) > 20 * 4096
    status, _, body = _request(asgi_server,
                               f"{settings.STATIC_URL}admin/js/vendor/jquery/jquery.js")
    assert status == 200
    assert hashlib.sha256(body).hexdigest() == hashlib.sha256(expected).hexdigest()
