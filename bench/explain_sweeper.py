"""Print PostgreSQL's plans for the sweeper's due-task queries over a large task table.

Usage (PostgreSQL only; makes and drops its own scratch database):
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/inbox_bench .venv/bin/python \
        bench/explain_sweeper.py [--tasks 1000000] [--due 1000]

Rows are inserted with one INSERT ... SELECT generate_series (the planner only needs
their shape and numbers; the intake path is measured by the intake benchmark). The plans
are those of the exact statements inbox.services.clock.deadlines_sweep runs on PostgreSQL
(inbox.lifecycle.clock_statement, one per clock), run with ANALYZE in a transaction that
is rolled back.
"""

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DJANGO_DEBUG", "true")

SEED = """
INSERT INTO inbox_task (id, state, version, token_ciphertext, token_digest, execution_arn,
    stage, process_name, process_version, skill_id, min_proficiency, title, form, input,
    priority, exclude_workers_of, offer_seconds, work_seconds, overall_seconds, on_timeout,
    entered_at, created_at, assignee_id, offer_deadline, work_deadline, overall_deadline,
    reason)
SELECT gen_random_uuid(),
       CASE WHEN n %% 10 < 6 THEN 'completed' WHEN n %% 10 < 8 THEN 'queued'
            WHEN n %% 10 < 9 THEN 'in_progress' ELSE 'offered' END,
       1, '\\x00'::bytea, md5(n::text) || md5((n + 1)::text), 'arn:exec:' || n, 'review',
       'bench', 1, %(skill)s, 1, 'Task ' || n, 'approve-reject', '{}'::jsonb, n %% 100,
       '[]'::jsonb, 300, 1800, 86400, 'abort', now(), now(),
       CASE WHEN n %% 10 >= 8 THEN %(worker)s END,
       CASE WHEN n %% 10 = 9 THEN now() + interval '1 hour' END,
       CASE WHEN n %% 10 = 8 THEN now() + interval '1 hour' END,
       CASE WHEN n <= %(due)s THEN now() - interval '1 second'
            ELSE now() + interval '1 day' END,
       ''
FROM generate_series(1, %(tasks)s) AS n
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--due", type=int, default=1000)
    args = parser.parse_args()

    import django

    django.setup()
    from django.conf import settings
    from django.db import connection, transaction
    from django.test.utils import setup_databases, teardown_databases
    from django.utils import timezone

    if connection.vendor != "postgresql":
        sys.exit("PostgreSQL only: set DATABASE_URL=postgres://...")
    old = setup_databases(verbosity=0, interactive=False)
    try:
        from accounts.models import Skill, User
        from inbox.lifecycle import clock_statement
        from inbox.services.clock import BATCH, REASONS

        skill = Skill.objects.create(slug="bench", name="Bench")
        worker = User.objects.create_user(email="bench@example.com", password=None)
        started = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(SEED, {"skill": skill.pk, "worker": worker.pk, "tasks": args.tasks,
                                  "due": args.due})
            cursor.execute("ANALYZE inbox_task")
        print(f"{args.tasks:,} tasks ({args.due:,} overall deadlines due) seeded in "
              f"{time.perf_counter() - started:.1f} s on {settings.DATABASES['default']['NAME']}")
        now = timezone.now()
        for name in ("offer", "work", "overall"):
            sql, params = clock_statement(clock=name, due=now, batch=BATCH,
                                          reasons=REASONS[name])
            print(f"\n--- {name} clock")
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SET LOCAL jit = off")  # as the sweep runs it
                cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}", params)
                for (line,) in cursor.fetchall():
                    print(line)
                transaction.set_rollback(True)  # ANALYZE ran the writes: none is kept
    finally:
        teardown_databases(old, verbosity=0)


if __name__ == "__main__":
    main()
