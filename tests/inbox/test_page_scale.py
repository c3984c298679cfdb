"""The pages at 100,000 open tasks: the same few queries as at 1,000, and keyset plans.

The open tasks are copies of one task that came in through the real intake, inserted with
one INSERT ... SELECT generate_series (the intake would take minutes for 100,000). Their
tokens are dummy bytes: nothing sends them to Step Functions. Each page's query count and
wall time, and the board's query plans, are written to test-artifacts/page-scale.txt for
the reader; times are never asserted: speed claims belong in bench/.
"""

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from accounts.models import User
from accounts.roles import Role
from inbox import board
from inbox.models import OPEN_STATES, Task, TaskState
from inbox.services.worker import task_take_next

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

SMALL, LARGE = 1_000, 100_000
# The most queries any of these pages may make, whatever the number of tasks. 13: a
# supervisor's task page also reads its execution's record, for the link to the execution's
# page (issue 16; inbox.executions.managed_task_execution, one read).
MAX_QUERIES = 13
CROWD = 20  # workers who hold the offered and in-progress copies
ARTIFACTS = Path(os.environ.get("INBOX_TEST_ARTIFACTS", Path(__file__).resolve().parents[2]
                                / "test-artifacts"))

# Every column of a copy that differs from the template task; the rest are copied as they
# are, so a column added to Task later needs no change here.
# i is the series number: i % 20 gives the state (1 in 20 offered, 1 in progress, 1
# escalated, the rest queued); skills, crowd assignees, priorities, ages and deadlines are
# spread by i as well.
COPY_COLUMNS = {
    "id": "gen_random_uuid()",
    "token_digest": "md5('scale-' || i)",
    "token_ciphertext": "'\\x00'::bytea",
    "title": "'Scale task ' || i",
    "execution_arn": "t.execution_arn || '-' || i",
    "skill_id": "(%(skills)s::bigint[])[1 + i %% 3]",
    "state": ("CASE i %% 20 WHEN 0 THEN 'offered' WHEN 1 THEN 'in_progress' "
              "WHEN 2 THEN 'escalated' ELSE 'queued' END"),
    "assignee_id": ("CASE WHEN i %% 20 IN (0, 1) THEN (%(crowd)s::bigint[])[1 + i %% "
                    f"{CROWD}] END"),
    "priority": "i %% 101",
    "version": "1",
    "created_at": "now() - make_interval(secs => i * 3)",
    "entered_at": "now() - make_interval(secs => i * 3)",
    "overall_deadline": "now() + make_interval(secs => (i * 7919) %% 864000)",
    "offer_deadline": "CASE WHEN i %% 20 = 0 THEN now() + interval '1 hour' END",
    "work_deadline": "CASE WHEN i %% 20 = 1 THEN now() + interval '2 hours' END",
}


def open_tasks_insert(*, template: Task, first: int, count: int, skills: list[int],
                      crowd: list[int]) -> None:
    """Insert count open copies of template, numbered first.. (see COPY_COLUMNS)."""
    columns = [f.column for f in Task._meta.concrete_fields]
    values = [COPY_COLUMNS.get(column, f"t.{connection.ops.quote_name(column)}")
              for column in columns]
    # Only column names of the model and the constant expressions above go into the text.
    sql = (
        f"INSERT INTO inbox_task ({', '.join(map(connection.ops.quote_name, columns))}) "  # noqa: S608
        f"SELECT {', '.join(values)} FROM inbox_task t, "
        "generate_series(%(first)s::int, %(last)s::int) AS i WHERE t.id = %(template)s"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, {"skills": skills, "crowd": crowd, "first": first,
                             "last": first + count - 1, "template": template.pk})
        # Fresh statistics, as autovacuum would give a table that grew like this.
        cursor.execute("ANALYZE inbox_task")


def visit(client: Client, path: str) -> tuple[int, float, list[dict]]:
    """Render the page; return its query count, its wall time and its queries."""
    started = time.perf_counter()
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    seconds = time.perf_counter() - started
    assert response.status_code == 200, path
    return len(queries), seconds, list(queries.captured_queries)


def board_pages(supervisor: Client) -> dict[str, str]:
    """Return the board's pages to measure: each order's first and second (keyset) page,
    and filtered ones. The second pages' cursors come from the first pages' links."""
    pages = {}
    filters = {
        "skill+state": "skill=invoice-review&state=queued",
        "unassigned": "assignee=none&sort=-created",
        "assignee": "assignee=crowd1%40example.com",
        "process+age": "process=invoice-approval&age=1h&sort=priority",
    }
    middle = Task.objects.filter(state__in=OPEN_STATES).count() // 2
    for sort in board.SORT_LABELS:
        first = f"/supervisor/?sort={sort}"
        response = supervisor.get(first)
        assert response.status_code == 200 and response.context["next_query"], sort
        pages[f"board {sort}"] = first
        pages[f"board {sort} page 2"] = f"/supervisor/?{response.context['next_query']}"
        # A page from the middle of the list, as after following Next a thousand times.
        column, descending = board.SORTS[sort]
        row = Task.objects.filter(state__in=OPEN_STATES).order_by(
            *(f"{'-' if descending else ''}{name}" for name in (column, "id")))[middle]
        after = urlencode({"sort": sort, "after": board._cursor(getattr(row, column), row.pk)})
        pages[f"board {sort} middle page"] = f"/supervisor/?{after}"
    for name, query in filters.items():
        pages[f"board {name}"] = f"/supervisor/?{query}"
    return pages


@pytest.fixture
def scene(make_worker, make_user, review_skill, approval_skill, check_skill, browser_for):
    """A worker holding one real task, a supervisor of every skill, an admin, a crowd."""
    worker = make_worker({"invoice-review": 3, "finance-approval": 3, "document-check": 3})
    supervisor = make_worker({"invoice-review": 5, "finance-approval": 5, "document-check": 5},
                             roles=(Role.SUPERVISOR,))
    crowd = User.objects.bulk_create(
        [User(email=f"crowd{n}@example.com", password="!") for n in range(CROWD)])
    return {
        "worker": worker,
        "skills": [review_skill.pk, approval_skill.pk, check_skill.pk],
        "crowd": [user.pk for user in crowd],
        "clients": {"worker": browser_for(worker), "supervisor": browser_for(supervisor),
                    "admin": browser_for(make_user(roles=(Role.ADMIN,)))},
    }


def test_pages_make_the_same_queries_at_100000_open_tasks_and_page_from_indexes(
    scene, make_task
):
    """Every page makes as many queries at 100,000 open tasks as at 1,000, at most
    MAX_QUERIES; and each board order's later pages (the second, and one from the middle)
    read an index from the cursor on: no Seq Scan on inbox_task, the sort column is an
    index condition, so a page deep in the list costs what the first one does.

    One test, so the 100,000 rows are inserted once.
    """
    template = make_task(title="Review invoice INV-1")
    held = task_take_next(worker=scene["worker"])
    assert held.pk == template.pk
    clients = scene["clients"]

    def pages() -> dict[str, tuple[Client, str]]:
        found = {
            "home": (clients["worker"], "/"),
            "task": (clients["worker"], f"/tasks/{held.pk}/"),
            "task, supervised": (clients["supervisor"], f"/tasks/{held.pk}/"),
            "board, admin": (clients["admin"], "/supervisor/"),
            "team skills": (clients["admin"], "/team/skills/"),
        }
        for name, path in board_pages(clients["supervisor"]).items():
            found[name] = (clients["supervisor"], path)
        return found

    lines = [f"{'open tasks':>10}  {'page':<30} queries  wall time"]
    captured: dict[str, tuple[str, list[dict]]] = {}

    def measure(label: str, *, warm: bool) -> dict[str, int]:
        counts = {}
        for name, (client, path) in pages().items():
            if warm:
                visit(client, path)  # the first render of a template compiles it
            counts[name], seconds, queries = visit(client, path)
            captured[name] = (path, queries)
            lines.append(f"{label:>10}  {name:<30} {counts[name]:>7}  {seconds * 1000:7.1f} ms")
        return counts

    insert: Callable[[int, int], None] = lambda first, count: open_tasks_insert(  # noqa: E731
        template=template, first=first, count=count, skills=scene["skills"],
        crowd=scene["crowd"])
    insert(1, SMALL - 1)
    assert Task.objects.filter(state__in=OPEN_STATES).count() == SMALL
    small = measure(f"{SMALL:,}", warm=True)

    started = time.perf_counter()
    insert(SMALL, LARGE - SMALL)
    lines.append(f"(inserted {LARGE - SMALL:,} open tasks in "
                 f"{time.perf_counter() - started:.1f} s)")
    assert Task.objects.filter(state__in=OPEN_STATES).count() == LARGE
    assert Task.objects.filter(state=TaskState.ESCALATED).count() == LARGE // 20
    large = measure(f"{LARGE:,}", warm=False)
    record("page-scale.txt", lines)
    assert large == small
    assert max(large.values()) <= MAX_QUERIES, large

    plans, checked = [], 0
    for name, (path, queries) in captured.items():
        if not name.startswith("board"):
            continue
        [page_query] = [q["sql"] for q in queries
                        if re.search(r'FROM "inbox_task".*LIMIT 51$', q["sql"], re.S)]
        plan = plan_of(page_query)
        plans += [f"--- {name}: {path}", plan]
        if "after=" in path:
            column = board.SORTS[parse_qs(urlsplit(path).query)["sort"][0]][0]
            assert "Seq Scan on inbox_task" not in plan, plan
            assert re.search(rf"Index Cond: .*\b{column}\b", plan), plan
            checked += 1
    record("page-scale-plans.txt", plans)
    assert checked == 2 * len(board.SORT_LABELS)


def record(name: str, lines: list[str]) -> None:
    """Write what a test measured to test-artifacts/ (not committed) for the reader."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / name).write_text("\n".join(lines) + "\n")


def plan_of(sql: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())
