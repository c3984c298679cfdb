"""Load processes for bench/sweeper.py besides the takers: intake and callbacks.

    DATABASE_URL=... python bench/_load.py intake RATE
    DATABASE_URL=... python bench/_load.py callbacks THREADS

intake: RATE envelopes a second through inbox.services.intake.intake_message (validation,
encryption, the task and its first event in one transaction: the intake's own work; the
SQS receive and delete around it are not made). callbacks: THREADS workers take the next
task, complete it (the outbox row) and send its callback with
inbox.services.callback.callback_send, which the bench's Step Functions endpoint (a closed
port) refuses at once: the sender's claim, attempt and backoff, without the network.
Each runs until SIGTERM, then prints how many it did.
"""

import json
import signal
import sys
import threading
import time
import uuid

from _common import workers_create

# The load's own pull queue (bench/sweeper.py makes it): the intake fills it and the
# callback senders work it, so neither touches the tasks whose deadlines are measured.
LOAD_SKILL = "load-pull"


def _intake(rate: float, stopping: threading.Event) -> int:
    from accounts.models import Skill
    from inbox.services.intake import intake_message

    slug = Skill.objects.get(slug=LOAD_SKILL).slug
    done = 0
    while not stopping.is_set():
        started = time.monotonic()
        body = {
            "kind": "human-task/v1", "taskToken": f"load-{uuid.uuid4()}-{uuid.uuid4()}",
            "execution": f"arn:aws:states:us-east-1:123456789012:execution:load:{uuid.uuid4().hex}",
            "stage": "review", "enteredAt": "2026-12-01T00:00:00Z",
            "process": {"name": "load", "version": 1}, "skill": slug,
            "title": "Load", "form": "approve-reject", "input": {"n": done}, "priority": 50,
            "timeouts": {"offer": 300, "work": 1800, "overall": 86400}, "onTimeout": "abort",
        }
        outcome = intake_message(message={"MessageId": str(uuid.uuid4()), "Body": json.dumps(body),
                                          "Attributes": {"ApproximateReceiveCount": "1"}})
        if outcome != "created":
            raise SystemExit(f"the intake load's envelope was {outcome}")
        done += 1
        time.sleep(max(0.0, 1 / rate - (time.monotonic() - started)))
    return done


def _callbacks(threads: int, stopping: threading.Event) -> int:
    from accounts.models import Skill, User
    from config.errors import InboxError
    from inbox.models import Outbox
    from inbox.services.callback import callback_send
    from inbox.services.worker import task_complete, task_take_next

    load = Skill.objects.get(slug=LOAD_SKILL).pk
    ids = workers_create(threads, skills_of=lambda i: [load],
                         prefix=f"sender{time.time_ns()}-", capacity=5)
    counts = [0] * threads

    def send(index: int, worker: User) -> None:
        from django.db import connection

        try:
            while not stopping.is_set():
                try:
                    task = task_take_next(worker=worker)
                    task_complete(worker=worker, task_id=task.pk,
                                  answer={"decision": "approve"})
                except InboxError:
                    time.sleep(0.05)
                    continue
                outbox = Outbox.objects.filter(task=task).values_list("pk", flat=True).first()
                callback_send(outbox_id=outbox)
                counts[index] += 1
        finally:
            connection.close()

    workers = list(User.objects.filter(pk__in=ids).order_by("pk"))
    pool = [threading.Thread(target=send, args=(i, w)) for i, w in enumerate(workers)]
    for thread in pool:
        thread.start()
    stopping.wait()
    for thread in pool:
        thread.join(timeout=30)
    return sum(counts)


def main() -> None:
    import django

    django.setup()
    kind, amount = sys.argv[1], float(sys.argv[2])
    stopping = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    print("ready", flush=True)
    done = _intake(amount, stopping) if kind == "intake" else _callbacks(int(amount), stopping)
    print(f"{kind} {done}", flush=True)


if __name__ == "__main__":
    main()
