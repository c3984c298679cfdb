"""Process specifications: parse a YAML spec and check it against the workflow rules.

A spec is one YAML file per process version; docs/PROCESSES.md describes the format.
Every problem is reported as "source: path: message", all of them at once, so an
author fixes a file in one pass. A version deployed before a rule existed is read with
``spec_parse(..., deployed=True)``, which leaves out the rules its text predates.
"""

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from config.errors import InboxError
from processes.contract import (
    DATA_PATH,
    HEARTBEATS_PER_PERIOD,
    PLACEHOLDER,
    PROCESS_FAILED_ERROR,
)
from processes.display import Display, display_parse
from processes.forms import BUILTIN_FORMS, Form, form_parse

MAX_STAGES = 5
NAME = re.compile(r"^[a-z][a-z0-9-]{0,47}$")
STAGE_ID = re.compile(r"^[a-z][a-z0-9-]{0,63}$")
TIMEOUT_POLICIES = ("abort", "escalate")
# Stages that end the state machine; they do not count against MAX_STAGES.
TERMINAL_KINDS = ("succeed", "fail")
ERROR_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*(\.[A-Za-z][A-Za-z0-9]*)*$")
# Step Functions runs a Standard execution for at most a year (31,536,000 s).
MAX_SECONDS = 365 * 24 * 3600
# The fields a human stage shows: each one a Choice and a Pass in the compiled ASL.
MAX_SHOWN = 50
# Set by the compiler in every automation stage's Payload (docs/PROCESSES.md).
IDEMPOTENCY_KEY = "idempotencyKey"


class SpecError(InboxError):
    """A spec breaks the format or the workflow rules; problems lists each one."""

    code = "invalid_spec"

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Timeouts:
    offer: int
    work: int
    overall: int
    escalation: int | None = None


@dataclass(frozen=True)
class Retry:
    attempts: int = 3
    interval: int = 2
    backoff: float = 2.0


@dataclass(frozen=True)
class Stage:
    id: str
    kind: str
    next: str | None = None


@dataclass(frozen=True)
class HumanStage(Stage):
    skill: str = ""
    min_proficiency: int = 1
    title: str = ""
    form: str = ""
    priority: int = 50
    timeouts: Timeouts = Timeouts(0, 0, 0)
    on_timeout: str = "abort"
    heartbeat: int | None = None
    # How many tasks of this stage are expected open at once (sizes its heartbeats).
    expected_open: int = 100
    not_by: tuple[str, ...] = ()
    if_rejected: str | None = None
    if_timed_out: str | None = None
    # How the task page shows the input (processes.display); None: the default layout.
    display: Display | None = None
    # The data paths the envelope carries as the task's input; None only in a version
    # deployed before show existed, whose envelope carries the whole state.
    show: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ChoiceRule:
    condition: dict[str, Any]
    next: str


@dataclass(frozen=True)
class ChoiceStage(Stage):
    rules: tuple[ChoiceRule, ...] = ()
    default: str | None = None


@dataclass(frozen=True)
class AutomationStage(Stage):
    function: str = ""
    payload: dict[str, Any] = field(default_factory=dict)
    output: dict[str, str] = field(default_factory=dict)
    timeout: int = 300
    retry: Retry = Retry()
    catch: str | None = None


@dataclass(frozen=True)
class WaitStage(Stage):
    seconds: int | None = None
    until: str | None = None


@dataclass(frozen=True)
class ProcessStage(Stage):
    process: str = ""
    version: int = 0
    input: dict[str, Any] | None = None
    retry: Retry = Retry()
    catch: str | None = None


@dataclass(frozen=True)
class SucceedStage(Stage):
    pass


@dataclass(frozen=True)
class FailStage(Stage):
    error: str = PROCESS_FAILED_ERROR
    cause: str = ""


@dataclass(frozen=True)
class ProcessSpec:
    name: str
    version: int
    description: str
    stages: tuple[Stage, ...]
    forms: dict[str, Form]
    text: str
    source: str
    # The spec's own ceiling on a whole execution, in seconds; None: the compiler sums the
    # stages' ceilings (processes.ceiling).
    timeout: int | None = None

    @property
    def children(self) -> tuple[tuple[str, int], ...]:
        """Return the child processes (name, version) this process starts."""
        return tuple(
            (stage.process, stage.version)
            for stage in self.stages
            if isinstance(stage, ProcessStage)
        )

    def stage(self, stage_id: str) -> Stage | None:
        return next((s for s in self.stages if s.id == stage_id), None)

    def form(self, name: str) -> Form | None:
        """Return the form a human stage names: the spec's own, else a built-in one."""
        return self.forms.get(name) or BUILTIN_FORMS.get(name)


def spec_load(path: Path) -> ProcessSpec:
    """Read and parse the spec in path."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError([f"{path}: cannot read: {exc.strerror}"]) from None
    return spec_parse(text, source=str(path))


def spec_parse(text: str, *, source: str, deployed: bool = False) -> ProcessSpec:
    """Return the ProcessSpec in text, or raise SpecError listing every problem.

    deployed: text is a version already deployed, which may predate a rule for new
    versions (a human stage's show): read it as it was accepted, so its tasks keep their
    form and display.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "?"
        problem = getattr(exc, "problem", None) or str(exc)
        raise SpecError([f"{source}: {where}: not valid YAML: {problem}"]) from None
    return _Parser(source, deployed=deployed).parse(data, text)


_TOP_KEYS = {"process", "version", "description", "stages", "forms", "timeout"}
_COMMON_KEYS = {"id", "kind", "next", "comment"}
_KIND_KEYS = {
    "human": {
        "skill", "min_proficiency", "title", "form", "priority", "timeouts", "on_timeout",
        "heartbeat", "expected_open", "not_by", "if_rejected", "if_timed_out", "display",
        "show",
    },
    "choice": {"rules", "default"},
    "automation": {"function", "payload", "output", "timeout", "retry", "catch"},
    "wait": {"seconds", "until"},
    "process": {"process", "version", "input", "retry", "catch"},
    "succeed": set(),
    "fail": {"error", "cause"},
}
_COMPARISONS = (
    "equals", "not_equals", "greater_than", "greater_or_equal", "less_than", "less_or_equal",
)
_OUTPUT_TYPES = ("string", "number", "boolean", "object", "array")


def heartbeat_budget_warnings(spec: ProcessSpec, *, source: str, rate: int,
                              share_percent: int) -> list[str]:
    """Return a warning for each human stage whose heartbeats would need more than their
    share of the SendTask* budget with its expected number of open tasks.

    A stage with HeartbeatSeconds H and N open tasks needs HEARTBEATS_PER_PERIOD * N / H
    SendTaskHeartbeat calls a second; heartbeats may use share_percent of rate (answers
    the rest). Beyond that they fall behind and Step Functions times the tasks out.
    """
    allowed = rate * share_percent / 100
    warnings = []
    for index, stage in enumerate(spec.stages):
        if not isinstance(stage, HumanStage) or not stage.heartbeat:
            continue
        needed = HEARTBEATS_PER_PERIOD * stage.expected_open / stage.heartbeat
        if needed <= allowed:
            continue
        at_least = math.ceil(HEARTBEATS_PER_PERIOD * stage.expected_open / allowed) \
            if allowed else None
        fix = (f"raise heartbeat to {at_least} s or more, lower expected_open, or give "
               "heartbeats a larger share") if at_least else "give heartbeats a share"
        warnings.append(
            f"{source}: stages[{index}] ({stage.id}).heartbeat: {stage.heartbeat} s with "
            f"{stage.expected_open} open tasks needs {needed:.1f} SendTaskHeartbeat calls "
            f"a second, more than heartbeats' {share_percent}% of INBOX_SENDTASK_RATE "
            f"({rate}/s, {allowed:g}/s): {fix}"
        )
    return warnings


class _Parser:
    def __init__(self, source: str, *, deployed: bool = False) -> None:
        self.source = source
        self.deployed = deployed
        self.problems: list[str] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{self.source}: {path}: {message}")

    def parse(self, data: Any, text: str) -> ProcessSpec:
        if not isinstance(data, dict):
            self.problem("(top)", "a spec is a mapping with process, version and stages")
            raise SpecError(self.problems)
        for key in sorted(set(data) - _TOP_KEYS, key=str):
            self.problem(key, f"unknown field (known: {', '.join(sorted(_TOP_KEYS))})")
        name = data.get("process")
        if not isinstance(name, str) or not NAME.match(name):
            self.problem("process", "required; a name of lowercase letters, digits and dashes")
            name = ""
        version = data.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            self.problem("version", "required; a whole number from 1 up")
            version = 0
        timeout = self.execution_timeout(data)
        forms = self.forms(data.get("forms", {}))
        stages = self.stages(data.get("stages"))
        if stages:
            self.graph(stages, forms)
        if self.problems:
            raise SpecError(self.problems)
        return ProcessSpec(
            name=name,
            version=version,
            description=str(data.get("description", "")),
            stages=tuple(stages),
            forms=forms,
            text=text,
            source=self.source,
            timeout=timeout,
        )

    def execution_timeout(self, data: dict) -> int | None:
        if "timeout" not in data:
            return None
        value = data["timeout"]
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SECONDS:
            self.problem("timeout", "the seconds a whole execution may run: a whole number "
                         f"from 1 to {MAX_SECONDS:,} (the year Step Functions allows)")
            return None
        return value

    def forms(self, raw: Any) -> dict[str, Form]:
        if not isinstance(raw, dict):
            self.problem("forms", "must map form names to forms")
            return {}
        problems: list[str] = []
        forms = {}
        for name, body in raw.items():
            form = form_parse(str(name), body, path=f"forms.{name}", problems=problems)
            if form:
                forms[str(name)] = form
        self.problems.extend(f"{self.source}: {p}" for p in problems)
        return forms

    def stages(self, raw: Any) -> list[Stage]:
        if not isinstance(raw, list) or not raw:
            self.problem("stages", "required; a non-empty list of stages")
            return []
        stages = []
        for index, item in enumerate(raw):
            stage = self.stage(item, f"stages[{index}]")
            if stage:
                stages.append(stage)
        ids = [s.id for s in stages]
        for duplicate in sorted({i for i in ids if ids.count(i) > 1}):
            self.problem("stages", f"stage id {duplicate!r} is used more than once")
        counted = [s for s in stages if s.kind not in TERMINAL_KINDS]
        if len(counted) > MAX_STAGES:
            self.problem(
                "stages",
                f"{len(counted)} stages; at most {MAX_STAGES} per state machine (succeed and "
                "fail do not count): move some into a child process (kind: process)",
            )
        return stages

    def stage(self, raw: Any, path: str) -> Stage | None:
        if not isinstance(raw, dict):
            self.problem(path, "a stage is a mapping with id and kind")
            return None
        kind = raw.get("kind")
        stage_id = raw.get("id")
        if not isinstance(stage_id, str) or not STAGE_ID.match(stage_id):
            self.problem(f"{path}.id", "required; lowercase letters, digits and dashes")
            return None
        path = f"{path} ({stage_id})"
        if kind not in _KIND_KEYS:
            self.problem(f"{path}.kind", f"unknown stage kind {kind!r} (known: "
                         f"{', '.join(_KIND_KEYS)})")
            return None
        known = _COMMON_KEYS | _KIND_KEYS[kind]
        for key in sorted(set(raw) - known, key=str):
            self.problem(f"{path}.{key}", f"unknown field for a {kind} stage (known: "
                         f"{', '.join(sorted(known))})")
        common = {"id": stage_id, "kind": kind, "next": self.ref(raw, "next", path)}
        if kind in TERMINAL_KINDS and common["next"]:
            self.problem(f"{path}.next", f"a {kind} stage ends the process; it has no next")
        return getattr(self, f"stage_{kind}")(raw, path, common)

    # One reader per stage kind ----------------------------------------------------------

    def stage_human(self, raw: dict, path: str, common: dict) -> HumanStage:
        skill = raw.get("skill")
        if not isinstance(skill, str) or not STAGE_ID.match(skill):
            self.problem(f"{path}.skill", "required; a skill slug such as invoice-review")
        title = raw.get("title")
        if not isinstance(title, str) or not title.strip():
            self.problem(f"{path}.title", "required; a template such as 'Review {invoice_id}'")
            title = ""
        else:
            for placeholder in PLACEHOLDER.findall(title):
                if not DATA_PATH.match(placeholder):
                    self.problem(f"{path}.title", f"placeholder {{{placeholder}}} is not a data "
                                 "path such as {invoice_id} or {customer.name}")
        form = raw.get("form")
        if not isinstance(form, str) or not form:
            self.problem(f"{path}.form", "required; the name of a form")
        policy = raw.get("on_timeout", "abort")
        if policy not in TIMEOUT_POLICIES:
            self.problem(f"{path}.on_timeout", f"unknown policy {policy!r} (known: "
                         f"{', '.join(TIMEOUT_POLICIES)})")
        timeouts = self.timeouts(raw.get("timeouts"), f"{path}.timeouts", policy)
        heartbeat = self.seconds(raw, "heartbeat", path, required=False)
        if heartbeat and timeouts and heartbeat >= timeouts.overall:
            self.problem(f"{path}.heartbeat", f"{heartbeat} must be smaller than overall "
                         f"({timeouts.overall})")
        not_by = raw.get("not_by", [])
        not_by = [not_by] if isinstance(not_by, str) else not_by
        if not isinstance(not_by, list) or not all(isinstance(s, str) for s in not_by):
            self.problem(f"{path}.not_by", "must be a stage id or a list of stage ids")
            not_by = []
        problems: list[str] = []
        display = display_parse(raw.get("display"), path=f"{path}.display", problems=problems)
        self.problems.extend(f"{self.source}: {p}" for p in problems)
        show = self.show(raw, path)
        if show is not None and display is not None:
            self.display_shown(display, show, f"{path}.display")
        return HumanStage(
            **common,
            skill=skill if isinstance(skill, str) else "",
            min_proficiency=self.integer(raw, "min_proficiency", path, 1, 1, 5),
            title=title,
            form=form if isinstance(form, str) else "",
            priority=self.integer(raw, "priority", path, 50, 0, 100),
            timeouts=timeouts or Timeouts(0, 0, 0),
            on_timeout=policy if policy in TIMEOUT_POLICIES else "abort",
            heartbeat=heartbeat,
            expected_open=self.integer(raw, "expected_open", path, 100, 1, 10_000_000),
            not_by=tuple(not_by),
            if_rejected=self.ref(raw, "if_rejected", path),
            if_timed_out=self.ref(raw, "if_timed_out", path),
            display=display,
            show=show,
        )

    def show(self, raw: dict, path: str) -> tuple[str, ...] | None:
        """Return the data paths a human stage's envelope carries, in their order."""
        if "show" not in raw:
            if not self.deployed:
                self.problem(f"{path}.show", "required; the data paths the task shows, such "
                             "as [invoice_id, supplier.name]: only they leave the execution")
            return None
        value = raw["show"]
        if not isinstance(value, list) or not value:
            self.problem(f"{path}.show", "must be a non-empty list of data paths, such as "
                         "[invoice_id, supplier.name]")
            return None
        if len(value) > MAX_SHOWN:
            self.problem(f"{path}.show", f"{len(value)} fields; at most {MAX_SHOWN}")
        paths: list[str] = []
        for index, item in enumerate(value):
            if not isinstance(item, str) or not DATA_PATH.match(item):
                self.problem(f"{path}.show[{index}]", "must be a data path such as invoice_id "
                             "or supplier.name")
            elif item in paths:
                self.problem(f"{path}.show[{index}]", f"{item!r} is shown more than once")
            else:
                paths.append(item)
        for inner in paths:
            outer = next((p for p in paths if p != inner and _within(inner, p)), None)
            if outer:
                self.problem(f"{path}.show", f"{inner!r} is inside {outer!r}, which is shown "
                             f"whole: name one of them")
        return tuple(paths)

    def display_shown(self, display: Display, show: tuple[str, ...], path: str) -> None:
        """Name each data path the display reads that show does not carry."""
        def check(where: str, key: str, what: str) -> None:
            if not any(_within(key, shown) for shown in show):
                self.problem(where, f"{what} {key!r} is not in show, so the task does not "
                             "receive it: add it (or the object holding it) to show")

        for index, item in enumerate(display.fields):
            where = f"{path}.fields[{index}] ({item.key})"
            check(f"{where}.key", item.key, "key")
            if item.currency_key:
                check(f"{where}.currency_key", item.currency_key, "currency_key")
            for placeholder in PLACEHOLDER.findall(item.url):
                if DATA_PATH.match(placeholder):
                    check(f"{where}.url", placeholder, "placeholder")

    def stage_choice(self, raw: dict, path: str, common: dict) -> ChoiceStage:
        if common["next"]:
            self.problem(f"{path}.next", "a choice stage goes where its rules say; use default")
        rules = []
        raw_rules = raw.get("rules")
        if not isinstance(raw_rules, list) or not raw_rules:
            self.problem(f"{path}.rules", "required; a list of {if: condition, next: stage}")
            raw_rules = []
        for index, rule in enumerate(raw_rules):
            rule_path = f"{path}.rules[{index}]"
            if not isinstance(rule, dict) or set(rule) != {"if", "next"}:
                self.problem(rule_path, "each rule is exactly {if: condition, next: stage}")
                continue
            self.condition(rule["if"], f"{rule_path}.if")
            target = self.ref(rule, "next", rule_path)
            if target:
                rules.append(ChoiceRule(condition=rule["if"], next=target))
        default = self.ref(raw, "default", path)
        if default is None and "default" not in raw:
            self.problem(f"{path}.default", "required; where to go when no rule matches")
        return ChoiceStage(**common, rules=tuple(rules), default=default)

    def stage_automation(self, raw: dict, path: str, common: dict) -> AutomationStage:
        function = raw.get("function")
        if not isinstance(function, str) or not function:
            self.problem(f"{path}.function", "required; a Lambda function name or ARN")
        payload = raw.get("payload", {})
        if not isinstance(payload, dict):
            self.problem(f"{path}.payload", "must map names to values or $.paths")
            payload = {}
        if IDEMPOTENCY_KEY in payload:
            self.problem(f"{path}.payload.{IDEMPOTENCY_KEY}", "reserved: the compiled state "
                         "sets it to the stage's idempotency key (docs/PROCESSES.md)")
        output = raw.get("output", {})
        if not isinstance(output, dict):
            self.problem(f"{path}.output", f"must map result fields to a type "
                         f"({', '.join(_OUTPUT_TYPES)})")
            output = {}
        for key, kind in output.items():
            if kind not in _OUTPUT_TYPES:
                self.problem(f"{path}.output.{key}", f"type must be one of "
                             f"{', '.join(_OUTPUT_TYPES)}, not {kind!r}")
        return AutomationStage(
            **common,
            function=function if isinstance(function, str) else "",
            payload=payload,
            output={str(k): str(v) for k, v in output.items()},
            timeout=self.seconds(raw, "timeout", path, required=False) or 300,
            retry=self.retry(raw, path),
            catch=self.catch(raw, path),
        )

    def stage_wait(self, raw: dict, path: str, common: dict) -> WaitStage:
        seconds = self.seconds(raw, "seconds", path, required=False)
        until = raw.get("until")
        if (seconds is None) == (until is None):
            self.problem(path, "a wait stage needs exactly one of seconds or until")
        if until is not None and (not isinstance(until, str) or not DATA_PATH.match(until)):
            self.problem(f"{path}.until", "must be the data path of an ISO timestamp")
            until = None
        return WaitStage(**common, seconds=seconds, until=until)

    def stage_process(self, raw: dict, path: str, common: dict) -> ProcessStage:
        child = raw.get("process")
        if not isinstance(child, str) or not NAME.match(child):
            self.problem(f"{path}.process", "required; the name of a child process")
        version = raw.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            self.problem(f"{path}.version", "required; the child's deployed version to run")
            version = 0
        child_input = raw.get("input")
        if child_input is not None and not isinstance(child_input, dict):
            self.problem(f"{path}.input", "must map names to values or $.paths")
            child_input = None
        return ProcessStage(
            **common,
            process=child if isinstance(child, str) else "",
            version=version,
            input=child_input,
            retry=self.retry(raw, path),
            catch=self.catch(raw, path),
        )

    def stage_succeed(self, raw: dict, path: str, common: dict) -> SucceedStage:
        return SucceedStage(**common)

    def stage_fail(self, raw: dict, path: str, common: dict) -> FailStage:
        error = raw.get("error", PROCESS_FAILED_ERROR)
        if not isinstance(error, str) or not ERROR_NAME.match(error) or error.startswith("States."):
            self.problem(f"{path}.error", "an error name such as Invoice.Rejected (not States.*)")
            error = PROCESS_FAILED_ERROR
        return FailStage(**common, error=error, cause=str(raw.get("cause", "")))

    # Pieces ------------------------------------------------------------------------------

    def ref(self, raw: dict, key: str, path: str) -> str | None:
        value = raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not STAGE_ID.match(value):
            self.problem(f"{path}.{key}", "must be a stage id")
            return None
        return value

    def integer(self, raw: dict, key: str, path: str, default: int, low: int, high: int) -> int:
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.problem(f"{path}.{key}", f"must be a whole number from {low} to {high}")
            return default
        return value

    def seconds(self, raw: dict, key: str, path: str, *, required: bool) -> int | None:
        value = raw.get(key)
        if value is None:
            if required:
                self.problem(f"{path}.{key}", "required; a number of seconds")
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SECONDS:
            self.problem(f"{path}.{key}", f"must be whole seconds from 1 to {MAX_SECONDS}")
            return None
        return value

    def timeouts(self, raw: Any, path: str, policy: str) -> Timeouts | None:
        if raw is None:
            self.problem(path, "required on a human stage: {offer, work, overall} in seconds")
            return None
        if not isinstance(raw, dict):
            self.problem(path, "must be a mapping {offer, work, overall} in seconds")
            return None
        known = {"offer", "work", "overall", "escalation"}
        for key in sorted(set(raw) - known, key=str):
            self.problem(f"{path}.{key}", f"unknown clock (known: {', '.join(sorted(known))})")
        values = {key: self.seconds(raw, key, path, required=True)
                  for key in ("offer", "work", "overall")}
        escalation = self.seconds(raw, "escalation", path, required=policy == "escalate")
        if escalation is not None and policy != "escalate":
            self.problem(f"{path}.escalation", "only with on_timeout: escalate")
        if None in values.values():
            return None
        for clock in ("offer", "work"):
            if values["overall"] < values[clock]:
                self.problem(f"{path}.overall", f"{values['overall']} is smaller than {clock} "
                             f"({values[clock]}); the overall clock must cover it")
        return Timeouts(**values, escalation=escalation)  # type: ignore[arg-type]

    def retry(self, raw: dict, path: str) -> Retry:
        if "retry" not in raw:
            return Retry()
        value = raw["retry"]
        if not isinstance(value, dict) or not value:
            self.problem(f"{path}.retry", "a Task without Retry is not allowed: give "
                         "{attempts, interval, backoff} or leave retry out for the default")
            return Retry()
        for key in sorted(set(value) - {"attempts", "interval", "backoff"}, key=str):
            self.problem(f"{path}.retry.{key}", "unknown field (known: attempts, backoff, "
                         "interval)")
        attempts = self.integer(value, "attempts", f"{path}.retry", 3, 1, 10)
        interval = self.integer(value, "interval", f"{path}.retry", 2, 1, 300)
        backoff = value.get("backoff", 2.0)
        if isinstance(backoff, bool) or not isinstance(backoff, int | float) or not (
            1 <= backoff <= 10
        ):
            self.problem(f"{path}.retry.backoff", "must be a number from 1 to 10")
            backoff = 2.0
        return Retry(attempts=attempts, interval=interval, backoff=float(backoff))

    def catch(self, raw: dict, path: str) -> str | None:
        if "catch" not in raw:
            return None
        value = raw["catch"]
        if value in (None, "", [], {}):
            self.problem(f"{path}.catch", "an empty Catch is not allowed: name the stage to "
                         "go to on failure, or leave catch out for the default failure branch")
            return None
        return self.ref(raw, "catch", path)

    def condition(self, raw: Any, path: str) -> None:
        if not isinstance(raw, dict) or not raw:
            self.problem(path, "a condition is a mapping such as {var: amount, greater_than: 10}")
            return
        if set(raw) in ({"all"}, {"any"}):
            items = next(iter(raw.values()))
            if not isinstance(items, list) or not items:
                self.problem(path, f"{next(iter(raw))} needs a non-empty list of conditions")
                return
            for index, item in enumerate(items):
                self.condition(item, f"{path}.{next(iter(raw))}[{index}]")
            return
        if set(raw) == {"not"}:
            self.condition(raw["not"], f"{path}.not")
            return
        var = raw.get("var")
        if not isinstance(var, str) or not DATA_PATH.match(var):
            self.problem(f"{path}.var", "required; a data path such as amount or "
                         "stages.review.answer.decision")
        operators = set(raw) - {"var"}
        known = set(_COMPARISONS) | {"present"}
        if len(operators) != 1 or not operators <= known:
            self.problem(path, f"needs exactly one operator of: {', '.join(sorted(known))}")
            return
        operator = operators.pop()
        value = raw[operator]
        if operator == "present" and not isinstance(value, bool):
            self.problem(f"{path}.present", "must be true or false")
        elif operator in ("equals", "not_equals") and not isinstance(value, str | int | float):
            self.problem(f"{path}.{operator}", "must be a string, number or boolean")
        elif operator not in ("present", "equals", "not_equals") and (
            isinstance(value, bool) or not isinstance(value, str | int | float)
        ):
            self.problem(f"{path}.{operator}", "must be a number or a string")

    # The graph: every target exists, every stage is reachable, nothing falls off the end.

    def graph(self, stages: list[Stage], forms: dict[str, Form]) -> None:
        ids = {s.id for s in stages}
        human_ids = {s.id for s in stages if isinstance(s, HumanStage)}
        edges: dict[str, set[str]] = {}
        for index, stage in enumerate(stages):
            path = f"stages[{index}] ({stage.id})"
            targets = self.targets(stage)
            for key, target in targets:
                if target not in ids:
                    self.problem(f"{path}.{key}", f"goes to {target!r}, which is no stage "
                                 f"(stages: {', '.join(sorted(ids))})")
            successors = {t for _key, t in targets if t in ids}
            if stage.kind not in TERMINAL_KINDS and not isinstance(stage, ChoiceStage):
                if stage.next is None:
                    if index + 1 < len(stages):
                        successors.add(stages[index + 1].id)
                    else:
                        self.problem(path, "the last stage must end the process (kind succeed "
                                     "or fail) or name its next stage")
            edges[stage.id] = successors
            if isinstance(stage, HumanStage):
                if stage.form and stage.form not in forms and stage.form not in BUILTIN_FORMS:
                    known = sorted(set(forms) | set(BUILTIN_FORMS))
                    self.problem(f"{path}.form", f"unknown form {stage.form!r} (known: "
                                 f"{', '.join(known)})")
                for other in stage.not_by:
                    if other not in human_ids or other == stage.id:
                        self.problem(f"{path}.not_by", f"{other!r} is not another human stage")
        seen, todo = set(), [stages[0].id]
        while todo:
            current = todo.pop()
            if current not in seen:
                seen.add(current)
                todo.extend(edges.get(current, ()))
        for index, stage in enumerate(stages):
            if stage.id not in seen:
                self.problem(f"stages[{index}] ({stage.id})",
                             f"unreachable: no stage leads here from {stages[0].id!r}")

    @staticmethod
    def targets(stage: Stage) -> list[tuple[str, str]]:
        return stage_targets(stage)


def stage_targets(stage: Stage) -> list[tuple[str, str]]:
    """Return the (field, stage id) pairs a stage names as where to go next."""
    found = [("next", stage.next)]
    if isinstance(stage, HumanStage):
        found += [("if_rejected", stage.if_rejected), ("if_timed_out", stage.if_timed_out)]
    if isinstance(stage, ChoiceStage):
        found += [(f"rules[{i}].next", r.next) for i, r in enumerate(stage.rules)]
        found += [("default", stage.default)]
    if isinstance(stage, AutomationStage | ProcessStage):
        found += [("catch", stage.catch)]
    return [(key, target) for key, target in found if target]


def stage_successors(spec: ProcessSpec) -> dict[str, tuple[str, ...]]:
    """Return, per stage id, the stages it may go to next, as the parser's graph has them:
    its named targets, and the following stage when it names no next (not after a choice,
    a succeed or a fail). The failure branch the compiler adds is not a stage."""
    successors: dict[str, tuple[str, ...]] = {}
    for index, stage in enumerate(spec.stages):
        targets = [target for _key, target in stage_targets(stage)]
        if (stage.kind not in TERMINAL_KINDS and not isinstance(stage, ChoiceStage)
                and stage.next is None and index + 1 < len(spec.stages)):
            targets.append(spec.stages[index + 1].id)
        successors[stage.id] = tuple(dict.fromkeys(targets))
    return successors


def _within(path: str, outer: str) -> bool:
    """Return whether data path path is outer or lies inside it ("a.b" is within "a")."""
    return path == outer or path.startswith(outer + ".")
