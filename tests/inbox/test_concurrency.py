from collections import Counter

import pytest

from config.errors import NotFound
from inbox.lifecycle import IllegalTransition
from inbox.models import Task, TaskEvent, TaskState
from inbox.services.worker import NothingToTake, task_claim, task_take_next
from tests.concurrency import race

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


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
                taken.append(task_take_next(worker=worker).pk)
            except NothingToTake:
                return taken

    taken_by_each, errors = race(take_until_empty, takers)
    taken = [pk for mine in taken_by_each for pk in mine]
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
        return task_claim(worker=worker, task_id=task.pk).assignee_id

    winners, errors = race(claim, racers)
    assert len(winners) == 1
    assert len(errors) == 7
    # A loser that read the task before the winner committed is refused under the row
    # lock (409); one that read it after no longer sees it, since it is someone else's
    # (404, as every task a worker may not see). Nothing else refuses a racer.
    assert all((isinstance(e, IllegalTransition)
                and "Cannot claim a task that is in progress" in str(e))
               or (isinstance(e, NotFound) and str(e) == "No such task.")
               for e in errors), [f"{type(e).__name__}: {e}" for e in errors]
    assert TaskEvent.objects.filter(task_id=task.pk, action="claim").count() == 1


def test_racing_decisions_on_one_read_write_one_decision(make_task, make_worker):
    """Eight completes and releases, each judged on the same unlocked read (the conditional
    update path), race: exactly one changes the task; the others are judged again under
    the lock and refused, or (a complete) answered as the decision already made."""
    from inbox.models import Outbox, TaskEvent
    from inbox.services.worker import task_complete, task_release, task_take_next

    worker = make_worker({"invoice-review": 3})
    make_task()
    task = task_take_next(worker=worker)

    def decide(n):
        if n % 2:
            return task_release(worker=worker, task_id=task.pk).state
        return task_complete(worker=worker, task_id=task.pk,
                             answer={"decision": "approve"}).state

    winners, errors = race(decide, list(range(8)))
    events = list(TaskEvent.objects.filter(task=task).order_by("version"))
    assert [e.action for e in events][:2] == ["receive", "take_next"]
    assert len(events) == 3, [e.action for e in events]
    assert events[2].action in ("complete", "release")
    assert Outbox.objects.filter(task=task).count() == (events[2].action == "complete")
    assert len(winners) + len(errors) == 8 and winners
