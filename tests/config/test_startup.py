"""A web process builds its URL tables before its first request."""

import gc
import importlib

import pytest
from django.urls import clear_url_caches, get_resolver


@pytest.fixture(autouse=True)
def _unfrozen():
    """The entry points reloaded here freeze this test process's objects (web_warm): give
    them back to the collector, so later tests' cycles are collected as usual."""
    yield
    gc.unfreeze()


@pytest.mark.parametrize("module", ["config.asgi", "config.wsgi"])
def test_the_web_entry_points_build_the_url_tables_before_serving(module):
    clear_url_caches()  # a resolver as a fresh process has it
    try:
        assert not get_resolver()._populated
        importlib.reload(importlib.import_module(module))
        assert get_resolver()._populated
    finally:
        clear_url_caches()


@pytest.mark.postgres  # Django pools PostgreSQL's connections only
def test_the_web_entry_points_make_the_connection_pool_before_serving(monkeypatch):
    from django.db import connections

    connection = connections["default"]
    pools = type(connection)._connection_pools
    monkeypatch.setitem(connection.settings_dict, "OPTIONS",
                        {**connection.settings_dict["OPTIONS"],
                         "pool": {"min_size": 1, "max_size": 2}})
    monkeypatch.setitem(connection.settings_dict, "CONN_MAX_AGE", 0)
    saved = dict(pools)
    pools.clear()
    try:
        importlib.reload(importlib.import_module("config.asgi"))
        assert connection.alias in pools  # made, not opened: no connection taken
    finally:
        pools.clear()
        pools.update(saved)


def test_the_web_entry_points_import_the_brokers_transport_before_serving():
    """A fresh process: the transport's module (the Redis client's, under Redis) is
    imported by the entry point, not by the first request that enqueues a message."""
    import subprocess
    import sys

    from django.conf import settings

    probe = (
        "import sys; from kombu.transport import TRANSPORT_ALIASES; "
        "from kombu.utils.url import url_to_parts; "
        "from config.celery import app; "
        "module = TRANSPORT_ALIASES[url_to_parts(app.conf.broker_url).scheme]"
        ".split(':')[0]; "
        "before = module in sys.modules; "
        "import config.wsgi; "
        "print(before, module in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"], (settings.CELERY_BROKER_URL,
                                                     done.stdout)


def test_the_web_entry_points_leave_what_they_made_out_of_the_collectors_reach():
    """A fresh process: after the entry point, its objects are frozen (gc.freeze), so a
    full collection during a request does not walk the modules, settings and URL tables."""
    import subprocess
    import sys

    probe = ("import gc; before = gc.get_freeze_count(); import config.wsgi; "
             "print(before, gc.get_freeze_count(), len(gc.get_objects()))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    before, frozen, tracked = map(int, done.stdout.split())
    assert before == 0
    # Most of what the entry point made is frozen; little is left for the collector.
    assert frozen > 50_000 and tracked < frozen / 10, (frozen, tracked)
