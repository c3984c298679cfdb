"""What one Celery message costs its sender, beside a bare Redis push of the same size.

Usage (needs Redis; uses its database 9 and empties it at the end):
    REDIS_URL=redis://127.0.0.1:6379/5 .venv/bin/python bench/publish.py \
        [--calls 2000] [--rounds 5] [--quick]

An offer of a push queue's task to the next worker is one Celery message
(inbox.effects.enqueue, sent after the change commits), as a decision's callback was one
until the callbacks' sender sent the outbox rows themselves (manage.py callbacks_run).
This bench sends that message the product's way and, as the floor, LPUSHes a payload of
the same length with redis-py, taking turns round by round, and prints this process's
CPU per message (median of the rounds). Nothing consumes the messages.
"""

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import bench_environment, machine_print, table, turns_arguments

REDIS_DB = 9


def main() -> None:
    args = turns_arguments(__doc__.splitlines()[0], calls_help="messages per way and round")
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        raise SystemExit("bench/publish.py needs REDIS_URL (redis://host:port/db).")
    broker = redis_url.rsplit("/", 1)[0] + f"/{REDIS_DB}"
    bench_environment(broker=broker)
    machine_print()
    import django

    django.setup()
    import redis
    from kombu.utils.json import dumps

    from config.celery import app
    from inbox import effects

    name = effects.TASK_NAMES[effects.Effect.DISPATCH]
    task_id = "0b4ae8a2-5a4e-4d3c-9a57-1f1f3c2b9a10"  # a task id's length
    client = redis.Redis.from_url(broker)
    client.flushdb()
    # The floor's payload: as long as the message the product's way sends.
    with app.producer_or_acquire() as producer:
        app.tasks[name].apply_async((task_id,), producer=producer)
    [queued] = [client.lindex(key, 0) for key in client.keys("*") if client.type(key) == b"list"]
    payload = dumps({"pad": "x" * max(0, len(queued) - 12)})

    def product(i: int) -> None:
        effects.enqueue(name, task_id)

    def floor(i: int) -> None:
        client.lpush("bench-floor", payload)

    spent: dict[str, list[float]] = {"product": [], "floor": []}
    try:
        for _ in range(args.rounds):
            for way, send in (("product", product), ("floor", floor)):
                started = time.process_time()
                for i in range(args.calls):
                    send(i)
                spent[way].append((time.process_time() - started) * 1000 / args.calls)
    finally:
        client.flushdb()
    sent, bare = statistics.median(spent["product"]), statistics.median(spent["floor"])
    print(f"\nCPU of this process per message, ms (median of {args.rounds} rounds of "
          f"{args.calls:,}), message of {len(queued):,} bytes:")
    print(table(["way", "ms per message", "vs the floor"], [
        ["an offer's message (inbox.effects.enqueue)", f"{sent:.3f}",
         f"{sent / bare:.1f}x"],
        ["bare LPUSH of as many bytes (redis-py)", f"{bare:.3f}", "1.0x"],
    ]))


if __name__ == "__main__":
    main()
