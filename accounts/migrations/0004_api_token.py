"""API tokens of django-rest-knox (only a digest of each); DRF's plain-text tokens dropped.

rest_framework.authtoken is no longer installed, and Django leaves the tables of a removed
app in place: its authtoken_token table, which holds every old token in plain text, is
dropped here. Those tokens stop working; their users create new ones (docs/DECISIONS.md).
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0003_audit_event'),
    ]

    operations = [
        migrations.RunSQL("DROP TABLE IF EXISTS authtoken_token",
                          reverse_sql=migrations.RunSQL.noop),
        migrations.CreateModel(
            name='ApiToken',
            fields=[
                ('token_key', models.CharField(db_index=True, max_length=25)),
                ('created', models.DateTimeField(auto_now_add=True)),
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('digest', models.CharField(max_length=128, unique=True)),
                ('expiry', models.DateTimeField(help_text='After this, the token is refused.')),
                ('name', models.CharField(help_text="Its user's label, e.g. ci or laptop.", max_length=64)),
                ('scope', models.CharField(choices=[('read', 'Read: look at what I may see, change nothing'), ('work', 'Work: read, and take and answer my tasks'), ('supervise', 'Supervise: work, and manage the tasks I supervise'), ('admin', 'Admin: everything I may do, processes included')], default='read', max_length=16)),
                ('last_used_at', models.DateTimeField(blank=True, null=True)),
                ('created_by', models.ForeignKey(blank=True, help_text='Who made it: its user, an admin, or nobody (a command).', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='auth_token_set', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'verbose_name': 'API token',
                'ordering': ['-created', '-id'],
            },
        ),
    ]
