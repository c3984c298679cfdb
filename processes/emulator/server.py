"""Run moto in server mode with ASL execution on, until SIGTERM or SIGINT (dev and tests only).

moto's own launchers fall short here: ``moto_server`` cannot tell its caller when it is
ready, and ``ThreadedMotoServer`` neither sets ``MOTO_PORT`` (which moto's ASL
interpreter uses to reach SQS and Lambda at ``http://localhost:$MOTO_PORT``) nor turns
ASL execution on. ``serve`` does all three, on loopback only: the emulator has no
authentication. It also runs Lambda without Docker: moto then answers every invoke with
the payload it was sent (or a result queued through moto's API), so automation stages run
without a container. Before binding, it applies the shims of processes/emulator/shims.py,
processes/emulator/status.py and processes/emulator/cloudformation.py.
"""

import errno
import ipaddress
import json
import os
import signal
import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from types import FrameType

from moto.core.config import default_user_config
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from processes.emulator import EmulatorError
from processes.emulator.cloudformation import cloudformation_state_machine_shim
from processes.emulator.shims import config_report_shim, nested_execution_shim
from processes.emulator.status import event_envelope_shim, execution_status_shim

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _Stop(BaseException):
    """Raised in the main thread by the SIGTERM/SIGINT handler to end ``serve``.

    A BaseException, like KeyboardInterrupt, so no library's ``except Exception``
    swallows it.
    """


def serve(*, host: str, port: int, on_ready: Callable[[], None]) -> None:
    """Serve the emulator on host:port, call on_ready once it answers, block until a signal.

    Must run in the main thread (it installs SIGTERM and SIGINT handlers, and
    restores the previous ones on return). Raise EmulatorError if host is not a
    loopback address, moto cannot be patched, the port is taken, or ASL execution is
    not on.
    """
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise EmulatorError(
            f"The emulator has no authentication: bind it to a loopback IP address, not {host}."
        )
    # Patched before binding: a moto whose internals moved fails with no socket left open.
    config_report_shim()
    nested_execution_shim()
    execution_status_shim()
    event_envelope_shim()
    cloudformation_state_machine_shim()
    listener = _listen(host=host, port=port)
    # Set before any request: moto's ASL interpreter reads it on each SQS call it makes.
    os.environ["MOTO_PORT"] = str(port)
    # Set before any state machine exists: machines created while it is off live in
    # another backend and vanish when it flips.
    default_user_config["stepfunctions"] = {"execute_state_machine": True}
    # Lambda without Docker (set before any function exists, for the same reason): an
    # invoke answers with its own payload, so an automation stage runs end to end.
    default_user_config["lambda"] = {"use_docker": False}
    server = make_server(
        host,
        port,
        DomainDispatcherApplication(create_backend_app),
        threaded=True,
        request_handler=MotoRequestHandler,
        fd=listener.fileno(),
    )
    listener.close()  # The server holds its own duplicate of the socket.
    stopped = threading.Event()

    def run() -> None:
        try:
            server.serve_forever()
        finally:
            stopped.set()

    thread = threading.Thread(target=run, name="emulator", daemon=True)
    previous = {sig: signal.signal(sig, _raise_stop) for sig in _STOP_SIGNALS}
    try:
        thread.start()
        _execution_check(host=host, port=port)
        on_ready()
        # Sleep rather than Thread.join: a signal handler raising inside join() makes
        # Python 3.11 mark the still-running thread as stopped (bpo-45274's fix).
        while not stopped.is_set():
            time.sleep(0.5)
        raise EmulatorError("The emulator's server thread ended unexpectedly.")
    except _Stop:
        pass
    finally:
        # Ignore a second Ctrl+C while shutting down.
        for sig in _STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        if thread.ident is not None:
            if not stopped.is_set():
                server.shutdown()
            thread.join(timeout=10)
        server.server_close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop


def _listen(*, host: str, port: int) -> socket.socket:
    """Return a socket listening on host:port; raise EmulatorError naming a taken port.

    werkzeug's make_server prints to stderr and calls sys.exit on a taken port, so
    the socket is bound here and handed to it.
    """
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(128)
    except OSError as exc:
        listener.close()
        if exc.errno == errno.EADDRINUSE:
            raise EmulatorError(
                f"Port {port} on {host} is already in use (another emulator?). Stop that "
                "program or choose another port (--port, or INBOX_EMULATOR_PORT)."
            ) from None
        raise EmulatorError(f"Cannot listen on {host}:{port}: {exc.strerror}.") from exc
    return listener


def config_read(*, host: str, port: int, timeout: float = 5) -> dict:
    """Return the running emulator's configuration from GET /moto-api/config."""
    url = f"http://{host}:{port}/moto-api/config"
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.load(response)


def _execution_check(*, host: str, port: int) -> None:
    """Raise EmulatorError unless the running server reports ASL execution on."""
    try:
        config = config_read(host=host, port=port)
    except OSError as exc:
        raise EmulatorError(f"The emulator at {host}:{port} does not answer: {exc}.") from exc
    if config.get("stepfunctions", {}).get("execute_state_machine") is not True:
        raise EmulatorError(
            "The emulator reports ASL execution off; state machines would never run."
        )
