"""Tell the callbacks' sender when an answer is written: NOTIFY inbox_outbox.

A statement that inserts outbox rows (a decision, the clocks' aborts in one statement, an
intake's or an admin's) and an admin's requeue of a dead row (dead to pending) notify the
channel once per statement; PostgreSQL delivers it when the transaction commits, folds the
same notification of one transaction into one, and drops it on a rollback. The
notification carries nothing: the sender (inbox.wakeup, manage.py callbacks_run) reads the
outbox itself. SQLite has no NOTIFY: there the sender wakes on its own every
INBOX_CALLBACKS_MAX_WAIT_MS.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION inbox_outbox_wake() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('inbox_outbox', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER inbox_outbox_wake_insert AFTER INSERT ON inbox_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION inbox_outbox_wake();
CREATE TRIGGER inbox_outbox_wake_requeue AFTER UPDATE OF status ON inbox_outbox
    FOR EACH ROW WHEN (NEW.status = 'pending' AND OLD.status IS DISTINCT FROM 'pending')
    EXECUTE FUNCTION inbox_outbox_wake();
"""

DROP = """
DROP TRIGGER IF EXISTS inbox_outbox_wake_requeue ON inbox_outbox;
DROP TRIGGER IF EXISTS inbox_outbox_wake_insert ON inbox_outbox;
DROP FUNCTION IF EXISTS inbox_outbox_wake();
"""


def _on_postgresql(sql: str):
    def run(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql, params=None)
    return run


class Migration(migrations.Migration):
    dependencies = [("inbox", "0014_drop_token_digest_like_index")]

    operations = [
        migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP), elidable=False),
    ]
