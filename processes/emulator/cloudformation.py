"""Make moto 5.2.5's CloudFormation create state machines that the emulator runs (dev, tests).

``serve`` (processes/emulator/server.py) applies the shim before it binds its port.

moto's CloudFormation builds an ``AWS::StepFunctions::StateMachine`` in its plain Step
Functions backend, ``moto.stepfunctions.models.stepfunctions_backends``. With ASL execution
on, every Step Functions API call goes to another backend, the one that runs ASL
(``moto.stepfunctions.parser.models``; ``moto.stepfunctions.responses.get_backend`` picks
it), so a machine a stack made is missing from ListStateMachines and cannot be started.
moto's resource also drops ``LoggingConfiguration`` and ``StateMachineType``.

``cloudformation_state_machine_shim`` replaces the resource's three hooks (create, update,
delete) with ones that go to the backend the API uses, and hand ``LoggingConfiguration``
on in the API's shape (``Level`` -> ``level``...), so DescribeStateMachine shows what the
template asked for. The definition is ``DefinitionString`` as before (moto's own hooks
ignore ``Definition``; the inbox's template does not use it). Worth proposing upstream:
the hooks should call ``get_backend``. Applying it twice is harmless; if moto's internals
have moved (an upgrade), it raises EmulatorError, so ``serve`` fails instead of running
unpatched. Real AWS needs none of this.
"""

import importlib.metadata
import inspect
from typing import Any

from processes.emulator import EmulatorError

_MARK = "inbox_cloudformation_state_machine_shim"
_HOOKS = ("create_from_cloudformation_json", "update_from_cloudformation_json",
          "delete_from_cloudformation_json")


def cloudformation_state_machine_shim() -> None:
    """Make stack-made state machines live where the API (and ASL execution) finds them.

    Raise EmulatorError if the moto internals it replaces or calls are missing.
    """
    version = importlib.metadata.version("moto")
    try:
        from moto.stepfunctions.models import StateMachine
        from moto.stepfunctions.responses import get_backend
        from moto.stepfunctions.utils import cfn_to_api_tags
    except ImportError as exc:
        raise EmulatorError(
            f"moto {version} has moved the Step Functions parts that the CloudFormation shim "
            "in processes/emulator/cloudformation.py needs (StateMachine, get_backend, "
            "cfn_to_api_tags): check whether this moto's CloudFormation makes state machines "
            "that run, then update or remove the shim."
        ) from exc
    for hook in _HOOKS:
        if not callable(getattr(StateMachine, hook, None)):
            raise EmulatorError(
                f"moto {version}'s StateMachine.{hook} is gone, so the CloudFormation shim in "
                "processes/emulator/cloudformation.py cannot work: update or remove it."
            )
    if "account" not in inspect.signature(get_backend).parameters:
        raise EmulatorError(
            f"moto {version}'s stepfunctions get_backend(account, region) has changed, so the "
            "CloudFormation shim in processes/emulator/cloudformation.py cannot work."
        )
    if getattr(StateMachine.create_from_cloudformation_json.__func__, _MARK, False):
        return

    def create(cls: type, resource_name: str, cloudformation_json: Any, account_id: str,
               region_name: str, **kwargs: Any) -> Any:
        properties = cloudformation_json["Properties"]
        return get_backend(account_id, region_name).create_state_machine(
            name=properties.get("StateMachineName", resource_name),
            definition=properties.get("DefinitionString", ""),
            roleArn=properties.get("RoleArn", ""),
            tags=cfn_to_api_tags(properties.get("Tags", [])),
            loggingConfiguration=_api_shape(properties.get("LoggingConfiguration")),
            sm_type=properties.get("StateMachineType", "STANDARD"),
        )

    def update(cls: type, original_resource: Any, new_resource_name: str,
               cloudformation_json: Any, account_id: str, region_name: str) -> Any:
        properties = cloudformation_json.get("Properties", {})
        name = properties.get("StateMachineName", original_resource.name)
        if name != original_resource.name:
            # A new name replaces the machine, as on AWS.
            created = create(cls, name, cloudformation_json, account_id, region_name)
            delete(cls, original_resource.arn, cloudformation_json, account_id, region_name)
            return created
        backend = get_backend(account_id, region_name)
        machine = backend.update_state_machine(
            original_resource.arn,
            definition=properties.get("DefinitionString"),
            role_arn=properties.get("RoleArn"),
            logging_configuration=_api_shape(properties.get("LoggingConfiguration")),
        )
        backend.tagger.tag_resource(machine.arn, cfn_to_api_tags(properties.get("Tags", [])))
        return machine

    def delete(cls: type, resource_name: str, cloudformation_json: Any, account_id: str,
               region_name: str) -> None:
        # resource_name is the physical id: the machine's ARN.
        get_backend(account_id, region_name).delete_state_machine(resource_name)

    for hook, function in zip(_HOOKS, (create, update, delete), strict=True):
        setattr(function, _MARK, True)
        setattr(StateMachine, hook, classmethod(function))


def _api_shape(value: Any) -> Any:
    """Return a CloudFormation property in the API's shape: keys with a lower-case first letter.

    ``{"Level": "ERROR", "Destinations": [{"CloudWatchLogsLogGroup": {"LogGroupArn": ...}}]}``
    becomes ``{"level": "ERROR", "destinations": [{"cloudWatchLogsLogGroup": {"logGroupArn":
    ...}}]}``, as CreateStateMachine takes and DescribeStateMachine gives it.
    """
    if isinstance(value, dict):
        return {key[:1].lower() + key[1:]: _api_shape(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_api_shape(item) for item in value]
    return value
