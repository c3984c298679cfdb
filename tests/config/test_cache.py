"""config.cache.RedisCache: Django's Redis cache, each connection pool's client made once."""

import threading

import pytest
import redis

from config.cache import RedisCache


@pytest.fixture
def cache(redis_cache_of):
    return redis_cache_of(RedisCache)


def test_every_call_shares_one_client_where_django_made_one_each(cache, monkeypatch):
    made = []
    real_init = redis.Redis.__init__

    def init(self, *args, **kwargs):
        made.append(self)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", init)
    cache.set("a", {"n": 1}, timeout=30)
    assert cache.get("a") == {"n": 1}
    assert cache.add("b", 1, timeout=30) and not cache.add("b", 2, timeout=30)
    assert cache.incr("b", 4) == 5
    cache.delete("a")
    assert cache.get("a") is None and cache.get_many(["b"]) == {"b": 5}

    assert len(made) == 1  # Django's own backend made one per call: 8 here
    assert cache._cache.get_client(write=True) is made[0]


def test_threads_share_the_client_and_each_sees_the_others_writes(cache):
    clients, errors = set(), []

    def work(number: int) -> None:
        try:
            for round_ in range(20):
                cache.set(f"t{number}", round_, timeout=30)
                assert cache.get(f"t{number}") == round_
            clients.add(id(cache._cache.get_client()))
        except Exception as exc:  # reported below, in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(clients) == 1
    assert cache.get_many([f"t{n}" for n in range(8)]) == {f"t{n}": 19 for n in range(8)}
