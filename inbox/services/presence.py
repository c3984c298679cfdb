"""Presence: a worker available for new work or away, and who is online.

Away: dispatch offers them nothing and a supervisor cannot give them a task
(inbox.eligibility, reason "away"); the offers they hold when they go go back to their
queue through the transition table's "withdraw" row and on to the next eligible worker;
what they have in progress stays theirs to finish or release. A worker may still take a
task themselves while away (take next, claim): away is about being given work.

Online: seen (accounts.sessions: a page or form they used, written at most once a
minute) within ONLINE_SECONDS; signing out ends it at once.
"""

import datetime
import logging

from django.db import transaction
from django.utils import timezone

from accounts.models import ONLINE_SECONDS, Availability, User
from inbox import effects
from inbox.lifecycle import IllegalTransition, StaleVersion, transition
from inbox.models import Task, TaskState

logger = logging.getLogger(__name__)

DISPATCH_PENDING = "inbox.tasks.dispatch_pending_task"


def offers_withdraw(*, worker: User, actor: User | None) -> int:
    """Give back every offer the worker holds (they went away); return how many.

    Each is its own transition, fenced by the version read here: an offer that lapsed or
    was answered since is no longer theirs to give back, and is left as it is.
    """
    offered = list(Task.objects.filter(assignee=worker, state=TaskState.OFFERED)
                   .values_list("pk", "version"))
    withdrawn = 0
    for task_id, version in offered:
        try:
            transition(task_id=task_id, action="withdraw", actor=actor, system="presence",
                       expected_version=version, reason=f"{worker.email} went away.")
            withdrawn += 1
        except (StaleVersion, IllegalTransition):
            logger.info("Offer of task %s changed before %s went away; left as it is",
                        task_id, worker.email)
    return withdrawn


def presence_after_commit(*, availability: Availability) -> None:
    """Offer the queued push tasks again once a worker who came back is committed."""
    if availability != Availability.AVAILABLE:
        return
    # After commit: dispatch must read the worker as available. Robust: beat's
    # dispatch_pending offers them within its period if the broker is down.
    transaction.on_commit(lambda: effects.enqueue(DISPATCH_PENDING), robust=True)


def online_since(now: datetime.datetime | None = None) -> datetime.datetime:
    """Return the time a worker must have been seen after to count as online."""
    return (now or timezone.now()) - datetime.timedelta(seconds=ONLINE_SECONDS)
