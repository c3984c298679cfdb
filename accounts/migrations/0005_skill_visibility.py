"""Each skill says which of its tasks its workers see: their own (default) or the team's."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0004_api_token"),
    ]

    operations = [
        migrations.AddField(
            model_name="skill",
            name="peer_visibility",
            field=models.CharField(
                choices=[
                    ("own", "Own: a worker sees what they may take, hold or held"),
                    ("team", "Team: every worker of the skill sees all its tasks, read-only"),
                ],
                default="own",
                help_text="Which of the skill's tasks its workers see (supervisors see them all).",
                max_length=8,
            ),
        ),
    ]
