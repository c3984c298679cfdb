"""Helpers of the intake, callbacks and cost-per-task benchmarks (bench/intake.py and others).

What all benchmarks share (scratch database, percentiles, tables, the machine) is in
bench/_common.py; this adds what these three need besides: the local Step Functions
emulator (moto in server mode, started with ``manage.py emulator`` on a free port, as
tests/conftest.py does), other child processes (gunicorn, Celery), a one-human-stage
process and its executions.

``environment`` must run before Django is imported: it fills the environment that the
script and every process it starts (emulator, gunicorn, Celery) share.
"""

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from _common import bench_environment, free_port

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# A one-human-stage process: the intake envelope and the callback are the real ones.
SPEC = """
process: bench-review
version: 1
description: One human stage, for the benchmarks.
stages:
  - id: review
    kind: human
    skill: bench-review
    title: "Review {ref}"
    form: approve-reject
    priority: 50
    timeouts: {offer: 300, work: 1800, overall: 86400}
    on_timeout: abort
    if_rejected: rejected
    if_timed_out: timed-out
    show: [ref]
  - id: approved
    kind: succeed
  - id: rejected
    kind: fail
    error: Bench.Rejected
    cause: A reviewer rejected it.
  - id: timed-out
    kind: fail
    error: Bench.TimedOut
    cause: Nobody finished in time.
"""
SKILL = "bench-review"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/postgres"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/5"


def environment(*, broker: str = "memory://") -> None:
    """Fill os.environ for a production-like run against the emulator (before Django).

    _common.bench_environment's settings (DEBUG off, throwaway keys), plus: DATABASE_URL's
    server (default local PostgreSQL), Redis (default database 5) for the cache that
    holds the shared SendTask rate limit and the intake lock, the given Celery broker
    (REDIS_URL for a real worker), the emulator's free port, INFO logging as in
    production, and a scratch INBOX_VAR_DIR.
    """
    env = os.environ
    env.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    env.setdefault("REDIS_URL", DEFAULT_REDIS_URL)
    env.setdefault("LOG_LEVEL", "INFO")
    env.setdefault("INBOX_VAR_DIR", tempfile.mkdtemp(prefix="inbox-bench-d2-"))
    bench_environment(broker=env["REDIS_URL"] if broker == "redis" else broker)
    env["INBOX_EMULATOR_PORT"] = str(free_port())
    env["DJANGO_EMAIL_BACKEND"] = "django.core.mail.backends.locmem.EmailBackend"


def logs_to_file() -> Path:
    """Send this process's log lines to a file (as costly as the console, and quieter)."""
    path = Path(os.environ["INBOX_VAR_DIR"]) / "bench.log"
    stream = open(path, "a")
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(stream)
    return path


@contextlib.contextmanager
def var_dir_kept_on_failure() -> Iterator[None]:
    """Remove the scratch INBOX_VAR_DIR after a run; keep it (and say where) if it failed."""
    path = Path(os.environ["INBOX_VAR_DIR"])
    try:
        yield
    except BaseException:
        print(f"This run's files (bench.log: this process's log lines) are in {path}",
              file=sys.stderr)
        raise
    if path.name.startswith("inbox-bench-d2-"):
        shutil.rmtree(path, ignore_errors=True)


class Children:
    """Processes started for a benchmark, each in its own process group, stopped together."""

    def __init__(self) -> None:
        self.started: dict[str, subprocess.Popen] = {}
        self.output: dict[str, list[str]] = {}

    def start(self, name: str, args: list[str], *, ready: str | None = None,
              timeout: float = 90, env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start args (env: variables set for it besides this process's); with ready,
        wait until a line of its output contains it."""
        child = subprocess.Popen(
            args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            bufsize=1, start_new_session=True, env={**os.environ, **(env or {})},
        )
        self.started[name] = child
        lines = self.output[name] = []
        assert child.stdout is not None
        if ready:
            deadline = time.monotonic() + timeout
            while True:
                line = child.stdout.readline()
                if line:
                    lines.append(line)
                    if ready in line:
                        break
                if child.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"{name} did not start:\n" + "".join(lines[-40:]))
        # Keep reading, so a chatty child never blocks on a full pipe; the tail is kept.
        threading.Thread(target=self._drain, args=(child, lines), daemon=True).start()
        return child

    @staticmethod
    def _drain(child: subprocess.Popen, lines: list[str]) -> None:
        assert child.stdout is not None
        for line in child.stdout:
            lines.append(line)
            del lines[:-200]

    def check(self) -> None:
        """Raise if a child has exited (with the end of its output)."""
        for name, child in self.started.items():
            if child.poll() is not None:
                raise RuntimeError(f"{name} exited with code {child.returncode}:\n"
                                   + "".join(self.output[name][-40:]))

    def stop(self) -> None:
        """Stop the children, newest first (the emulator outlives its clients)."""
        for child in reversed(list(self.started.values())):
            if child.poll() is None:
                child.terminate()
                try:
                    child.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    pass
            try:
                # Its whole group: a Celery pool process or a gunicorn worker left behind.
                os.killpg(child.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            child.wait()
        self.started.clear()


@contextlib.contextmanager
def emulator() -> Iterator[Children]:
    """Run the emulator (the project's own command, which creates the intake queues).

    Yield the Children, to which more processes may be added; all stop on exit.
    """
    children = Children()
    try:
        children.start("emulator", [PYTHON, "manage.py", "emulator"], ready="Emulator ready")
        yield children
    finally:
        children.stop()


def process_ready() -> int:
    """Deploy the one-stage bench process and create its (pull) skill; return the skill's id."""
    from accounts.services import skill_ensure
    from processes.services import process_deploy

    process_deploy(text=SPEC, source="bench")
    return skill_ensure(slug=SKILL, name="Bench review").pk


def executions_start(*, count: int, prefix: str) -> list[str]:
    """Start count executions of the bench process (the real start service); return ARNs."""
    from processes.services import process_start

    arns = []
    for number in range(count):
        execution, _ = process_start(name="bench-review", business_key=f"{prefix}-{number}",
                                     input={"ref": f"{prefix}-{number}"})
        arns.append(execution.execution_arn)
    return arns


def executions_check(arns: Sequence[str], *, status: str = "SUCCEEDED",
                     timeout: float = 60) -> None:
    """Raise unless every execution reaches status within timeout (they run on their own)."""
    from processes import aws

    deadline = time.monotonic() + timeout
    pending = list(arns)
    while pending:
        still = []
        for arn in pending:
            described = aws.execution_describe(execution_arn=arn)
            if described["status"] == "RUNNING":
                still.append(arn)
            elif described["status"] != status:
                raise RuntimeError(f"execution {arn} ended {described['status']}: "
                                   f"{described.get('error')}")
        pending = still
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"{len(pending)} execution(s) still RUNNING after {timeout} s")
        if pending:
            time.sleep(0.5)


def tasks_wait(*, count: int, timeout: float, poll: bool) -> float:
    """Wait until count tasks exist (running the intake here if poll); return the seconds."""
    from inbox.models import IntakeError, Task
    from inbox.services.intake import intake_poll

    started = time.monotonic()
    while Task.objects.count() < count:
        if IntakeError.objects.exists():
            raise RuntimeError(f"the intake refused messages: "
                               f"{list(IntakeError.objects.values_list('problems', flat=True))}")
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"only {Task.objects.count()} of {count} tasks after {timeout} s")
        if poll:
            intake_poll(wait_seconds=1, budget_seconds=5)
        else:
            time.sleep(0.2)
    return time.monotonic() - started
