"""Migrations that move data: run forward from the state before them on real rows."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_HEAD = [("inbox", "0008_outbox_withdrawn")]
HEAD = [("inbox", "0009_task_chain_head")]


def test_the_chain_head_migration_names_each_tasks_latest_event(make_task, make_worker):
    """Tasks made before the head existed get their latest event's hash; events link on."""
    from inbox.history import events_verify
    from inbox.models import GENESIS_HASH, Task, TaskEvent
    from inbox.services.worker import task_release, task_take_next

    worker = make_worker({"invoice-review": 3})
    taken, untouched = make_task(), make_task()
    task_take_next(worker=worker)
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_HEAD)
    executor.loader.build_graph()
    executor.migrate(HEAD)
    heads = dict(Task.objects.values_list("pk", "chain_head"))
    for task in (taken, untouched):
        latest = TaskEvent.objects.filter(task=task).order_by("-version").first()
        assert heads[task.pk] == latest.hash != GENESIS_HASH
    released = task_release(worker=worker, task_id=taken.pk)
    assert events_verify(task=released) is None
