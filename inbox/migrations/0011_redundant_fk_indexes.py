"""Drop two indexes that others cover: Task.assignee's (task_by_assignee, on assignee and
state, leads with it) and TaskEvent.task's (task_event_version_unique, on task and version).

Each change of a task's hands and each event appended writes one index fewer. The foreign
keys stay as they are: only the indexes go (Django's AlterField would drop and re-add each
constraint, validating it against every row under a lock), by the names Django gave them
on both PostgreSQL and SQLite.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

INDEXES = [
    ("inbox_task_assignee_id_0a39bf68", "inbox_task", "assignee_id"),
    ("inbox_taskevent_task_id_d65e3152", "inbox_taskevent", "task_id"),
]


class Migration(migrations.Migration):

    dependencies = [
        ("inbox", "0010_take_next_function"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="task",
                    name="assignee",
                    field=models.ForeignKey(
                        blank=True, db_index=False, null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="held_tasks", to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name="taskevent",
                    name="task",
                    field=models.ForeignKey(
                        db_index=False, on_delete=django.db.models.deletion.PROTECT,
                        related_name="events", to="inbox.task"),
                ),
            ],
            database_operations=[
                migrations.RunSQL(f'DROP INDEX IF EXISTS "{name}"',
                                  f'CREATE INDEX "{name}" ON "{table}" ("{column}")')
                for name, table, column in INDEXES
            ],
        ),
    ]
