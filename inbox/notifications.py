"""Tell people about work: the worker offered a task, the supervisors of an escalated one."""

import logging
from typing import Any

from django.conf import settings
from django.core.mail import send_mail

from accounts.models import User
from accounts.roles import Role
from inbox.models import Task, TaskState

logger = logging.getLogger(__name__)


_ABOUT = {"offered": TaskState.OFFERED, "escalated": TaskState.ESCALATED}


def notify(*, kind: str, task_id: Any) -> int:
    """Send the notification kind ("offered", "escalated") for a task; return mails sent."""
    task = Task.objects.select_related("skill", "assignee").get(pk=task_id)
    # Sent after commit, perhaps late: an offer answered or an escalation handled meanwhile
    # needs no notice (and an accepted offer has no offer deadline to name).
    if task.state != _ABOUT.get(kind, task.state):
        return 0
    link = f"{settings.INBOX_BASE_URL}/tasks/{task.pk}/"
    if kind == "offered":
        if task.assignee is None:
            return 0
        recipients = [task.assignee.email]
        subject = f"Offered to you: {task.title}"
        body = (f"{task.title}\n\nThis {task.skill.name} task is reserved for you until "
                f"{task.offer_deadline:%Y-%m-%d %H:%M %Z}. Accept or decline it: {link}\n")
    elif kind == "escalated":
        recipients = list(
            User.objects.filter(is_active=True, groups__name=Role.SUPERVISOR,
                                worker_skills__skill=task.skill)
            .values_list("email", flat=True).distinct()
        )
        subject = f"Escalated: {task.title}"
        body = (f"{task.title}\n\nNobody finished this {task.skill.name} task in time. It "
                f"is aborted at {task.overall_deadline:%Y-%m-%d %H:%M %Z} unless a "
                f"supervisor reassigns, returns or extends it: {link}\n")
    else:
        raise ValueError(f"unknown notification {kind!r}")
    if not recipients:
        logger.warning("No one to notify of %s task %s", kind, task.pk)
        return 0
    return send_mail(subject, body, None, recipients)
