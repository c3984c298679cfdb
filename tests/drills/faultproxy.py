"""An HTTP proxy in front of the real emulator that fails some SendTask* calls.

Not a fake: every request it does not fail is forwarded to the emulator unchanged and
the emulator's answer returned. For a share of SendTaskSuccess/SendTaskFailure requests
it answers instead, as AWS would when overloaded: a ThrottlingException (HTTP 400, AWS
JSON error shape) or an InternalFailure (HTTP 500). It records every request.
"""

import http.client
import json
import random
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SEND_TASK = frozenset({"AWSStepFunctions.SendTaskSuccess", "AWSStepFunctions.SendTaskFailure"})
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "content-length"})
_FAULTS = {
    "throttling": (400, {"__type": "ThrottlingException", "message": "Rate exceeded"}),
    "internal": (500, {"__type": "InternalFailure",
                       "message": "The request processing has failed"}),
}


@dataclass(frozen=True)
class Seen:
    at: float
    target: str
    token: str | None
    answer: str  # "throttling", "internal", or "forwarded"
    status: int


class FaultProxy:
    """Serve on a free loopback port; fail `share` of SendTask* requests."""

    def __init__(self, *, upstream: str, share: float = 0.5, seed: int = 7) -> None:
        self.upstream = urlsplit(upstream)
        self.share = share
        self.random = random.Random(seed)
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> "FaultProxy":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def sends(self, answer: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen
                    if s.target in SEND_TASK and answer in (None, s.answer)]

    def _fault(self, target: str) -> str | None:
        if target not in SEND_TASK:
            return None
        with self._lock:
            if self.random.random() >= self.share:
                return None
            return self.random.choice(sorted(_FAULTS))

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass  # request lines hold no token, but stay quiet

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                target = self.headers.get("X-Amz-Target", "")
                token = None
                if target in SEND_TASK:
                    token = json.loads(body).get("taskToken")
                fault = proxy._fault(target)
                if fault is not None:
                    status, error = _FAULTS[fault]
                    payload = json.dumps(error).encode()
                    # Recorded before the answer leaves: a caller that has its answer
                    # (and acts on it at once, from several threads) finds it recorded.
                    proxy._record(Seen(time.time(), target, token, fault, status))
                    self.send_response(status)
                    self.send_header("Content-Type", "application/x-amz-json-1.0")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                upstream = http.client.HTTPConnection(
                    proxy.upstream.hostname, proxy.upstream.port, timeout=30)
                try:
                    headers = {k: v for k, v in self.headers.items()
                               if k.lower() not in _HOP_BY_HOP}
                    upstream.request("POST", self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                finally:
                    upstream.close()
                proxy._record(Seen(time.time(), target, token, "forwarded", response.status))
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in _HOP_BY_HOP:
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler
