from django.db import migrations, models

GENESIS_HASH = "0" * 64

# Every existing task's head is the hash of its latest event (tasks without one keep the
# genesis hash). One correlated UPDATE, the same SQL on PostgreSQL and SQLite.
BACKFILL = """
UPDATE inbox_task SET chain_head = COALESCE(
    (SELECT e.hash FROM inbox_taskevent e WHERE e.task_id = inbox_task.id
      ORDER BY e.version DESC LIMIT 1), chain_head)
"""


class Migration(migrations.Migration):

    dependencies = [
        ("inbox", "0008_outbox_withdrawn"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="chain_head",
            field=models.CharField(db_default=GENESIS_HASH, default=GENESIS_HASH,
                                   editable=False, max_length=64),
        ),
        migrations.RunSQL(BACKFILL, reverse_sql=migrations.RunSQL.noop),
    ]
