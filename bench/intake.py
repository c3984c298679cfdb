"""Intake: envelopes per second from the SQS queue into tasks, for one intake worker.

Usage (PostgreSQL and Redis; makes and drops its own database):
    .venv/bin/python bench/intake.py [--envelopes 5000] [--depth 100] [--quick]

It runs on the PostgreSQL server of DATABASE_URL (default: local, user postgres) in a
database of its own, inbox_bench_d2_intake_<pid>, and uses REDIS_URL (default Redis
database 5).

One real execution of a one-human-stage process runs on the local emulator; its envelope
is the template of M copies, each with a fresh random token of the same length and its own
execution ARN (the intake never calls Step Functions, so the tokens need not be live). The
copies go on the emulator's intake queue twice, and each time the queue is emptied:

1. raw: a plain loop of ReceiveMessage (10, through processes.aws) and DeleteMessageBatch;
2. intake: ``inbox.services.intake.intake_poll``, the function the Celery intake task calls, in a
   loop until the chunk's envelopes are tasks (intake_poll receives until a receive comes
   back empty; wait_seconds=0, so no empty long poll is timed).

The queue is filled and emptied in chunks of --depth envelopes, and only the emptying is
timed: moto's SQS scans its whole queue on every receive and every delete, so with
thousands waiting at once the emulator, not the loop, would set the pace (AWS does not).
The two loops take turns chunk by chunk, the one that goes first alternating: the
emulator's speed drifts by a tenth or more over a minute on this machine (seen in runs
that timed the raw loop before and after the intake), and taking turns lets the drift
fall on both alike. The ratio over each half of the chunks is printed too.

It prints envelopes/s of each, the intake's share of the raw limit, the CPU time of this
process per envelope (the emulator runs in its own process and is not counted), and how
many SQS calls each loop made and how long it waited for them (botocore's before-call
and after-call events on the shared client).
"""

import argparse
import copy
import json
import os
import secrets
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _d2_common as common
from _common import goal_print, machine_print, scratch_database, table

QUEUE_EMPTY_ATTRIBUTES = ("ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envelopes", type=int, default=5000, help="M, per round")
    parser.add_argument("--depth", type=int, default=100,
                        help="envelopes on the queue at a time")
    parser.add_argument("--quick", action="store_true", help="500 envelopes")
    args = parser.parse_args()
    count = 500 if args.quick else args.envelopes

    common.environment()
    with (common.var_dir_kept_on_failure(),
          scratch_database(f"inbox_bench_d2_intake_{os.getpid()}"), common.emulator()):
        common.logs_to_file()
        run(count=count, depth=args.depth)


def run(*, count: int, depth: int) -> None:
    from django.conf import settings

    from inbox.models import IntakeError, Task
    from processes import aws

    common.process_ready()
    url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    template = _real_envelope(url=url)
    print(f"Intake benchmark: {count:,} envelopes per round, {depth} on the queue at a time, "
          "one intake worker")
    machine_print()
    print(f"Template: a real envelope of the emulator, token of {len(template['taskToken'])} "
          f"characters, body of {len(json.dumps(template))} bytes")

    calls = _SqsCalls()
    loops = (("raw receive+delete", _raw_drain), ("intake_poll", _intake_drain))
    # Per loop: envelopes, seconds, CPU seconds, SQS calls, SQS seconds, and the seconds
    # of each half of the chunks.
    totals = {name: [0, 0.0, 0.0, 0, 0.0, [0.0, 0.0]] for name, _ in loops}
    starts = range(0, count, depth)
    for turn, start in enumerate(starts):
        size = min(depth, count - start)
        for name, drain in (loops if turn % 2 == 0 else loops[::-1]):
            _fill(url=url, template=template, count=size)
            calls.reset()
            cpu_started, started = time.process_time(), time.perf_counter()
            calls.on = True
            done = drain(url=url, expected=size)
            calls.on = False
            elapsed = time.perf_counter() - started
            total = totals[name]
            total[0] += done
            total[1] += elapsed
            total[2] += time.process_time() - cpu_started
            total[3] += calls.count
            total[4] += calls.seconds
            total[5][turn * 2 // len(starts)] += elapsed
            _check_empty(url=url)
    rounds = []
    for name, (done, elapsed, cpu, sqs_calls, sqs_seconds, _) in totals.items():
        if done != count:
            raise RuntimeError(f"{name}: {done} envelopes handled, {count} expected")
        rounds.append((name, count / elapsed, elapsed, cpu * 1000 / count,
                       sqs_calls / count, sqs_seconds / elapsed * 100))

    created = Task.objects.count()
    if created != count or IntakeError.objects.exists():
        raise RuntimeError(f"{created} tasks created of {count}; intake errors: "
                           f"{IntakeError.objects.count()}")
    print()
    print(table(["loop", "envelopes/s", "seconds", "CPU ms/envelope (this process)",
                 "SQS calls/envelope", "% of time in SQS calls"], rounds))
    halves = [raw / intake for raw, intake in zip(totals["raw receive+delete"][5],
                                                  totals["intake_poll"][5], strict=True)]
    ratio = rounds[1][1] / rounds[0][1]
    print(f"\nintake / raw limit, taking turns chunk by chunk: {ratio:.3f} "
          f"({rounds[1][1]:.1f} vs {rounds[0][1]:.1f} envelopes/s); over the first and the "
          f"second half of the chunks: {halves[0]:.3f}, {halves[1]:.3f}")
    goal_print("intake / plain receive + delete, envelopes per second", ratio, 0.8, unit="x")


class _SqsCalls:
    """Count the SQS calls of the shared client and the seconds spent in them, while on."""

    def __init__(self) -> None:
        from processes import aws

        self.on = False
        self.reset()
        self._started = 0.0
        events = aws.client(service="sqs").meta.events
        events.register("before-call.sqs", self._before)
        events.register("after-call.sqs", self._after)

    def reset(self) -> None:
        self.count, self.seconds = 0, 0.0

    def _before(self, **kwargs: object) -> None:
        self._started = time.perf_counter()

    def _after(self, **kwargs: object) -> None:
        if self.on:
            self.count += 1
            self.seconds += time.perf_counter() - self._started


def _real_envelope(*, url: str) -> dict:
    """Start one execution and return the envelope its human stage put on the queue."""
    from processes import aws

    [arn] = common.executions_start(count=1, prefix="template")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for message in aws.messages_receive(url=url, wait_seconds=1):
            aws.message_delete(url=url, receipt_handle=message["ReceiptHandle"])
            body = json.loads(message["Body"])
            if body.get("execution") == arn:
                return body
    raise RuntimeError("the template execution put no envelope on the intake queue in 30 s")


def _fill(*, url: str, template: dict, count: int) -> None:
    """Put count copies of template on the queue, each with a fresh token and execution."""
    from processes import aws

    sqs = aws.client(service="sqs")
    prefix = template["execution"].rsplit(":", 1)[0]
    token_chars = len(template["taskToken"])
    for start in range(0, count, 10):
        entries = []
        for number in range(start, min(start + 10, count)):
            body = copy.deepcopy(template)
            body["taskToken"] = secrets.token_urlsafe(token_chars)[:token_chars]
            body["execution"] = f"{prefix}:{uuid.uuid4()}"
            entries.append({"Id": str(number), "MessageBody": json.dumps(body)})
        answer = sqs.send_message_batch(QueueUrl=url, Entries=entries)
        if answer.get("Failed"):
            raise RuntimeError(f"SendMessageBatch failed: {answer['Failed']}")


def _raw_drain(*, url: str, expected: int) -> int:
    """Receive 10 at a time and delete them in one batch, until a receive is empty."""
    from processes import aws

    sqs = aws.client(service="sqs")
    handled = 0
    while messages := aws.messages_receive(url=url, max_messages=10, wait_seconds=0):
        answer = sqs.delete_message_batch(QueueUrl=url, Entries=[
            {"Id": str(number), "ReceiptHandle": message["ReceiptHandle"]}
            for number, message in enumerate(messages)
        ])
        if answer.get("Failed"):
            raise RuntimeError(f"DeleteMessageBatch failed: {answer['Failed']}")
        handled += len(messages)
    return handled


def _intake_drain(*, url: str, expected: int) -> int:
    """Call intake_poll until it created the expected tasks (or received nothing); return
    how many it created.

    intake_poll itself receives until a receive comes back empty, as the raw loop does: one
    call empties the chunk unless its budget ran out, and calling it again to be sure would
    add a GetQueueUrl and an empty receive per chunk that the raw loop does not make.
    """
    from inbox.services.intake import intake_poll

    created = 0
    while created < expected:
        counts = intake_poll(wait_seconds=0, budget_seconds=25)
        if not any(counts.values()):
            return created
        if any(number for outcome, number in counts.items() if outcome != "created"):
            raise RuntimeError(f"intake_poll: {counts}")
        created += counts["created"]
    return created


def _check_empty(*, url: str) -> None:
    from processes import aws

    attributes = aws.queue_attributes(url=url)
    left = {name: attributes.get(name) for name in QUEUE_EMPTY_ATTRIBUTES}
    if any(value != "0" for value in left.values()):
        raise RuntimeError(f"the queue is not empty after the round: {left}")


if __name__ == "__main__":
    main()
