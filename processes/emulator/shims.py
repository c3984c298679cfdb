"""Patch moto 5.2.5's internals where the emulator needs AWS's behaviour (dev and tests only).

``serve`` (processes/emulator/server.py) applies both before it binds its port.

moto 5.2.5's ``GET /moto-api/config`` reports only its batch and lambda settings, so
``config_report_shim`` makes it report the stepfunctions settings too; the answer then
comes from the same dict that moto reads on every Step Functions request.

moto 5.2.5 also fails nested executions (``arn:aws:states:::states:startExecution``, with
``.sync``, ``.sync:2`` or ``.waitForTaskToken``, the way processes compose) with
``States.Runtime``: its interpreter hands the ASL's parameter names (``StateMachineArn``,
``Input``, ``Name``) to boto3 unchanged, reads ``ExecutionArn`` from a response whose keys
are ``executionArn``..., and leaves datetimes in the result, which its DescribeExecution
then cannot JSON-encode. ``nested_execution_shim`` wraps the two normalisation hooks of
moto's ``StateTaskServiceSfn``: request keys get a lower-case first letter, response keys a
capital one (the child's own Input and Output are left untouched), datetimes become ISO
strings, and a child started without ``Name`` gets a UUID (moto would name it "None", so a
second one would clash). The result then has AWS's shape: ``$.Output`` is the child's
output as parsed JSON with ``.sync:2`` and as a JSON string with ``.sync`` (moto already
parses it for ``.sync:2`` only). Applying it twice is harmless; if moto's internals have
moved (an upgrade), it raises EmulatorError, so ``serve`` fails instead of running
unpatched. Real AWS needs none of this.
"""

import datetime
import functools
import importlib.metadata
import inspect
import uuid
from typing import Any

from moto.core.config import default_user_config
from moto.moto_api._internal.models import MotoAPIBackend

from processes.emulator import EmulatorError


def config_report_shim() -> None:
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


def nested_execution_shim() -> None:
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
            "nested-execution shim in processes/emulator/shims.py patches: check whether this "
            "moto runs states:startExecution.sync:2 by itself, then update or remove the shim."
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
                "the nested-execution shim in processes/emulator/shims.py cannot work: check "
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
