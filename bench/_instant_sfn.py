"""A Step Functions endpoint that answers every request at once: a measuring device.

bench/callbacks.py runs it as a child process and points the inbox's endpoint setting
(AWS_ENDPOINT_URL) at it for one phase, to measure how fast the outbox drain can go when
Step Functions costs nothing: every POST is read and answered 200 with ``{}`` and the
JSON content type of Step Functions' API (what SendTaskSuccess and SendTaskFailure
return). It keeps nothing and checks nothing; it is never part of the product.

Usage: python bench/_instant_sfn.py PORT   (prints "Instant endpoint ready" once listening)
"""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ANSWER = b"{}"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as botocore's connection pool expects
    # Headers and body go in separate writes; without this Nagle's algorithm and the
    # client's delayed ACK hold each answer back ~40 ms.
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(ANSWER)))
        self.end_headers()
        self.wfile.write(ANSWER)

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    server.daemon_threads = True
    print("Instant endpoint ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
