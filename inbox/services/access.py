"""What happens to the tasks a worker holds when their access changes.

A worker holds a task only while they may: active, with the worker role, holding the
task's skill at its min_proficiency (inbox.selectors.hold_problem). When an admin takes
any of that away, ``worker_access_recheck`` returns each task they may no longer hold to
its queue at once, through the transition table's "revoke" row, with the reason and the
admin in its history; the worker's open pages hear of it on the live stream. A worker
action refused for the same reason (the change made some other way, no recheck run)
returns the task the same way (``task_revoke``), in a transaction of its own since the
refused one rolled back.

The callers are where access changes: the team skills page (accounts.views) and the
Django admin (accounts.admin). accounts.services does not import the inbox.
"""

from typing import Any

from django.db import transaction

from accounts.models import User
from inbox.lifecycle import transition
from inbox.models import HELD_STATES, Task
from inbox.selectors import hold_problem


def task_revoke(*, task_id: Any, worker: User, actor: User | None = None) -> bool:
    """Return the task to its queue if worker holds it and may no longer; say whether it was.

    actor is who changed the access (None: found by the system, on an action refused).
    """
    with transaction.atomic():
        # The row lock: the task may be released, decided or returned meanwhile, and the
        # access given back; both are read again under it.
        task = (Task.objects.select_for_update(of=("self",)).select_related("skill")
                .filter(pk=task_id).first())
        if task is None or task.assignee_id != worker.pk or task.state not in HELD_STATES:
            return False
        problem = hold_problem(user=worker, task=task)
        if problem is None:
            return False
        transition(task_id=task.pk, action="revoke", actor=actor, locked=task,
                   reason=f"returned: {problem}")
    return True


def worker_access_recheck(*, worker: User, actor: User | None = None) -> list[Any]:
    """Return to their queues the tasks worker holds and may no longer; return their ids.

    Call it after the change of access committed (or in its transaction): it reads the
    worker's roles, skills and is_active afresh.
    """
    worker = User.objects.get(pk=worker.pk)  # fresh: roles, is_active, no cached roles
    held = list(Task.objects.filter(assignee=worker, state__in=HELD_STATES)
                .values_list("pk", flat=True))
    return [task_id for task_id in held
            if task_revoke(task_id=task_id, worker=worker, actor=actor)]
