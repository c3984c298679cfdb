"""On PostgreSQL, refuse every UPDATE and DELETE of a task event: history is append-only.

The hash chain (inbox.history) makes an edit evident; this trigger makes one impossible
for the application's database role, short of disabling the trigger (which needs the
table's owner, and leaves the hash chain to tell). TRUNCATE is not covered: test runs
flush tables with it. SQLite (development and the default test run) has no such trigger.
"""

from django.db import migrations

FORBID = """
CREATE OR REPLACE FUNCTION inbox_task_event_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'inbox_taskevent is append-only: % of event % refused', TG_OP, OLD.id
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER task_event_append_only
    BEFORE UPDATE OR DELETE ON inbox_taskevent
    FOR EACH ROW EXECUTE FUNCTION inbox_task_event_append_only();
"""
ALLOW = """
DROP TRIGGER IF EXISTS task_event_append_only ON inbox_taskevent;
DROP FUNCTION IF EXISTS inbox_task_event_append_only();
"""


def _on_postgresql(sql: str):
    def run(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            # No parameters: the % in the function body is PL/pgSQL, not a placeholder.
            schema_editor.execute(sql, params=None)
    return run


class Migration(migrations.Migration):
    dependencies = [("inbox", "0004_board_indexes")]

    operations = [
        migrations.RunPython(_on_postgresql(FORBID), _on_postgresql(ALLOW), elidable=False),
    ]
