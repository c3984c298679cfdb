"""Settings of the Celery worker subprocess the drills start and kill.

The project's settings, with three changes so a drill takes seconds instead of minutes:
a callback lease of a few seconds (a row claimed by a killed worker is due again soon),
a short drain grace, and a beat that only drains the outbox, every second (the drill's
worker must not poll the shared intake queue or sweep another test's deadlines).
"""

import os

from config.settings import *  # noqa: F403
from config.settings import VAR_DIR

INBOX_CALLBACK_LEASE_SECONDS = int(os.environ.get("DRILL_CALLBACK_LEASE_SECONDS", "5"))
INBOX_OUTBOX_DRAIN_GRACE_SECONDS = 1
CELERY_BEAT_SCHEDULE = {
    "outbox-drain": {
        "task": "inbox.tasks.outbox_drain_task",
        "schedule": 1.0,
        "options": {"expires": 1},
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = os.environ.get(
    "DRILL_BEAT_SCHEDULE", str(VAR_DIR / "drill-celerybeat-schedule")
)
