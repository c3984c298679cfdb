"""The Celery app: another interface to the services, configured from settings."""

import os
import sys

from celery import Celery, Task
from celery.signals import task_postrun, task_prerun, worker_process_init
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("inbox")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _ensure_broker_folders(sender: Celery, **kwargs: object) -> None:
    """Create the filesystem broker's folders; kombu fails on missing ones."""
    options = sender.conf.broker_transport_options or {}
    for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
        if options.get(key):
            os.makedirs(options[key], exist_ok=True)


# Database connections between tasks ----------------------------------------------------
# Celery's Django fixup closes every connection before and after each task unless this is
# set (it counts its closes and closes again only after twice this many): a new PostgreSQL
# connection, and a new server backend, for every callback and every intake poll. Set past
# reach, the fixup keeps them, and each task gets what Django gives a request instead.
app.conf.CELERY_DB_REUSE_MAX = sys.maxsize


@task_prerun.connect
@task_postrun.connect
def _connections_tidy(task: Task | None = None, **kwargs: object) -> None:
    """Close the connections past CONN_MAX_AGE or left unusable, as a request's start and
    end do (a connection kept is health-checked on its first use, CONN_HEALTH_CHECKS).

    Not around an eager task: it runs inside its caller, whose transaction it must not end
    (the fixup leaves those alone too).
    """
    if task is not None and getattr(task.request, "is_eager", False):
        return
    close_old_connections()


@worker_process_init.connect
def _aws_clients_build(**kwargs: object) -> None:
    """Build the AWS clients a worker process calls as it starts (botocore takes tens of
    milliseconds of CPU per client), not on its first callback or intake poll."""
    from processes import aws

    for service in ("stepfunctions", "sqs"):
        aws.client(service=service)
