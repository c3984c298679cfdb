"""Read a deployed version's ASL for the CloudFormation template: what it calls, retargeted.

A deployed version keeps the ASL it was compiled to (``ProcessVersion.asl``), with the URL
of the intake queue and the ARNs of its child state machines as they were at deploy time.
The template makes the same definition name the stack's own queue and the machines of the
stack's account and region, and grants the version's role exactly what its Task states
call. A Task the template cannot grant (another integration, a dynamic queue, function or
child) is an error naming the state: a definition never ships without its permissions.
"""

import json
import re
from dataclasses import dataclass, field
from typing import Any

from config.errors import InboxError

# Written where the stack's values go, then replaced in the definition's text by Fn::Sub
# references; a definition that already holds either is refused.
INTAKE_SENTINEL = "@@inbox-infra:intake-queue-url@@"
MACHINE_PREFIX_SENTINEL = "@@inbox-infra:state-machine-arn-prefix@@"
PARTITION_SENTINEL = "@@inbox-infra:partition@@"
SENTINELS = (INTAKE_SENTINEL, MACHINE_PREFIX_SENTINEL, PARTITION_SENTINEL)

_INTEGRATION = re.compile(r"^arn:[a-z-]+:(?P<rest>states:::(?P<action>[A-Za-z0-9:._-]+))$")
_SQS_SEND = {"sqs:sendMessage", "sqs:sendMessage.waitForTaskToken"}
_LAMBDA_INVOKE = {"lambda:invoke", "lambda:invoke.waitForTaskToken"}
_START_CHILD = {"states:startExecution", "states:startExecution.waitForTaskToken"}
_START_CHILD_SYNC = {"states:startExecution.sync", "states:startExecution.sync:2"}


class InfraError(InboxError):
    """The template cannot be made from these versions and settings, and says why."""

    code = "infra"


@dataclass(frozen=True)
class Machine:
    """One deployed process version as the template sees it."""

    process: str
    version: int
    name: str
    arn: str
    asl: dict[str, Any]


@dataclass
class Calls:
    """What a definition's Task states call, and so what its role must allow."""

    intake: bool = False
    functions: set[str] = field(default_factory=set)
    children: set[str] = field(default_factory=set)
    children_sync: bool = False


def machine_retargeted(machine: Machine, *, intake_queue: str,
                       known: set[str]) -> tuple[dict[str, Any], Calls]:
    """Return machine's ASL with the sentinels in place of its queue and ARN prefix, and Calls.

    intake_queue: the name of the settings' intake queue, which every SQS Task must send to.
    known: the names of every state machine in the template (a child must be one of them).
    Raise InfraError naming the state for anything the template cannot grant or retarget.
    """
    text = json.dumps(machine.asl)
    if any(sentinel in text for sentinel in SENTINELS):
        raise InfraError(f"{machine.name}: its definition holds the template's own markers.")
    prefix = machine.arn.rsplit(":", 1)[0] + ":"
    calls = Calls()
    urls: set[str] = set()
    asl = json.loads(text)
    for path, state in _tasks(asl):
        _retarget_task(machine, path, state, calls=calls, urls=urls, prefix=prefix,
                       known=known)
    for url in urls:
        if url.rstrip("/").rsplit("/", 1)[-1] != intake_queue:
            raise InfraError(
                f"{machine.name}: it sends to the queue {url!r}, not to the intake queue "
                f"{intake_queue!r} of these settings: deploy it again with these settings, or "
                "generate the template with the settings it was deployed with."
            )
    retargeted = json.dumps(asl)
    for old, what in [*((url, "intake queue URL") for url in urls),
                      (prefix, "state machine ARN prefix")]:
        if old in retargeted:
            raise InfraError(
                f"{machine.name}: its definition names its deploy-time {what} {old!r} outside "
                "the QueueUrl and StateMachineArn of its Task states, where the template "
                "cannot put the stack's own."
            )
    return asl, calls


def _retarget_task(machine: Machine, path: str, state: dict[str, Any], *, calls: Calls,
                   urls: set[str], prefix: str, known: set[str]) -> None:
    where = f"{machine.name}: {path}"
    resource = state.get("Resource")
    match = _INTEGRATION.match(resource) if isinstance(resource, str) else None
    action = match["action"] if match else None
    parameters = state.get("Parameters")
    if not isinstance(parameters, dict):
        parameters = {}
    if match:
        # The stack's own partition (aws, aws-cn, aws-us-gov), as every other ARN it names.
        state["Resource"] = f"arn:{PARTITION_SENTINEL}:{match['rest']}"
    if action in _SQS_SEND:
        url = parameters.get("QueueUrl")
        if not isinstance(url, str):
            raise InfraError(f"{where}: sends to a queue named at run time (QueueUrl.$); the "
                             "template grants sqs:SendMessage on the intake queue only.")
        urls.add(url)
        parameters["QueueUrl"] = INTAKE_SENTINEL
        calls.intake = True
    elif action in _LAMBDA_INVOKE:
        function = parameters.get("FunctionName")
        if not isinstance(function, str) or not function:
            raise InfraError(f"{where}: invokes a Lambda function named at run time "
                             "(FunctionName.$); the template grants named functions only.")
        calls.functions.add(function)
    elif action in _START_CHILD or action in _START_CHILD_SYNC:
        child = parameters.get("StateMachineArn")
        if not isinstance(child, str) or not child.startswith(prefix):
            raise InfraError(
                f"{where}: starts {child!r}, which is not a state machine of the inbox's "
                "account and region named in the definition (StateMachineArn)."
            )
        name = child[len(prefix):]
        if name not in known:
            raise InfraError(
                f"{where}: starts {name}, which is not in the template: deploy its process "
                "version first (process_deploy), then generate the template again."
            )
        parameters["StateMachineArn"] = MACHINE_PREFIX_SENTINEL + name
        calls.children.add(name)
        calls.children_sync = calls.children_sync or action in _START_CHILD_SYNC
    else:
        raise InfraError(
            f"{where}: its Resource {resource!r} is not one the template knows how to grant "
            "(sqs:sendMessage, lambda:invoke, states:startExecution and their "
            "waitForTaskToken or sync forms)."
        )


def _tasks(asl: dict[str, Any], path: str = "States") -> list[tuple[str, dict[str, Any]]]:
    """Return (path, state) of every Task in asl, Parallel branches and Map iterators too."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, state in (asl.get("States") or {}).items():
        here = f"{path}.{name}"
        kind = state.get("Type")
        if kind == "Task":
            found.append((here, state))
        elif kind == "Parallel":
            for index, branch in enumerate(state.get("Branches") or []):
                found.extend(_tasks(branch, f"{here}.Branches[{index}].States"))
        elif kind == "Map":
            for key in ("ItemProcessor", "Iterator"):
                if isinstance(state.get(key), dict):
                    found.extend(_tasks(state[key], f"{here}.{key}.States"))
    return found
