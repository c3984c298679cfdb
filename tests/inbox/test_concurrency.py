import threading
from collections import Counter

import pytest
from django.db import connection

from inbox import dispatch
from inbox.models import Task, TaskEvent, TaskState

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _race(workers, action) -> tuple[list, list]:
    results, errors = [], []
    lock = threading.Lock()
    barrier = threading.Barrier(len(workers))

    def run(worker):
        try:
            barrier.wait()
            mine = action(worker)
            with lock:
                results.extend(mine)
        except Exception as exc:  # collected and asserted by the caller
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results, errors


def test_sixteen_takers_take_two_hundred_tasks_each_exactly_once(make_task, make_worker):
    for _ in range(200):
        make_task()
    takers = [make_worker({"invoice-review": 3}, email=f"taker{i}@example.com")
              for i in range(16)]
    for taker in takers:
        taker.capacity = 100
        taker.save()

    def take_until_empty(worker):
        taken = []
        while True:
            try:
                taken.append(dispatch.task_take_next(worker=worker).pk)
            except dispatch.NothingToTake:
                return taken

    taken, errors = _race(takers, take_until_empty)
    assert errors == []
    assert len(taken) == 200 and len(set(taken)) == 200
    assert Task.objects.filter(state=TaskState.IN_PROGRESS).count() == 200
    per_task = Counter(TaskEvent.objects.filter(action="take_next").values_list("task_id",
                                                                               flat=True))
    assert set(per_task.values()) == {1}


def test_two_workers_claiming_one_task_exactly_one_wins(make_task, make_worker):
    task = make_task()
    racers = [make_worker({"invoice-review": 3}) for _ in range(8)]

    def claim(worker):
        return [dispatch.task_claim(worker=worker, task_id=task.pk).assignee_id]

    winners, errors = _race(racers, claim)
    assert len(winners) == 1
    assert len(errors) == 7
    assert all("Cannot claim a task that is in progress" in str(e) for e in errors)
