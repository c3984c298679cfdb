"""Ceilings: the longest a stage, and so a whole execution, may run (pure, no I/O).

Every compiled state machine has a top-level TimeoutSeconds, so a forgotten branch cannot
wait for the year Step Functions allows. It is the spec's own ``timeout`` when it sets
one (at least the longest single stage's ceiling), or else the sum of the stages'
ceilings along the longest path from the first stage, plus ``EXECUTION_MARGIN_SECONDS``.
A spec whose stages can repeat (a loop) or wait until a time in the data has no such sum
and must set its own. A sum above the year is refused, not clamped: the stages' own
clocks would promise more than Step Functions keeps (docs/DECISIONS.md, issue 16).

A stage's ceiling (docs/PROCESSES.md, "Ceilings"):

- human: its TimeoutSeconds (overall + escalation + ``BACKSTOP_MARGIN_SECONDS``) plus the
  delays of its send's Retry: SendMessage fails at once, before any wait, so a retry
  adds its delay, never a second wait;
- automation: ``timeout`` for every attempt (the first and each retry: a Lambda error
  may come at any time of an attempt) plus the delays between them;
- process: the child version's own ceiling (its TimeoutSeconds) plus the delays of its
  start's Retry (StartExecution fails at once; a child that fails or times out is not
  retried);
- wait: its seconds; until a time in the data: no ceiling;
- choice, succeed, fail: none of their own.
"""

import math
from collections.abc import Mapping

from processes.spec import (
    MAX_SECONDS,
    AutomationStage,
    HumanStage,
    ProcessSpec,
    ProcessStage,
    Retry,
    SpecError,
    Stage,
    WaitStage,
    stage_successors,
)

# Step Functions' own clock on a human stage fires this long after the inbox's overall
# (and escalation) clock, so the inbox always decides first and Step Functions is only
# the backstop.
BACKSTOP_MARGIN_SECONDS = 60
# Added to the sum of the stages' ceilings: the choices, the copies of shown fields and
# the failure branch's notice between and after the stages take seconds, not minutes.
EXECUTION_MARGIN_SECONDS = 300
# The cap on each delay between attempts of a compiled Retry (MaxDelaySeconds).
MAX_DELAY_SECONDS = 60
# The Retry a human stage's send gets for its transient errors.
SEND_RETRY = Retry()

# The execution ceilings of child process versions, by (name, version): their
# TimeoutSeconds as deployed.
ChildCeilings = Mapping[tuple[str, int], int]


def human_timeout_seconds(stage: HumanStage) -> int:
    """Return a human stage's TimeoutSeconds: a little above the inbox's own clocks."""
    return stage.timeouts.overall + (stage.timeouts.escalation or 0) + BACKSTOP_MARGIN_SECONDS


def retry_delays(retry: Retry) -> int:
    """Return the longest that the delays between a Retry's attempts add up to.

    Delay n is interval * backoff ** n, capped at MAX_DELAY_SECONDS; full jitter only
    ever shortens it.
    """
    return sum(min(math.ceil(retry.interval * retry.backoff ** n), MAX_DELAY_SECONDS)
               for n in range(retry.attempts))


def stage_ceiling(stage: Stage, *, children: ChildCeilings) -> int | None:
    """Return the longest stage may run, in seconds, or None when nothing bounds it.

    Raise KeyError for a process stage whose child version's ceiling children lacks.
    """
    if isinstance(stage, HumanStage):
        return human_timeout_seconds(stage) + retry_delays(SEND_RETRY)
    if isinstance(stage, AutomationStage):
        return stage.timeout * (stage.retry.attempts + 1) + retry_delays(stage.retry)
    if isinstance(stage, ProcessStage):
        return children[(stage.process, stage.version)] + retry_delays(stage.retry)
    if isinstance(stage, WaitStage):
        return stage.seconds
    return 0


def stages_on_loops(spec: ProcessSpec) -> set[str]:
    """Return the ids of the stages an execution may enter more than once."""
    successors = stage_successors(spec)
    return {stage.id for stage in spec.stages
            if stage.id in _reachable(successors, successors[stage.id])}


def execution_timeout(spec: ProcessSpec, *, children: ChildCeilings) -> int:
    """Return the top-level TimeoutSeconds of spec's state machine (module docstring).

    Raise SpecError, naming the field, when a child's ceiling is unknown, the spec's own
    timeout is shorter than a stage, or no sum bounds an execution and the spec sets none.
    """
    source = spec.source
    ceilings: dict[str, int | None] = {}
    unknown = []
    for index, stage in enumerate(spec.stages):
        try:
            ceilings[stage.id] = stage_ceiling(stage, children=children)
        except KeyError:
            assert isinstance(stage, ProcessStage)
            unknown.append(
                f"{source}: stages[{index}] ({stage.id}).process: the execution ceiling of "
                f"{stage.process} v{stage.version} is not known: deploy it first (its "
                "TimeoutSeconds bounds this stage)")
    if unknown:
        raise SpecError(unknown)
    bounded = [(seconds, stage_id) for stage_id, seconds in ceilings.items()
               if seconds is not None]
    longest, longest_id = max(bounded, default=(0, ""), key=lambda item: item[0])
    if spec.timeout is not None:
        if spec.timeout < longest:
            raise SpecError([
                f"{source}: timeout: {spec.timeout:,} s is shorter than stage {longest_id}'s "
                f"ceiling ({longest:,} s); a whole execution must be allowed at least its "
                "longest stage"])
        return spec.timeout
    successors = stage_successors(spec)
    loop = _loop(spec.stages[0].id, successors)
    if loop:
        raise SpecError([
            f"{source}: timeout: required, because stages {' → '.join(loop)} can repeat, "
            "so no sum of their ceilings bounds an execution: set timeout to the seconds a "
            f"whole execution may run (at most {MAX_SECONDS:,})"])
    for index, stage in enumerate(spec.stages):
        if ceilings[stage.id] is None:
            assert isinstance(stage, WaitStage)
            raise SpecError([
                f"{source}: timeout: required, because stages[{index}] ({stage.id}) waits "
                f"until the time at {stage.until}, which nothing bounds: set timeout to the "
                f"seconds a whole execution may run (at most {MAX_SECONDS:,})"])
    total, path = _longest_path(spec.stages[0].id, successors, ceilings)
    total += EXECUTION_MARGIN_SECONDS
    if total > MAX_SECONDS:
        raise SpecError([
            f"{source}: timeout: the ceilings of stages {' → '.join(path)} add up to "
            f"{total:,} s with the {EXECUTION_MARGIN_SECONDS} s margin, more than the "
            f"{MAX_SECONDS:,} s (a year) Step Functions runs an execution: shorten their "
            f"clocks, or set timeout (at most {MAX_SECONDS:,}) to end executions sooner"])
    return total


def _reachable(successors: Mapping[str, tuple[str, ...]], start: tuple[str, ...]) -> set[str]:
    seen: set[str] = set()
    todo = list(start)
    while todo:
        current = todo.pop()
        if current not in seen:
            seen.add(current)
            todo.extend(successors.get(current, ()))
    return seen


def _loop(first: str, successors: Mapping[str, tuple[str, ...]]) -> list[str]:
    """Return a loop reachable from first as [a, b, ..., a], or [] when there is none."""
    path: list[str] = []
    done: set[str] = set()

    def visit(stage_id: str) -> list[str]:
        if stage_id in path:
            return [*path[path.index(stage_id):], stage_id]
        if stage_id in done:
            return []
        path.append(stage_id)
        for following in successors.get(stage_id, ()):
            found = visit(following)
            if found:
                return found
        path.pop()
        done.add(stage_id)
        return []

    return visit(first)


def _longest_path(first: str, successors: Mapping[str, tuple[str, ...]],
                  ceilings: Mapping[str, int | None]) -> tuple[int, list[str]]:
    """Return the largest sum of ceilings along a path from first (the graph has no loop),
    and the stages with a ceiling of their own on that path."""
    best: dict[str, tuple[int, list[str]]] = {}

    def visit(stage_id: str) -> tuple[int, list[str]]:
        if stage_id not in best:
            tail = max((visit(following) for following in successors.get(stage_id, ())),
                       default=(0, []), key=lambda item: item[0])
            own = ceilings[stage_id] or 0
            best[stage_id] = (own + tail[0], [stage_id, *tail[1]] if own else tail[1])
        return best[stage_id]

    return visit(first)
