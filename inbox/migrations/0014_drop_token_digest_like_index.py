"""Drop the pattern index Django made beside the task token digest's unique index.

On PostgreSQL Django gives every unique or indexed varchar a second index with
varchar_pattern_ops, for LIKE 'prefix%'. Nothing looks a digest up by prefix: the intake
and the callbacks find a task by its whole digest, which the unique index answers. Yet
every change of a task that is not a HOT update (each take, each decision: they change
indexed columns) wrote an entry in both, at a random place in each, the digest being
random. Dropping it took 0.06 ms of the server's CPU off each such change (0.25 ms
instead of 0.31 for the take, 0.18 instead of 0.24 for the bench's raw claim: the
function and the claim each run 1,000 times in one PL/pgSQL loop, docs/BENCHMARKS.md).

The model's state does not know of this index (Django names it outside the state), so an
AlterField of token_digest would make it again; tests/inbox/test_migrations.py fails if
inbox_task carries a pattern index. SQLite never had one.
"""

from django.db import migrations

NAME = "inbox_task_token_digest_fc8d78ce_like"


def _on_postgresql(sql: str):
    def run(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)
    return run


class Migration(migrations.Migration):
    dependencies = [("inbox", "0013_task_migration")]

    operations = [
        migrations.RunPython(
            _on_postgresql(f'DROP INDEX IF EXISTS "{NAME}"'),
            _on_postgresql(f'CREATE INDEX IF NOT EXISTS "{NAME}" ON "inbox_task" '
                           '("token_digest" varchar_pattern_ops)'),
            elidable=False),
    ]
