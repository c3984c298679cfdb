"""Compile a process spec to Amazon States Language: a pure function, no I/O.

Every Task state gets a Retry (backoff, full jitter, bounded attempts) for transient
errors only, and a Catch to a failure branch that records the failure on the intake
queue (so the inbox notifies admins) and ends the execution. A human stage becomes
``sqs:sendMessage.waitForTaskToken`` carrying the task envelope (docs/ENVELOPE.md),
whose input holds only the fields the stage shows: a chain of states before it copies
each one that is present (processes/shown.py). An automation stage's Payload carries an
idempotency key. The state machine's TimeoutSeconds is its ceiling
(processes/ceiling.py). A state machine with human stages starts at a router that lets a
migrated execution resume at one of them (processes/resume.py). ``asl_check`` verifies the
same rules on any ASL, compiled or not.
"""

import copy
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from processes.ceiling import (
    BACKSTOP_MARGIN_SECONDS,
    MAX_DELAY_SECONDS,
    SEND_RETRY,
    execution_timeout,
    human_timeout_seconds,
    stages_on_loops,
)
from processes.contract import (
    HUMAN_TASK,
    PLACEHOLDER,
    PROCESS_FAILED_ERROR,
    PROCESS_FAILURE,
    REJECTED_ERROR,
    TIMED_OUT_ERROR,
    is_data_reference,
)
from processes.resume import ROUTER_STATE, resume_states
from processes.shown import result_path, show_state_names, show_states, shown_input_path
from processes.spec import (
    IDEMPOTENCY_KEY,
    AutomationStage,
    ChoiceStage,
    FailStage,
    HumanStage,
    ProcessSpec,
    ProcessStage,
    Retry,
    SpecError,
    Stage,
    SucceedStage,
    WaitStage,
)

__all__ = ["BACKSTOP_MARGIN_SECONDS", "Target", "asl_check", "compile_spec",
           "show_state_names", "state_machine_name"]

TIMEOUT_ERRORS = [TIMED_OUT_ERROR, "States.Timeout", "States.HeartbeatTimeout"]

# States the compiler adds; stage ids are lowercase, so these never clash with them.
REJECTED_STATE = "Rejected"
TIMED_OUT_STATE = "TimedOut"
NOTIFY_STATE = "NotifyFailure"
FAILED_STATE = "Failed"

# Transient errors of each integration; never States.TaskFailed or States.ALL, which
# would also retry a worker's rejection or a timeout.
TRANSIENT_ERRORS = {
    "sqs": ["SQS.SdkClientException", "SQS.AmazonSQSException", "SQS.RequestThrottledException"],
    "lambda": [
        "Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException",
        "Lambda.TooManyRequestsException",
    ],
    "states": [
        "StepFunctions.SdkClientException", "StepFunctions.AWSStepFunctionsException",
        "StepFunctions.ExecutionLimitExceededException",
    ],
}
SEND_MESSAGE = "arn:aws:states:::sqs:sendMessage"
WAIT_FOR_TOKEN = "arn:aws:states:::sqs:sendMessage.waitForTaskToken"  # noqa: S105
LAMBDA_INVOKE = "arn:aws:states:::lambda:invoke"
START_CHILD = "arn:aws:states:::states:startExecution.sync:2"


@dataclass(frozen=True)
class Target:
    """Where the compiled state machine lives: the intake queue and the ARN prefix."""

    intake_queue_url: str
    state_machine_arn_prefix: str


def state_machine_name(name: str, version: int) -> str:
    """Return the state machine name of one process version; each version has its own."""
    return f"{name}-v{version}"


def compile_spec(spec: ProcessSpec, *, target: Target,
                 children: Mapping[tuple[str, int], int] | None = None) -> dict[str, Any]:
    """Return the ASL definition of spec for target; raise SpecError if it breaks a rule.

    children: the execution ceilings (TimeoutSeconds) of the child process versions spec
    starts, by (name, version); needed only by a spec with process stages
    (processes.services.child_ceilings reads them from the deployed versions).
    """
    timeout = execution_timeout(spec, children=children or {})
    compiler = _Compiler(spec, target)
    states: dict[str, Any] = {}
    for index, stage in enumerate(spec.stages):
        following = spec.stages[index + 1].id if index + 1 < len(spec.stages) else None
        if isinstance(stage, HumanStage) and stage.show is not None:
            states.update(show_states(stage))
        states[stage.id] = compiler.state(stage, following)
    states.update(compiler.generated_states())
    first = compiler.entry(spec.stages[0].id)
    humans = [stage.id for stage in spec.stages if isinstance(stage, HumanStage)]
    if humans:
        # Startable at each human stage: an explicit migration (processes/resume.py).
        states.update(resume_states(humans, first=first, entry=compiler.entry))
    asl = {
        # Nothing of where the spec was read from: the same spec compiles the same anywhere.
        "Comment": f"{spec.name} v{spec.version}, compiled by the inbox from its spec; "
        "edit the spec, not this.",
        "StartAt": ROUTER_STATE if humans else first,
        # The ceiling on a whole execution (processes/ceiling.py).
        "TimeoutSeconds": timeout,
        "States": states,
    }
    problems = asl_check(asl)
    if problems:
        raise SpecError([f"{spec.source}: compiled ASL: {p}" for p in problems])
    return asl


class _Compiler:
    def __init__(self, spec: ProcessSpec, target: Target) -> None:
        self.spec = spec
        self.target = target
        self.needs: set[str] = set()
        self.looping = stages_on_loops(spec)

    def entry(self, target: str) -> str:
        """Return the state an edge to stage target leads to: its first show state, if any."""
        stage = self.spec.stage(target)
        if isinstance(stage, HumanStage) and stage.show is not None:
            return show_state_names(stage.id, len(stage.show))[0]
        return target

    def state(self, stage: Stage, following: str | None) -> dict[str, Any]:
        if isinstance(stage, HumanStage):
            state = self.human(stage)
        elif isinstance(stage, ChoiceStage):
            return self.choice(stage)
        elif isinstance(stage, AutomationStage):
            state = self.automation(stage)
        elif isinstance(stage, ProcessStage):
            state = self.child(stage)
        elif isinstance(stage, WaitStage):
            state = {"Type": "Wait"}
            if stage.seconds is not None:
                state["Seconds"] = stage.seconds
            else:
                state["TimestampPath"] = f"$.{stage.until}"
        elif isinstance(stage, SucceedStage):
            return {"Type": "Succeed"}
        elif isinstance(stage, FailStage):
            state = {"Type": "Fail", "Error": stage.error}
            if stage.cause:
                state["Cause"] = stage.cause
            return state
        else:  # pragma: no cover - the parser knows no other kinds
            raise SpecError([f"{self.spec.source}: {stage.id}: cannot compile {stage.kind}"])
        state["Next"] = self.entry(stage.next or following)
        return state

    def retry(self, integration: str, retry: Retry = SEND_RETRY) -> list[dict[str, Any]]:
        return [{
            "ErrorEquals": list(TRANSIENT_ERRORS[integration]),
            "IntervalSeconds": retry.interval,
            "BackoffRate": retry.backoff,
            "MaxAttempts": retry.attempts,
            "MaxDelaySeconds": MAX_DELAY_SECONDS,
            "JitterStrategy": "FULL",
        }]

    def failure_catch(self, target: str | None = None) -> dict[str, Any]:
        if target is None:
            self.needs.add(NOTIFY_STATE)
        return {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error",
                "Next": self.entry(target) if target else NOTIFY_STATE}

    def human(self, stage: HumanStage) -> dict[str, Any]:
        timeouts = {"offer": stage.timeouts.offer, "work": stage.timeouts.work,
                    "overall": stage.timeouts.overall}
        if stage.timeouts.escalation:
            timeouts["escalation"] = stage.timeouts.escalation
        envelope: dict[str, Any] = {
            "kind": HUMAN_TASK,
            "taskToken.$": "$$.Task.Token",
            "execution.$": "$$.Execution.Id",
            "stage.$": "$$.State.Name",
            "enteredAt.$": "$$.State.EnteredTime",
            "process": {"name": self.spec.name, "version": self.spec.version},
            "skill": stage.skill,
            "minProficiency": stage.min_proficiency,
            **_template("title", stage.title),
            "form": stage.form,
            # A version deployed before show existed sends the whole state, as it did.
            "input.$": "$" if stage.show is None else shown_input_path(stage.id),
            "priority": stage.priority,
            "timeouts": timeouts,
            "onTimeout": stage.on_timeout,
            "excludeWorkersOf": list(stage.not_by),
        }
        if stage.heartbeat:
            envelope["heartbeatSeconds"] = stage.heartbeat
        if stage.if_rejected is None:
            self.needs.add(REJECTED_STATE)
        if stage.if_timed_out is None:
            self.needs.add(TIMED_OUT_STATE)
        state: dict[str, Any] = {
            "Type": "Task",
            "Comment": f"Human stage: {stage.skill}",
            "Resource": WAIT_FOR_TOKEN,
            "Parameters": {"QueueUrl": self.target.intake_queue_url, "MessageBody": envelope},
            "TimeoutSeconds": human_timeout_seconds(stage),
            # Replaces the stage's result (and the shown fields collected there) with the
            # answer; the rest of the state passes through untouched.
            "ResultPath": result_path(stage.id),
            "Retry": self.retry("sqs"),
            "Catch": [
                {"ErrorEquals": [REJECTED_ERROR], "ResultPath": "$.error",
                 "Next": self.entry(stage.if_rejected) if stage.if_rejected
                 else REJECTED_STATE},
                {"ErrorEquals": list(TIMEOUT_ERRORS), "ResultPath": "$.error",
                 "Next": self.entry(stage.if_timed_out) if stage.if_timed_out
                 else TIMED_OUT_STATE},
                self.failure_catch(),
            ],
        }
        if stage.heartbeat:
            state["HeartbeatSeconds"] = stage.heartbeat
        return state

    def choice(self, stage: ChoiceStage) -> dict[str, Any]:
        state: dict[str, Any] = {
            "Type": "Choice",
            "Choices": [{**_condition(rule.condition), "Next": self.entry(rule.next)}
                        for rule in stage.rules],
        }
        if stage.default:
            state["Default"] = self.entry(stage.default)
        return state

    def idempotency_key(self, stage: AutomationStage) -> str:
        """Return the intrinsic that makes an automation stage's idempotency key.

        The execution's ARN (its name alone repeats across state machines: names come
        from business keys) and the stage's id; the same in every retried attempt. On a
        stage an execution may enter again (a loop) also the time the state was entered,
        so each visit has its own key and its retries share it.
        """
        if stage.id in self.looping:
            return (f"States.Format('{{}}:{{}}:{{}}', $$.Execution.Id, '{stage.id}', "
                    "$$.State.EnteredTime)")
        return f"States.Format('{{}}:{{}}', $$.Execution.Id, '{stage.id}')"

    def automation(self, stage: AutomationStage) -> dict[str, Any]:
        payload = {**_parameters(stage.payload),
                   f"{IDEMPOTENCY_KEY}.$": self.idempotency_key(stage)}
        state: dict[str, Any] = {
            "Type": "Task",
            "Resource": LAMBDA_INVOKE,
            "Parameters": {"FunctionName": stage.function, "Payload": payload},
            "TimeoutSeconds": stage.timeout,
            "ResultPath": result_path(stage.id),
            "Retry": self.retry("lambda", stage.retry),
            "Catch": [self.failure_catch(stage.catch)],
        }
        if stage.output:
            state["ResultSelector"] = {f"{name}.$": f"$.Payload.{name}" for name in stage.output}
        return state

    def child(self, stage: ProcessStage) -> dict[str, Any]:
        arn = self.target.state_machine_arn_prefix + state_machine_name(stage.process,
                                                                        stage.version)
        parameters: dict[str, Any] = {"StateMachineArn": arn}
        if stage.input is None:
            parameters["Input.$"] = "$"
        else:
            parameters["Input"] = {
                **_parameters(stage.input),
                # Links the child to its parent in the Step Functions console.
                "AWS_STEP_FUNCTIONS_STARTED_BY_EXECUTION_ID.$": "$$.Execution.Id",
            }
        return {
            "Type": "Task",
            "Comment": f"Child process {stage.process} v{stage.version}",
            "Resource": START_CHILD,
            "Parameters": parameters,
            "ResultSelector": {"output.$": "$.Output", "execution.$": "$.ExecutionArn"},
            "ResultPath": result_path(stage.id),
            "Retry": self.retry("states", stage.retry),
            "Catch": [self.failure_catch(stage.catch)],
        }

    def generated_states(self) -> dict[str, Any]:
        states: dict[str, Any] = {}
        if REJECTED_STATE in self.needs:
            states[REJECTED_STATE] = {"Type": "Fail", "Error": REJECTED_ERROR,
                                      "Cause": "A worker rejected the task."}
        if TIMED_OUT_STATE in self.needs:
            states[TIMED_OUT_STATE] = {"Type": "Fail", "Error": TIMED_OUT_ERROR,
                                       "Cause": "A human stage ran out of time."}
        if NOTIFY_STATE in self.needs:
            states[NOTIFY_STATE] = {
                "Type": "Task",
                "Comment": "Record the failure with the inbox, which tells the admins.",
                "Resource": SEND_MESSAGE,
                "Parameters": {
                    "QueueUrl": self.target.intake_queue_url,
                    "MessageBody": {
                        "kind": PROCESS_FAILURE,
                        "execution.$": "$$.Execution.Id",
                        "process": {"name": self.spec.name, "version": self.spec.version},
                        "error.$": "$.error",
                    },
                },
                "ResultPath": None,
                "Retry": self.retry("sqs"),
                # The failure is recorded in the execution history either way.
                "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": None,
                           "Next": FAILED_STATE}],
                "Next": FAILED_STATE,
            }
            states[FAILED_STATE] = {"Type": "Fail", "Error": PROCESS_FAILED_ERROR,
                                    "Cause": "A stage failed; see the execution history."}
        return states


def _template(key: str, template: str) -> dict[str, str]:
    """Return {key: text} or {key.$: States.Format(...)} for a title template."""
    paths = PLACEHOLDER.findall(template)
    if not paths:
        return {key: template}
    literal = PLACEHOLDER.sub("\0", template)
    # States.Format escapes: ' { } and \ are written with a backslash.
    escaped = re.sub(r"([\\'{}])", r"\\\1", literal).replace("\0", "{}")
    arguments = ", ".join(f"$.{path}" for path in paths)
    return {f"{key}.$": f"States.Format('{escaped}', {arguments})"}


def _parameters(values: dict[str, Any]) -> dict[str, Any]:
    """Return ASL Parameters: a string starting with "$." is a path into the data."""
    result: dict[str, Any] = {}
    for name, value in values.items():
        if is_data_reference(value):
            result[f"{name}.$"] = value
        elif isinstance(value, dict):
            result[name] = _parameters(value)
        else:
            result[name] = copy.deepcopy(value)
    return result


_NUMERIC = {"equals": "NumericEquals", "greater_than": "NumericGreaterThan",
            "greater_or_equal": "NumericGreaterThanEquals", "less_than": "NumericLessThan",
            "less_or_equal": "NumericLessThanEquals"}
_STRING = {"equals": "StringEquals", "greater_than": "StringGreaterThan",
           "greater_or_equal": "StringGreaterThanEquals", "less_than": "StringLessThan",
           "less_or_equal": "StringLessThanEquals"}


def _condition(condition: dict[str, Any]) -> dict[str, Any]:
    """Return the ASL choice rule of a spec condition (already validated by the parser)."""
    if "all" in condition:
        return {"And": [_condition(c) for c in condition["all"]]}
    if "any" in condition:
        return {"Or": [_condition(c) for c in condition["any"]]}
    if "not" in condition:
        return {"Not": _condition(condition["not"])}
    variable = f"$.{condition['var']}"
    operator, value = next((k, v) for k, v in condition.items() if k != "var")
    if operator == "present":
        return {"Variable": variable, "IsPresent": value}
    if operator == "not_equals":
        return {"Not": _condition({"var": condition["var"], "equals": value})}
    if isinstance(value, bool):
        comparison = {"Variable": variable, "BooleanEquals": value}
    elif isinstance(value, int | float):
        comparison = {"Variable": variable, _NUMERIC[operator]: value}
    else:
        comparison = {"Variable": variable, _STRING[operator]: value}
    # A missing field fails the execution (States.Runtime) unless guarded: treat it
    # as "does not match" instead.
    return {"And": [{"Variable": variable, "IsPresent": True}, comparison]}


def asl_check(asl: dict[str, Any]) -> list[str]:
    """Return the rule violations in asl: Tasks without Retry, empty Catch, bad edges."""
    problems: list[str] = []
    states: dict[str, Any] = asl.get("States", {})
    start = asl.get("StartAt")
    if start not in states:
        problems.append(f"StartAt: {start!r} is no state")
    edges: dict[str, set[str]] = {}
    for name, state in states.items():
        kind = state.get("Type")
        targets = []
        if "Next" in state:
            targets.append(("Next", state["Next"]))
        elif kind not in ("Choice", "Succeed", "Fail") and not state.get("End"):
            problems.append(f"States.{name}: has neither Next nor End")
        if kind == "Task":
            if not state.get("Retry"):
                problems.append(f"States.{name}: a Task without Retry")
            if "Catch" in state and not state["Catch"]:
                problems.append(f"States.{name}: an empty Catch")
            if "Catch" not in state:
                problems.append(f"States.{name}: a Task without Catch")
            for catcher in state.get("Catch", []):
                if not catcher.get("ErrorEquals"):
                    problems.append(f"States.{name}: a Catch with no ErrorEquals")
                targets.append(("Catch", catcher.get("Next")))
        if kind == "Choice":
            for rule in state.get("Choices", []):
                targets.append(("Choices", rule.get("Next")))
            if "Default" in state:
                targets.append(("Default", state["Default"]))
        for where, target in targets:
            if target not in states:
                problems.append(f"States.{name}.{where}: goes to {target!r}, which is no state")
        edges[name] = {t for _w, t in targets if t in states}
    seen, todo = set(), [start] if start in states else []
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(edges.get(current, ()))
    for name in states:
        if name not in seen:
            problems.append(f"States.{name}: unreachable from {start!r}")
    return problems
