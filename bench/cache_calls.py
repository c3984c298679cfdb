"""A cache call's CPU: Django's Redis backend beside config.cache.RedisCache.

Usage (needs Redis; uses its database 9 and empties it, as bench/publish.py does):
    REDIS_URL=redis://127.0.0.1:6379/5 .venv/bin/python bench/cache_calls.py \
        [--calls 2000] [--rounds 5] [--quick]

Django's backend builds a redis.Redis client per call; the inbox's makes one per
connection pool (docs/DECISIONS.md). Each way runs --calls gets and --calls counter
increments (inbox.ratelimit.counter_increment, the SendTask budget's) against the same
Redis, taking turns round by round, and this process's CPU per call is printed (median of
the rounds, with the spread).
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
    args = turns_arguments(__doc__.splitlines()[0], calls_help="calls per way, kind and round")
    redis_url = os.environ.get("REDIS_URL")
    if not redis_url:
        raise SystemExit("bench/cache_calls.py needs REDIS_URL (redis://host:port/db).")
    bench_environment()
    machine_print()
    import django

    django.setup()
    from django.core.cache.backends.redis import RedisCache as DjangoRedisCache

    from config.cache import RedisCache
    from inbox.ratelimit import counter_increment

    location = redis_url.rsplit("/", 1)[0] + f"/{REDIS_DB}"
    ways = {"Django's RedisCache": DjangoRedisCache, "config.cache.RedisCache": RedisCache}
    figures: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for name, backend in ways.items():
            cache = backend(location, {"KEY_PREFIX": "bench-cache-calls"})
            cache.get("warm")  # the connection made before the timing
            started = time.process_time()
            for number in range(args.calls):
                cache.get(f"key-{number % 50}")
            figures.setdefault((name, "get"), []).append(
                (time.process_time() - started) / args.calls * 1e6)
            started = time.process_time()
            for number in range(args.calls):
                counter_increment(cache=cache, key=f"counter-{number % 50}", timeout=5)
            figures.setdefault((name, "counter_increment"), []).append(
                (time.process_time() - started) / args.calls * 1e6)
            cache.clear()
    rows = [[name, kind, statistics.median(values), min(values), max(values)]
            for (name, kind), values in figures.items()]
    print(f"\n{args.calls:,} calls per way, kind and round; {args.rounds} rounds, taking turns")
    print(table(["backend", "call", "CPU us per call (median)", "min", "max"], rows))


if __name__ == "__main__":
    main()
