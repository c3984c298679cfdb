"""Migrations that move data: run forward from the state before them on real rows."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_HEAD = [("inbox", "0008_outbox_withdrawn")]
HEAD = [("inbox", "0009_task_chain_head")]


@pytest.fixture(autouse=True)
def migrated_to_latest():
    """Leave the database at the latest migrations: the tests after these ones need the
    schema (and 0010's take-next function) every other test runs on."""
    yield
    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes())


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


def test_the_covered_foreign_key_indexes_are_gone_and_their_constraints_stay():
    """Migration 0011: no index on assignee alone or on an event's task alone; the
    composite indexes that cover them, and both foreign keys, are still there."""
    with connection.cursor() as cursor:
        tasks = connection.introspection.get_constraints(cursor, "inbox_task")
        events = connection.introspection.get_constraints(cursor, "inbox_taskevent")

    def indexed(constraints: dict, columns: list[str]) -> list[str]:
        return [name for name, c in constraints.items()
                if c["index"] and not c["primary_key"] and c["columns"] == columns]
    assert indexed(tasks, ["assignee_id"]) == []
    assert indexed(events, ["task_id"]) == []
    assert "task_by_assignee" in tasks
    assert tasks["task_by_assignee"]["columns"] == ["assignee_id", "state"]
    assert events["task_event_version_unique"]["columns"] == ["task_id", "version"]
    assert any(c["foreign_key"] == ("accounts_user", "id") and c["columns"] == ["assignee_id"]
               for c in tasks.values())
    assert any(c["foreign_key"] == ("inbox_task", "id") and c["columns"] == ["task_id"]
               for c in events.values())


@pytest.mark.postgres  # Django makes pattern indexes on PostgreSQL only
def test_the_task_table_carries_no_pattern_index_and_the_digest_stays_unique():
    """Migration 0014: the digest's varchar_pattern_ops index is gone (an AlterField of
    token_digest would make it again: this fails then); its unique index stays."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s",
                       ["inbox_task"])
        indexes = dict(cursor.fetchall())
    assert [name for name, sql in indexes.items() if "pattern_ops" in sql] == []
    assert "UNIQUE" in indexes["inbox_task_token_digest_key"]
    assert "(token_digest)" in indexes["inbox_task_token_digest_key"]


@pytest.mark.postgres
def test_the_pattern_index_migration_goes_back_and_forth():
    executor = MigrationExecutor(connection)
    executor.migrate([("inbox", "0013_task_migration")])
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s",
                       ["inbox_task_token_digest_fc8d78ce_like"])
        assert cursor.fetchone()[0] == 1
    executor.loader.build_graph()
    executor.migrate([("inbox", "0014_drop_token_digest_like_index")])
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_indexes WHERE indexname = %s",
                       ["inbox_task_token_digest_fc8d78ce_like"])
        assert cursor.fetchone()[0] == 0
