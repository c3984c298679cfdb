"""The benches' CPU accounting (bench/_common.py): what bench/take_next.py divides by the
claims of each closed-loop phase and bench/cost_per_task.py by the tasks of a run."""

import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from _common import TICKS, machine_cpu_ms, proc_stats, tree_cpu_ms

# Burns CPU until its own process time has grown by 0.3 s, says so, then waits for stdin.
_BURNER = """
import sys, time
start = time.process_time()
while time.process_time() - start < 0.3:
    pass
print("burnt", flush=True)
sys.stdin.read()
"""


def test_a_tree_adds_its_roots_and_every_descendant_and_nothing_else():
    stats = {1: (0, 100), 2: (1, 50), 3: (2, 25), 4: (0, 1000), 5: (4, 7)}
    assert tree_cpu_ms([1], stats) == 175 * 1000 / TICKS
    assert tree_cpu_ms([2, 5], stats) == 82 * 1000 / TICKS
    assert tree_cpu_ms([1, 2], stats) == 175 * 1000 / TICKS  # a root under another: once
    assert tree_cpu_ms([99], stats) == 0  # gone before the stats were read


def test_a_child_burning_cpu_shows_in_its_tree_in_its_parents_and_in_the_machine():
    busy_before, _ = machine_cpu_ms()
    child = subprocess.Popen([sys.executable, "-c", _BURNER], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline() == "burnt\n"
        stats = proc_stats()
        assert stats[child.pid][0] == os.getpid()
        assert tree_cpu_ms([child.pid], stats) >= 250  # 0.3 s, in whole ticks
        assert tree_cpu_ms([os.getpid()], stats) >= tree_cpu_ms([child.pid], stats)
    finally:
        child.communicate("")
    busy_after, idle_after = machine_cpu_ms()
    assert busy_after - busy_before >= 250
    assert idle_after > 0


def test_the_machine_counters_only_grow():
    first = machine_cpu_ms()
    time.sleep(0.05)
    second = machine_cpu_ms()
    assert second[0] >= first[0] and second[1] >= first[1]


def test_the_cpu_table_gives_each_paths_median_its_spread_and_its_ratio_round_by_round():
    """bench/take_next.py --cpu: a round off by half (a shared machine) moves no median,
    and each round's service total is set against the raw claim's of the same round (the
    ratio of the medians would be 2.29x here)."""
    from take_next import cpu_rows

    rows = cpu_rows({"service call": [(0.2, 0.4), (0.3, 0.6), (0.2, 0.6)],
                     "raw SQL claim": [(0.1, 0.2), (0.15, 0.3), (0.1, 0.25)]})
    assert rows == [
        ["service call", "0.200 (0.200-0.300)", "0.600 (0.400-0.600)",
         "0.800 (0.600-0.900), 2.00x raw"],
        ["raw SQL claim", "0.100 (0.100-0.150)", "0.250 (0.200-0.300)",
         "0.350 (0.300-0.450), 1.00x raw"],
    ]


def test_the_in_process_request_answers_the_handlers_body_and_stops_on_any_other_status(db):
    """bench/take_next.py --cpu sends its HTTP rows' requests to Django's WSGI handler in
    its own process: the body of a 200, and a stop naming the request otherwise."""
    import json

    import pytest
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.signals import request_finished, request_started
    from django.db import close_old_connections
    from take_next import _wsgi_call

    handler = WSGIHandler()
    # As Django's test client does: a request's start and end must not close the
    # connection that holds the test's transaction (they would: the tests' CONN_MAX_AGE
    # is 0).
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        assert json.loads(_wsgi_call(handler, "GET", "/healthz"))["status"] == "ok"
        with pytest.raises(SystemExit, match=r"POST /api/inbox/tasks/next/ answered 401"):
            _wsgi_call(handler, "POST", "/api/inbox/tasks/next/", token="inbox_" + "0" * 64)
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


def test_callgrinds_count_is_read_from_its_summary_and_a_run_without_one_stops():
    import pytest
    from take_next import callgrind_collected

    stderr = ("==4711== Callgrind, a call-graph generating cache profiler\n"
              "==4711== Events    : Ir\n==4711== Collected : 4541985760\n==4711==\n"
              "==4711== I   refs:      4,541,985,760\n")
    assert callgrind_collected(stderr, what="x") == 4_541_985_760
    with pytest.raises(SystemExit, match=r"--instructions take 100 failed \(exit 1\)"):
        callgrind_collected(stderr, what="--instructions take 100", returncode=1)
    with pytest.raises(SystemExit, match="failed"):
        callgrind_collected("==1== I   refs: 12\n", what="x")
