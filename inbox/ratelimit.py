"""A fixed-window rate limit shared by every process through Django's cache.

Each window (``window_seconds`` long, aligned on the wall clock) has a counter in the
cache; a call is allowed while the counter, after its increment, is at most the limit. A
batch of calls (the outbox drain's) takes its permits in one increment of the counter.
With Redis (production) the increment is Redis' own atomic INCRBY, so all web and worker
processes on all machines share one budget. The file cache (the local default) has no
atomic increment, so there the read-increment-write runs under an exclusive file lock
beside the cache files, which every local process shares. Other backends are only
serialised within one process: use Redis or the file cache with several processes.

A fixed window lets up to twice the limit through across one window boundary; callers
size the limit so that such a burst still fits the remote service's burst allowance.
"""

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from django.core.cache import caches
from django.core.cache.backends.base import BaseCache
from django.core.cache.backends.filebased import FileBasedCache
from django.core.cache.backends.redis import RedisCache
from django.core.files import locks

logger = logging.getLogger(__name__)

CACHE_ALIAS = "default"
# The one budget of SendTaskSuccess, SendTaskFailure and SendTaskHeartbeat (one token
# bucket per account and region at AWS): answers take from all of it, heartbeats only
# below settings.INBOX_HEARTBEAT_SHARE_PERCENT of each window.
SENDTASK = "sendtask"
_LOCK_FILE = "ratelimit.lock"
_process_lock = threading.Lock()


@dataclass(frozen=True)
class Permit:
    """The answer of ``rate_take``: granted or not, in which window, and how long to wait."""

    granted: bool
    window: int
    wait: float
    # How many calls were granted: all those asked, fewer at the end of a window, or 0.
    calls: int = 0


def rate_take(*, name: str, limit: int, window_seconds: float = 1.0,
              ceiling: int | None = None, count: int = 1) -> Permit:
    """Take count calls (one unless said) from the current window of the limit called name.

    As many of them are granted as the window has left (``calls``; ``granted`` when at
    least one is), taken in one increment of the counter however many they are; ``wait``
    is how long until the next window when not all were. A limit of 0 (or less) refuses
    every call. ceiling makes the caller a lesser one: it is refused, without taking
    anything, once ceiling calls of the window are taken, so the rest of the limit stays
    for the others (answers before heartbeats). If the cache fails, the calls are allowed
    (and the failure logged): the remote service's own throttling, which callers retry,
    is the backstop, and a cache outage must not stop every callback.
    """
    if count < 1:
        raise ValueError(f"rate_take needs a count of at least 1, not {count}")
    now = time.time()
    window = int(now // window_seconds)
    wait = (window + 1) * window_seconds - now
    if limit <= 0:
        return Permit(granted=False, window=window, wait=wait)
    cache = caches[CACHE_ALIAS]
    key = f"ratelimit:{name}:{window}"
    # The counter outlives its window a little, so a late increment still finds it.
    timeout = int(window_seconds) + 2
    try:
        if ceiling is not None and (cache.get(key) or 0) >= min(ceiling, limit):
            return Permit(granted=False, window=window, wait=wait)
        total = counter_increment(cache=cache, key=key, timeout=timeout, amount=count)
    except Exception as exc:
        logger.warning("Rate limit %s unavailable, allowing the call: %s", name, exc)
        return Permit(granted=True, window=window, wait=0.0, calls=count)
    # The calls taken before this one's increment were total - count: the window grants
    # what the limit has left of them. A refused call stays counted (the window is full).
    calls = max(0, min(count, limit - (total - count)))
    return Permit(granted=calls > 0, window=window, wait=0.0 if calls == count else wait,
                  calls=calls)


def store_ready() -> None:
    """Make the limits' store ready before the first call needs it, not by that call.

    The first use of the cache imports its client library and connects (Redis: about a
    tenth of a second of CPU, once per process), which a long-running sender or clock
    would otherwise pay inside its first answer. An unavailable store is logged, as
    rate_take logs it, and the process starts anyway: rate_take allows calls without it.
    """
    try:
        caches[CACHE_ALIAS].get(f"ratelimit:{SENDTASK}:ready")
    except Exception as exc:
        logger.warning("Rate limit store unavailable at start: %s", exc)


def counter_increment(*, cache: BaseCache, key: str, timeout: int | None,
                      amount: int = 1) -> int:
    """Add amount to the counter at key (created with timeout; None: never expires).

    Return the counter after the addition. Shared by every process through the cache: the
    rate limit and the metrics counters. Its cost does not depend on amount.
    """
    if isinstance(cache, RedisCache):
        # One round trip where Django's add and incr took three (SET NX, EXISTS, INCRBY),
        # atomic (MULTI/EXEC): the counter is made at 0 with its expiry if absent (an
        # existing one keeps its own), then INCRBY, which keeps the expiry. The key and the
        # value are Django's own (make_and_validate_key; its serializer stores an int as
        # one), so cache.get reads the counter. _cache is RedisCache's client, as incr uses.
        name = cache.make_and_validate_key(key)
        client = cache._cache.get_client(name, write=True)
        with client.pipeline(transaction=True) as pipe:
            pipe.set(name, 0, ex=timeout, nx=True)
            pipe.incrby(name, amount)
            return pipe.execute()[1]
    # Without an atomic increment, two processes could both read n and both write n + 1.
    with _serialised(cache):
        count = (cache.get(key) or 0) + amount
        cache.set(key, count, timeout=timeout)
        return count


@contextlib.contextmanager
def _serialised(cache: BaseCache) -> Iterator[None]:
    """Hold an exclusive lock for a read-modify-write on cache, across processes if possible."""
    if not isinstance(cache, FileBasedCache):
        with _process_lock:
            yield
        return
    directory = Path(cache._dir)
    directory.mkdir(parents=True, exist_ok=True)
    # flock: held per open file, so it also excludes other threads of this process.
    with open(directory / _LOCK_FILE, "a") as handle:
        locks.lock(handle, locks.LOCK_EX)
        try:
            yield
        finally:
            locks.unlock(handle)
