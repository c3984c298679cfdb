"""What the ORM's compile costs on the hot reads and writes, and what is left after it.

Usage (PostgreSQL only; makes and drops its own database, inbox_bench_orm_compile):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python \
        bench/orm_compile.py [--calls 2000] [--rounds 5] [--quick]

Each hot statement is run three ways, one after the other in this process, and timed by
this process's CPU (the server's is not counted: the three send the same statement):

- "ORM": the queryset or save() built and compiled on every call, as the code was
  before config.compiled and inbox.bulk's one-row writes;
- "product": what the product runs now (the SQL compiled once per shape, or written once
  per model and columns, then run with each call's values);
- "statement": the same SQL text and parameters sent through Django's cursor, nothing
  built: the floor for any code that goes through Django's connection.

The statements: access_task (every request of a task), a task's history (every task
page and API answer), the tasks a delivered callback closes and a transition's locked
read (FOR UPDATE, each in its transaction), a transition's conditional UPDATE, its
event's INSERT, and a batch's events' INSERT (bulk_create before 2026-12-07). The ways take
turns round by round (--rounds), so the machine's drift falls on all alike; the median
over rounds is printed.
"""

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (
    bench_environment,
    bench_version_record,
    machine_print,
    scratch_database,
    skills_create,
    table,
    tasks_insert,
    turns_arguments,
    workers_create,
)

DATABASE = "inbox_bench_orm_compile"
# Events in one batch insert: an intake receive's (at most 10 messages).
BATCH = 10


def main() -> None:
    args = turns_arguments(__doc__.splitlines()[0], calls_help="calls per way and round")
    bench_environment()
    machine_print()
    with scratch_database(DATABASE):
        rows = run(args)
    print(f"\nCPU of this process per call, ms (median of {args.rounds} rounds of "
          f"{args.calls:,} calls each):")
    print(table(["statement", "ORM, compiled each call", "product", "statement alone",
                 "product / alone", "ORM / product"], rows))


def run(args: argparse.Namespace) -> list[list[str]]:
    from django.db import connection, transaction
    from django.db.models import OuterRef, Subquery
    from django.utils import timezone

    from accounts.models import User, WorkerSkill
    from config.rows import _update_sql
    from inbox.bulk import _insert_sql, _row_insert_sql, row_insert, row_update, rows_insert
    from inbox.lifecycle import _LOCKED_WITH_PROFICIENCY
    from inbox.models import Task, TaskEvent
    from inbox.selectors import (
        _ACCESS_READ,
        _HISTORY_READ,
        _filtered,
        access_task,
        task_history,
        visibility_for,
    )
    from inbox.services.callback import _CLOSING_READ

    [skill] = skills_create(1)
    bench_version_record()
    with connection.cursor() as cursor:
        tasks_insert(cursor, count=10_000, skill_id=str(skill), history=True)
        cursor.execute("ANALYZE")
    [worker_id] = workers_create(1, skills_of=lambda i: [skill])
    worker = User.objects.get(pk=worker_id)
    task = Task.objects.filter(skill_id=skill).order_by("created_at").first()
    task.events_read = None  # read the history, as every page but a take's answer does

    def access_orm() -> None:
        # access_task before config.compiled: the policy's queryset built on each call.
        tasks = _filtered(visibility_for(user=worker), view=True)
        tasks.select_related("skill", "assignee").annotate(
            actor_proficiency=WorkerSkill.objects.filter(
                worker_id=worker.pk, skill_id=OuterRef("skill_id")).values("proficiency")[:1],
        ).get(pk=task.pk)

    def shape_sql(read, key, **values) -> Callable[[], None]:
        """The statement alone: the SQL and parameters the compiled read sends."""
        with transaction.atomic():  # a locking read compiles only in a transaction
            sql, params = read.statement(key, **values)

        def alone() -> None:
            with connection.cursor() as cursor:
                cursor.execute(sql, params)
                cursor.fetchall()
        return alone

    visibility = visibility_for(user=worker)
    # The shape of access_task's read without the history (a page's read; the API's
    # answers read the history with it since 2026-12-07).
    access_key = (visibility.everything, visibility.supervisor, visibility.worker, "view",
                  False)

    def closing(read: Callable[[], None]) -> Callable[[], None]:
        def in_transaction() -> None:
            with transaction.atomic():
                read()
        return in_transaction

    # The writes run in one transaction per round, rolled back: the table stays as it was.
    fields = ["state", "version", "chain_head", "assignee"]
    task.assignee_id = worker.pk

    def update_orm() -> None:
        Task.objects.filter(pk=task.pk, version=task.version).update(**{
            Task._meta.get_field(name).attname: getattr(task, Task._meta.get_field(
                name).attname) for name in fields})

    update_params = [task.state, task.version, task.chain_head, worker.pk, task.pk,
                     task.version]

    def update_alone() -> None:
        with connection.cursor() as cursor:
            cursor.execute(_update_sql(Task, connection.vendor, tuple(fields),
                                       (Task._meta.pk.name, "version")), update_params)

    versions = iter(range(1_000, 10**9))

    def event() -> TaskEvent:
        return TaskEvent(task_id=task.pk, version=next(versions), action="note",
                         from_state="queued", to_state="queued", actor_id=worker.pk,
                         actor_label="bench", reason="", data={"n": 1}, at=timezone.now(),
                         prev_hash="0" * 64, hash="1" * 64)

    insert_fields = [f for f in TaskEvent._meta.concrete_fields if f is not TaskEvent._meta.pk]

    def insert_alone() -> None:
        row = event()
        with connection.cursor() as cursor:
            cursor.execute(_row_insert_sql(TaskEvent, connection.vendor, True), [
                f.get_db_prep_save(f.pre_save(row, True), connection) for f in insert_fields])
            cursor.fetchone()

    def batch() -> list[TaskEvent]:
        return [event() for _ in range(BATCH)]

    def batch_alone() -> None:
        rows = batch()
        with connection.cursor() as cursor:
            cursor.execute(_insert_sql(TaskEvent, True), [
                [f.get_db_prep_save(f.pre_save(row, True), connection) for row in rows]
                for f in insert_fields])
            cursor.fetchall()

    cases = [
        ("access_task (a request of a task)", False,
         access_orm, lambda: access_task(user=worker, task_id=task.pk),
         shape_sql(_ACCESS_READ, access_key, user_id=worker.pk, task_id=task.pk)),
        ("a task's history (its page, an API answer)", False,
         lambda: list(task.events.order_by("version")), lambda: task_history(task=task),
         shape_sql(_HISTORY_READ, "all", task_id=task.pk)),
        ("a delivered callback's tasks, FOR UPDATE (with its transaction)", False,
         closing(lambda: Task.objects.select_for_update().filter(pk__in={task.pk}).defer(
             "input", "input_order").order_by("pk").in_bulk()),
         closing(lambda: _CLOSING_READ.run("all", task_ids=[task.pk])),
         closing(shape_sql(_CLOSING_READ, "all", task_ids=[task.pk]))),
        ("a transition's locked read (a claim, a supervisor's action)", False,
         closing(lambda: Task.objects.select_for_update(of=("self",)).select_related(
             "skill", "assignee").annotate(actor_proficiency=Subquery(
                 WorkerSkill.objects.filter(worker_id=worker.pk, skill_id=OuterRef(
                     "skill_id")).values("proficiency")[:1])).filter(pk=task.pk).first()),
         closing(lambda: _LOCKED_WITH_PROFICIENCY.run("all", task_id=task.pk,
                                                     actor_id=worker.pk)),
         closing(shape_sql(_LOCKED_WITH_PROFICIENCY, "all", task_id=task.pk,
                           actor_id=worker.pk))),
        ("a transition's conditional UPDATE", True,
         update_orm, lambda: row_update(task, fields, version=task.version), update_alone),
        ("a transition's event INSERT", True,
         lambda: event().save(force_insert=True), lambda: row_insert(event()),
         insert_alone),
        (f"a batch's {BATCH} events INSERT (an intake receive, a batch of transitions)", True,
         lambda: TaskEvent.objects.bulk_create(batch()),
         lambda: rows_insert(TaskEvent, batch()), batch_alone),
    ]
    rows = []
    for name, writes, *ways in cases:
        times: list[list[float]] = [[] for _ in ways]
        for _ in range(args.rounds):
            for way, spent in zip(ways, times, strict=True):
                spent.append(_per_call(way, args.calls, writes=writes))
        orm, product, alone = (statistics.median(spent) for spent in times)
        rows.append([name, f"{orm:.3f}", f"{product:.3f}", f"{alone:.3f}",
                     f"{product / alone:.2f}x", f"{orm / product:.1f}x"])
    return rows


def _per_call(way: Callable[[], None], calls: int, *, writes: bool) -> float:
    """Return the CPU ms of this process per call of way. A way that writes runs in one
    transaction, rolled back after; one that reads runs as a request does (its own)."""
    import contextlib

    from django.db import transaction

    with transaction.atomic() if writes else contextlib.nullcontext():
        way()  # warm: a shape compiled, a statement prepared
        started = time.process_time()
        for _ in range(calls):
            way()
        spent = (time.process_time() - started) * 1000 / calls
        if writes:
            transaction.set_rollback(True)
    return spent


if __name__ == "__main__":
    main()
