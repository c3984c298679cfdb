"""Celery tasks that keep the clocks: the sweeper, heartbeats, upstream checks, notices."""

from celery import shared_task

from inbox.deadlines import deadlines_sweep, executions_check, heartbeats_send
from inbox.notifications import notify


@shared_task(ignore_result=True)
def deadlines_sweep_task() -> dict[str, int]:
    """Apply the due offer, work and overall timeouts."""
    return deadlines_sweep()


@shared_task(ignore_result=True)
def heartbeats_task() -> dict[str, int]:
    """Send the due heartbeats of open tasks whose stage has HeartbeatSeconds."""
    return heartbeats_send()


@shared_task(ignore_result=True)
def executions_check_task() -> dict[str, int]:
    """Cancel open tasks whose execution ended upstream."""
    return executions_check()


@shared_task(ignore_result=True, autoretry_for=(OSError,), retry_backoff=True, max_retries=5)
def notify_task(kind: str, task_id: str) -> int:
    """Send one notification e-mail (retried when the mail server does not answer)."""
    return notify(kind=kind, task_id=task_id)
