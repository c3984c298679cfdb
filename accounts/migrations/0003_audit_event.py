"""The audit log; on PostgreSQL a trigger refuses every UPDATE and DELETE of an entry."""

from django.db import migrations, models

FORBID = """
CREATE OR REPLACE FUNCTION accounts_audit_event_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'accounts_auditevent is append-only: % of entry % refused', TG_OP, OLD.id
        USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_event_append_only
    BEFORE UPDATE OR DELETE ON accounts_auditevent
    FOR EACH ROW EXECUTE FUNCTION accounts_audit_event_append_only();
"""
ALLOW = """
DROP TRIGGER IF EXISTS audit_event_append_only ON accounts_auditevent;
DROP FUNCTION IF EXISTS accounts_audit_event_append_only();
"""


def _on_postgresql(sql: str):
    def run(apps, schema_editor) -> None:
        if schema_editor.connection.vendor == "postgresql":
            # No parameters: the % in the function body is PL/pgSQL, not a placeholder.
            schema_editor.execute(sql, params=None)
    return run


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_skill_dispatch'),
    ]

    operations = [
        migrations.CreateModel(
            name='AuditEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('at', models.DateTimeField(auto_now_add=True, db_index=True)),
                ('action', models.CharField(choices=[('sign_in', 'Signed in'), ('sign_in_failed', 'Sign-in failed'), ('locked_out', 'Locked out'), ('sign_out', 'Signed out'), ('reauthenticated', 'Confirmed their password'), ('session_expired', 'Session ended (idle)'), ('token_created', 'API token created'), ('token_revoked', 'API token revoked'), ('token_refused', 'API token refused'), ('user_created', 'User created'), ('roles_changed', 'Roles changed'), ('skill_granted', 'Skill granted'), ('skill_changed', 'Proficiency changed'), ('skill_removed', 'Skill removed'), ('access_changed', 'Account access changed')], max_length=32)),
                ('actor_id', models.BigIntegerField(blank=True, null=True)),
                ('actor_email', models.CharField(blank=True, max_length=254)),
                ('subject', models.CharField(blank=True, max_length=254)),
                ('ip', models.GenericIPAddressField(blank=True, null=True)),
                ('detail', models.JSONField(blank=True, default=dict)),
            ],
            options={
                'ordering': ['-at', '-id'],
                'indexes': [models.Index(fields=['action', '-at'], name='audit_by_action')],
            },
        ),
        migrations.RunPython(_on_postgresql(FORBID), _on_postgresql(ALLOW), elidable=False),
    ]
