"""Run the clocks: a process of their own, so no other work ever delays a deadline."""

import logging
import os
import signal
import threading
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from config.errors import ExternalServiceError
from inbox import ratelimit
from inbox.loops import every, loop_run
from inbox.services.clock import deadlines_wait, executions_check, heartbeats_send
from inbox.services.upstream import status_poll
from processes import aws

logger = logging.getLogger("inbox.clock")

# Without its status queue (not bootstrapped yet), the upstream loop asks again this late.
NO_QUEUE_PAUSE_SECONDS = 30.0


class Command(BaseCommand):
    help = (
        "Run the clocks until stopped: apply offer, work and overall timeouts as they fall "
        "due (sleeping until the next deadline), send the due heartbeats, cancel the open "
        "tasks of executions that ended upstream (status events from EventBridge, and a "
        "slow DescribeExecution backstop). One thread each, so a slow Step Functions or SQS "
        "call never delays a deadline. Several may run at once (each due row is claimed "
        "once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--once", action="store_true",
                            help="One round of each, then stop (for scripts and tests).")

    def handle(self, *args: Any, **options: Any) -> None:
        _priority(settings.INBOX_CLOCK_NICE)
        # The clocks call Step Functions (the backstop, heartbeats) and SQS (status events).
        aws.clients_build("stepfunctions", "sqs")
        ratelimit.store_ready()  # the heartbeats' SendTask* budget's, before the first beat
        stop = threading.Event()
        loops: dict[str, Callable[[], float]] = {
            # Sleeps until the next deadline, at most INBOX_CLOCK_MAX_WAIT_SECONDS.
            "deadlines": lambda: deadlines_wait(most=settings.INBOX_CLOCK_MAX_WAIT_SECONDS),
            "heartbeats": every(settings.INBOX_HEARTBEATS_EVERY_SECONDS, heartbeats_send),
            # Long-polls the status queue without pause: an ended execution is heard of
            # within a second of AWS's event.
            "upstream": _upstream,
            "executions": every(settings.INBOX_EXECUTIONS_CHECK_EVERY_SECONDS, lambda:
                                 executions_check(batch=settings.INBOX_EXECUTIONS_CHECK_RATE
                                                  * settings.INBOX_EXECUTIONS_CHECK_EVERY_SECONDS)),
        }
        if options["once"]:
            loops["upstream"] = lambda: _upstream(wait_seconds=0)
            for name, step in loops.items():
                step()
                self.stdout.write(f"{name}: one round done")
            return
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: stop.set())
        threads = [threading.Thread(target=loop_run, args=(name, step, stop),
                                    name=f"clock-{name}") for name, step in loops.items()]
        for thread in threads:
            thread.start()
        self.stdout.write(f"Clock running: {', '.join(loops)}", ending="\n")
        self.stdout.flush()
        while not stop.wait(0.5):
            pass
        for thread in threads:
            thread.join()
        self.stdout.write("Clock stopped.")


def _priority(niceness: int) -> None:
    """Run at niceness (below 0: ahead of the machine's other processes), if allowed.

    On a busy machine the clocks get their CPU first; lowering niceness needs privilege
    (root, CAP_SYS_NICE), so without it the clock runs at its usual priority and says so.
    """
    if not niceness:
        return
    try:
        os.nice(niceness - os.nice(0))
    except PermissionError:
        logger.warning("Cannot run the clock at niceness %d (no privilege to raise priority):"
                       " deadlines may run late on a busy machine", niceness)


def _upstream(*, wait_seconds: int = 20) -> float:
    """Handle the status events that arrive within one long poll; poll again at once."""
    try:
        status_poll(wait_seconds=wait_seconds, budget_seconds=wait_seconds + 1)
    except ExternalServiceError as exc:
        if exc.retryable:
            raise
        logger.warning("The status queue %s cannot be read (%s): run manage.py aws_bootstrap; "
                       "until then only the DescribeExecution backstop notices ended "
                       "executions", settings.INBOX_STATUS_QUEUE, exc.message)
        return NO_QUEUE_PAUSE_SECONDS
    return 0.0
