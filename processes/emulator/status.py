"""Execution status as AWS reports it, in the emulator (moto 5.2.5; dev and tests only).

``serve`` (processes/emulator/server.py) applies both shims before it binds its port. Real
AWS needs none of this; production never imports this package.

``execution_status_shim`` closes two gaps of moto 5.2.5's Step Functions:

- StopExecution of an execution that waits for a task token leaves it RUNNING: moto's
  ``Execution.stop`` marks the interpreter stopped, but the execution's status is only
  written (by ``BaseExecutionWorkerCommunication.terminated``) when the interpreter's
  thread ends, and that thread sits in the callback wait until the Task's TimeoutSeconds.
  Then it even overwrites the stop: the wait times out, the Task fails with States.Timeout,
  and the execution ends FAILED. With the shim, StopExecution ends the execution ABORTED at
  once, with a stopDate (DescribeExecution, ListExecutions and StopExecution's answer), and
  its history ends with ExecutionAborted. The waiting thread is left to time out as before
  (the callback is not released: that would run the Task's Catch); whatever it does then
  changes neither the status nor the history. SendTaskSuccess and SendTaskHeartbeat with
  the execution's token are refused with moto's InvalidToken (moto looks only at RUNNING
  executions), and so is SendTaskFailure, which moto would otherwise deliver to the
  stranded wait. AWS answers TaskTimedOut there.
- moto emits no "Step Functions Execution Status Change" events. AWS sends one to the
  default EventBridge bus of the execution's account and region whenever a Standard
  workflow's execution starts or ends; the shim does the same through moto's events
  backend, in-process, so a rule with an SQS target receives it: RUNNING when an execution
  starts, then exactly one of SUCCEEDED, FAILED, TIMED_OUT or ABORTED. The detail has AWS's
  fields: executionArn, stateMachineArn, name, status, startDate and stopDate (epoch
  milliseconds), input and output (the execution's own, as JSON strings), inputDetails,
  outputDetails, error and cause. Express workflows send none, as on AWS.

``event_envelope_shim`` makes moto's EventBridge deliver an event to a target without an
InputTransformer as AWS does: the whole event, with AWS's envelope keys (version, id,
detail-type, source, account, time, region, resources, detail). moto 5.2.5 fills a fixed
template instead, which leaves out ``account`` and substitutes its placeholders by text,
so a "<source>" or "<time>" in an execution's input would be replaced inside the detail.

Both are idempotent; if moto's internals have moved (an upgrade), they raise EmulatorError,
so ``serve`` fails instead of running unpatched.
"""

import datetime
import functools
import importlib
import importlib.metadata
import inspect
import json
import logging
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from processes.emulator import EmulatorError

logger = logging.getLogger(__name__)

_MARK = "inbox_execution_status_shim"
# Set on an execution that StopExecution ended through the shim.
_ABORTED_BY_STOP = "inbox_aborted_by_stop"
SOURCE = "aws.states"
DETAIL_TYPE = "Step Functions Execution Status Change"
# AWS's envelope keys, in AWS's order.
ENVELOPE_KEYS = (
    "version", "id", "detail-type", "source", "account", "time", "region", "resources", "detail",
)
# One lock for every status change of every execution: StopExecution (a request thread)
# and the end of the interpreter (its own thread) could otherwise both write a final
# status and both publish an event. Reentrant: a synchronous express execution ends inside
# Execution.start, which holds it.
_status_lock = threading.RLock()


def execution_status_shim() -> None:
    """Make StopExecution abort at once and publish status-change events (module docstring).

    Raise EmulatorError if the moto internals it patches are missing.
    """
    moto = _moto_parts()
    execution_class = moto["Execution"]
    communication_class = moto["BaseExecutionWorkerCommunication"]
    backend_class = moto["StepFunctionsParserBackend"]

    original_start = execution_class.start
    if not getattr(original_start, _MARK, False):

        @functools.wraps(original_start)
        def start(self: Any) -> None:
            with _status_lock:
                original_start(self)
                # Still under the lock: the execution cannot publish its end before this.
                _status_publish(self, moto=moto)

        _wrap(execution_class, "start", start)

    original_stop = execution_class.stop
    if not getattr(original_stop, _MARK, False):

        @functools.wraps(original_stop)
        def stop(self: Any, stop_date: datetime.datetime, error: str | None,
                 cause: str | None) -> None:
            with _status_lock:
                original_stop(self, stop_date=stop_date, error=error, cause=cause)
                _abort(self, stop_date=stop_date, error=error, cause=cause, moto=moto)

        _wrap(execution_class, "stop", stop)

    original_terminated = communication_class.terminated
    if not getattr(original_terminated, _MARK, False):

        @functools.wraps(original_terminated)
        def terminated(self: Any) -> None:
            with _status_lock:
                # The interpreter's thread ends long after StopExecution ended the
                # execution (its callback wait timed out): the stop stays the outcome.
                if getattr(self.execution, _ABORTED_BY_STOP, False):
                    return
                original_terminated(self)
                _status_publish(self.execution, moto=moto)

        _wrap(communication_class, "terminated", terminated)

    original_failure = backend_class.send_task_failure
    if not getattr(original_failure, _MARK, False):

        @functools.wraps(original_failure)
        def send_task_failure(self: Any, task_token: str, *args: Any, **kwargs: Any) -> Any:
            # moto delivers a failure to any execution holding the token, running or not;
            # an aborted execution's wait would take it and run the Task's Catch.
            for execution in self._get_executions():
                if not getattr(execution, _ABORTED_BY_STOP, False):
                    continue
                if execution.exec_worker.env.callback_pool_manager.get(task_token) is not None:
                    raise moto["InvalidToken"]()
            return original_failure(self, task_token, *args, **kwargs)

        _wrap(backend_class, "send_task_failure", send_task_failure)


def event_envelope_shim() -> None:
    """Make moto's EventBridge deliver whole events, with AWS's envelope keys.

    Raise EmulatorError if moto's EventTemplateParser.parse is missing or has moved.
    """
    version = importlib.metadata.version("moto")
    try:
        from moto.events.utils import EventTemplateParser
    except ImportError as exc:
        raise EmulatorError(
            f"moto {version} has no moto.events.utils.EventTemplateParser, which the event "
            "envelope shim in processes/emulator/status.py patches: check how this moto "
            "delivers events to targets, then update or remove the shim."
        ) from exc
    original = inspect.getattr_static(EventTemplateParser, "parse", None)
    if not isinstance(original, staticmethod):
        _moved(version, "EventTemplateParser.parse (a staticmethod)")
    parse = original.__func__
    if getattr(parse, _MARK, False):
        return
    wanted = ["input_template", "input_paths_map", "event"]
    if list(inspect.signature(parse).parameters) != wanted:
        _moved(version, "EventTemplateParser.parse(input_template, input_paths_map, event)")

    @functools.wraps(parse)
    def parse_whole(input_template: str | None, input_paths_map: dict | None,
                    event: dict) -> dict:
        if input_template or input_paths_map:
            return parse(input_template, input_paths_map, event)
        # No InputTransformer: AWS delivers the event itself. "time" stays a number here,
        # as moto's template left it: moto's SQS target turns it into an ISO string.
        return {key: event[key] for key in ENVELOPE_KEYS}

    setattr(parse_whole, _MARK, True)
    EventTemplateParser.parse = staticmethod(parse_whole)


def _abort(execution: Any, *, stop_date: datetime.datetime, error: str | None,
           cause: str | None, moto: dict) -> None:
    """End a stopped execution ABORTED now: status, stopDate, history, event."""
    status = moto["ExecutionStatus"]
    if execution.exec_status != status.RUNNING:
        return  # Ended already (by itself, or by an earlier stop).
    env = execution.exec_worker.env
    if not isinstance(env.program_state(), moto["ProgramStopped"]):
        return  # It ended on its own just before the stop: terminated() reports how.
    if stop_date.tzinfo is None:
        stop_date = stop_date.replace(tzinfo=datetime.UTC)  # moto's utcnow() is naive UTC.
    execution.exec_status = status.ABORTED
    execution.stop_date = stop_date
    setattr(execution, _ABORTED_BY_STOP, True)
    _history_close(env.event_manager, stop_date=stop_date, error=error, cause=cause,
                   moto=moto)
    _status_publish(execution, moto=moto)


def _history_close(manager: Any, *, stop_date: datetime.datetime, error: str | None,
                   cause: str | None, moto: dict) -> None:
    """Append ExecutionAborted to the history and record nothing after it.

    moto itself appends ExecutionAborted only when the interpreter's thread ends; that
    thread would then add its own TaskTimedOut and ExecutionFailed (or a second
    ExecutionAborted), which this execution's manager now drops.
    """
    history = manager.get_event_history()
    previous = history[-1]["id"] if history else 0
    details = {key: value for key, value in (("error", error), ("cause", cause)) if value}
    aborted_id = manager.add_event(
        context=moto["EventHistoryContext"](previous_event_id=previous),
        event_type=moto["HistoryEventType"].ExecutionAborted,
        event_details=moto["EventDetails"](
            executionAbortedEventDetails=moto["ExecutionAbortedEventDetails"](**details)
        ),
        timestamp=stop_date,
    )

    def closed(*args: Any, **kwargs: Any) -> int:
        return aborted_id

    manager.add_event = closed  # This manager only: one per execution, shared by its frames.


def _status_publish(execution: Any, *, moto: dict) -> None:
    """Put the execution's status-change event on its account's default event bus.

    Delivery is best effort, as on AWS: a failure is logged and never fails the execution.
    """
    try:
        # moto keeps a machine's type in "type" ("sm_type" is always STANDARD there).
        if execution.state_machine.type != "STANDARD" or isinstance(
            execution, moto["SyncExecution"]
        ):
            return  # Express workflows send no status events, as on AWS.
        detail = _status_detail(execution, moto=moto)
        backend = moto["events_backends"][execution.account_id][execution.region_name]
        (entry,) = backend.put_events([{
            "Source": SOURCE,
            "DetailType": DETAIL_TYPE,
            "Resources": [execution.exec_arn],
            "Detail": json.dumps(detail),
        }])
    except Exception:
        logger.exception("Could not publish the %s status event of %s",
                         execution.status, execution.exec_arn)
        return
    if "ErrorCode" in entry:
        logger.error("EventBridge refused the %s status event of %s: %s %s", execution.status,
                     execution.exec_arn, entry["ErrorCode"], entry.get("ErrorMessage"))


def _status_detail(execution: Any, *, moto: dict) -> dict:
    """Return the detail of AWS's "Step Functions Execution Status Change" for execution."""
    status = execution.exec_status.value
    succeeded = status == "SUCCEEDED"
    compact = functools.partial(moto["to_json_str"], separators=(",", ":"))
    return {
        "executionArn": execution.exec_arn,
        "stateMachineArn": execution.state_machine.arn,
        "name": execution.name,
        "status": status,
        "startDate": _epoch_ms(execution.start_date),
        "stopDate": None if status == "RUNNING" else _epoch_ms(execution.stop_date),
        "input": compact(execution.input_data),
        "inputDetails": {"included": True},
        "output": compact(execution.output) if succeeded else None,
        "outputDetails": {"included": True} if succeeded else None,
        "error": execution.error,
        "cause": execution.cause,
    }


def _epoch_ms(moment: datetime.datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    return int(moment.timestamp() * 1000)


def _wrap(owner: type, name: str, function: Callable) -> None:
    setattr(function, _MARK, True)
    setattr(owner, name, function)


def _moved(version: str, what: str) -> NoReturn:
    raise EmulatorError(
        f"moto {version}'s {what} is gone, so the execution status shims in "
        "processes/emulator/status.py cannot work: check whether this moto aborts a waiting "
        "execution at once and emits status-change events by itself, then update or remove "
        "the shims."
    )


# Each moto method the status shim wraps or calls, with the arguments it relies on.
_METHODS = {
    "Execution": {"start": [], "stop": ["stop_date", "error", "cause"]},
    "BaseExecutionWorkerCommunication": {"terminated": []},
    "StepFunctionsParserBackend": {"send_task_failure": ["task_token"], "_get_executions": []},
    "Environment": {"program_state": []},
    "EventManager": {
        "add_event": ["context", "event_type", "event_details", "timestamp"],
        "get_event_history": [],
    },
    "CallbackPoolManager": {"get": ["callback_id"]},
}
# Attributes of moto's Execution that the shim reads or writes.
_EXECUTION_FIELDS = frozenset({
    "exec_arn", "name", "account_id", "region_name", "state_machine", "start_date",
    "stop_date", "exec_status", "input_data", "output", "error", "cause", "exec_worker",
})


def _moto_parts() -> dict[str, Any]:
    """Return the moto classes and helpers the status shim uses, checked; or raise."""
    version = importlib.metadata.version("moto")
    parts: dict[str, Any] = {}
    sources = {
        "moto.stepfunctions.parser.backend.execution": (
            "Execution", "BaseExecutionWorkerCommunication", "SyncExecution",
        ),
        "moto.stepfunctions.parser.models": ("StepFunctionsParserBackend",),
        "moto.stepfunctions.parser.api": (
            "ExecutionStatus", "ExecutionAbortedEventDetails", "HistoryEventType",
            "InvalidToken",
        ),
        "moto.stepfunctions.parser.asl.eval.environment": ("Environment",),
        "moto.stepfunctions.parser.asl.eval.program_state": ("ProgramStopped",),
        "moto.stepfunctions.parser.asl.eval.event.event_manager": (
            "EventManager", "EventHistoryContext",
        ),
        "moto.stepfunctions.parser.asl.eval.event.event_detail": ("EventDetails",),
        "moto.stepfunctions.parser.asl.eval.callback.callback": ("CallbackPoolManager",),
        "moto.stepfunctions.parser.asl.utils.encoding": ("to_json_str",),
        "moto.events.models": ("events_backends",),
    }
    for module_name, names in sources.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            _moved(version, f"module {module_name}")
        for name in names:
            if not hasattr(module, name):
                _moved(version, f"{module_name}.{name}")
            parts[name] = getattr(module, name)
    for class_name, methods in _METHODS.items():
        for method_name, arguments in methods.items():
            method = getattr(parts[class_name], method_name, None)
            if not callable(method):
                _moved(version, f"{class_name}.{method_name}")
            if getattr(method, _MARK, False):
                method = method.__wrapped__
            parameters = inspect.signature(method).parameters
            if not all(argument in parameters for argument in arguments):
                _moved(version, f"{class_name}.{method_name}({', '.join(arguments)})")
    missing = _EXECUTION_FIELDS - set(inspect.get_annotations(parts["Execution"]))
    if missing:
        _moved(version, f"Execution's fields {sorted(missing)}")
    if "RUNNING" not in parts["ExecutionStatus"].__members__:
        _moved(version, "ExecutionStatus.RUNNING")
    return parts

