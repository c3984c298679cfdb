"""Run the local Step Functions and SQS emulator: moto in server mode (dev and tests only).

moto's own launchers fall short here: ``moto_server`` cannot tell its caller when it is
ready, and ``ThreadedMotoServer`` neither sets ``MOTO_PORT`` (which moto's ASL
interpreter uses to reach SQS at ``http://localhost:$MOTO_PORT``) nor turns ASL
execution on. ``serve`` does all three, on loopback only: the emulator has no
authentication.

moto 5.2.5's ``GET /moto-api/config`` reports only its batch and lambda settings, so
``serve`` also makes it report the stepfunctions settings (``_config_report_shim``); the
answer then comes from the same dict that moto reads on every Step Functions request.

moto 5.2.5 also fails nested executions (``arn:aws:states:::states:startExecution``, with
``.sync``, ``.sync:2`` or ``.waitForTaskToken``, the way processes compose) with
``States.Runtime``: its interpreter hands the ASL's parameter names (``StateMachineArn``,
``Input``, ``Name``) to boto3 unchanged, reads ``ExecutionArn`` from a response whose keys
are ``executionArn``..., and leaves datetimes in the result, which its DescribeExecution
then cannot JSON-encode. ``_nested_execution_shim`` wraps the two normalisation hooks of
moto's ``StateTaskServiceSfn``: request keys get a lower-case first letter, response keys a
capital one (the child's own Input and Output are left untouched), datetimes become ISO
strings, and a child started without ``Name`` gets a UUID (moto would name it "None", so a
second one would clash). The result then has AWS's shape: ``$.Output`` is the child's
output as parsed JSON with ``.sync:2`` and as a JSON string with ``.sync`` (moto already
parses it for ``.sync:2`` only). Applying it twice is harmless; if moto's internals have
moved (an upgrade), ``serve`` fails with EmulatorError instead of running unpatched. Real
AWS needs none of this.
"""

import datetime
import errno
import functools
import importlib.metadata
import inspect
import ipaddress
import json
import os
import signal
import socket
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from types import FrameType
from typing import Any

from moto.core.config import default_user_config
from moto.moto_api._internal.models import MotoAPIBackend
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

from config.errors import InboxError

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class EmulatorError(InboxError):
    """The emulator could not start or stopped working."""

    code = "emulator"


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
    _config_report_shim()
    _nested_execution_shim()
    listener = _listen(host=host, port=port)
    # Set before any request: moto's ASL interpreter reads it on each SQS call it makes.
    os.environ["MOTO_PORT"] = str(port)
    # Set before any state machine exists: machines created while it is off live in
    # another backend and vanish when it flips.
    default_user_config["stepfunctions"] = {"execute_state_machine": True}
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


def _config_report_shim() -> None:
    """Make GET /moto-api/config report moto's stepfunctions settings too."""
    original = MotoAPIBackend.get_config
    if getattr(original, "reports_stepfunctions", False):
        return

    def get_config(self: MotoAPIBackend) -> dict:
        config = original(self)
        config["stepfunctions"] = default_user_config.get("stepfunctions", {})
        return config

    get_config.reports_stepfunctions = True  # type: ignore[attr-defined]
    MotoAPIBackend.get_config = get_config  # type: ignore[method-assign]


_SFN_TASK_MODULE = "moto.stepfunctions.parser.asl.component.state.exec.state_task.service"
_NESTED_SHIM_MARK = "inbox_nested_execution_shim"
# Under these keys of a DescribeExecution result sit the child execution's own JSON, whose
# keys belong to the process, not to the API.
_EXECUTION_DATA_KEYS = frozenset({"input", "output"})


def _nested_execution_shim() -> None:
    """Make moto's states:startExecution integration use the API's casing (module docstring).

    Raise EmulatorError if the moto internals it patches are missing.
    """
    # Worth proposing upstream (moto 5.2.5). moto's ASL interpreter comes from LocalStack,
    # whose StateTaskService._normalise_parameters/_normalise_response map keys through the
    # botocore shapes with _to_boto_request/_from_boto_response. moto keeps those helpers
    # but leaves both hooks empty, so StateTaskServiceSfn:
    # - calls start_execution(StateMachineArn=..., Input=...): botocore's serializer
    #   raises KeyError 'StateMachineArn', which the interpreter reports as States.Runtime;
    # - has its .sync/.sync:2 resolvers read submission_output["ExecutionArn"] from a
    #   response keyed "executionArn", and return DescribeExecution with keys such as
    #   "output" where AWS (and every ASL path written for it) has "Output";
    # - leaves boto3's datetimes in the task result, so the execution's output holds them
    #   and responses.describe_execution's json.dumps fails on them.
    # Upstream fix: restore LocalStack's hook bodies, and turn datetimes into strings (e.g.
    # with parser.asl.utils.encoding.to_json_str's encoder). Also upstream: the backend that
    # runs ASL (parser/models.py start_execution) names an execution started without a
    # name "None" instead of a UUID, so a second unnamed child clashes with the first.
    # The shim below does this by first letters instead of shapes, which is enough for
    # StartExecution and DescribeExecution. It wraps the hooks rather than replacing them,
    # and both renamings leave keys that are already right unchanged, so a moto that fixes
    # the hooks keeps working with it.
    version = importlib.metadata.version("moto")
    try:
        module = importlib.import_module(f"{_SFN_TASK_MODULE}.state_task_service_sfn")
        sfn_task = module.StateTaskServiceSfn
    except (ImportError, AttributeError) as exc:
        raise EmulatorError(
            f"moto {version} has no StateTaskServiceSfn in {_SFN_TASK_MODULE}, which the "
            "nested-execution shim in processes/emulator.py patches: check whether this moto "
            "runs states:startExecution.sync:2 by itself, then update or remove the shim."
        ) from exc
    # Each method the shim wraps or calls, with the argument it relies on.
    methods = {
        "_normalise_parameters": "parameters",
        "_normalise_response": "response",
        "_get_boto_service_action": "self",
    }
    for name, argument in methods.items():
        method = getattr(sfn_task, name, None)
        if not callable(method) or argument not in inspect.signature(method).parameters:
            raise EmulatorError(
                f"moto {version}'s StateTaskServiceSfn.{name}({argument}, ...) is gone, so "
                "the nested-execution shim in processes/emulator.py cannot work: check "
                "whether this moto runs states:startExecution.sync:2 by itself, then update "
                "or remove the shim."
            )

    original_parameters = sfn_task._normalise_parameters
    if not getattr(original_parameters, _NESTED_SHIM_MARK, False):

        @functools.wraps(original_parameters)
        def normalise_parameters(self: Any, parameters: dict, *args: Any, **kwargs: Any) -> None:
            # The original first: it JSON-encodes StartExecution's "Input".
            original_parameters(self, parameters, *args, **kwargs)
            for key in list(parameters):
                parameters[key[:1].lower() + key[1:]] = parameters.pop(key)
            if self._get_boto_service_action() == "start_execution":
                # AWS names an unnamed execution with a UUID; moto's backend names it
                # "None", so a child started twice would clash with ExecutionAlreadyExists.
                parameters.setdefault("name", str(uuid.uuid4()))

        setattr(normalise_parameters, _NESTED_SHIM_MARK, True)
        sfn_task._normalise_parameters = normalise_parameters

    original_response = sfn_task._normalise_response
    if not getattr(original_response, _NESTED_SHIM_MARK, False):

        @functools.wraps(original_response)
        def normalise_response(self: Any, response: Any, *args: Any, **kwargs: Any) -> None:
            original_response(self, response, *args, **kwargs)
            if isinstance(response, dict):
                # In place: the interpreter keeps using the object it passed in.
                shaped = _asl_cased(response)
                response.clear()
                response.update(shaped)

        setattr(normalise_response, _NESTED_SHIM_MARK, True)
        sfn_task._normalise_response = normalise_response


def _asl_cased(value: Any) -> Any:
    """Return an API result with capitalised field names and datetimes as ISO strings.

    The child execution's Input and Output are kept as they are.
    """
    if isinstance(value, dict):
        cased = {}
        for key, item in value.items():
            data = key[:1].lower() + key[1:] in _EXECUTION_DATA_KEYS
            cased[key[:1].upper() + key[1:]] = item if data else _asl_cased(item)
        return cased
    if isinstance(value, list):
        return [_asl_cased(item) for item in value]
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


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
