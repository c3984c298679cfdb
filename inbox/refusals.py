"""Refused task actions, written to the audit trail: who tried what on which task, and why.

A task action (take, claim, accept, decline, release, complete, reject, undo, reassign,
return, extend, abort) refused with 409 Conflict (the task's state or holder does not
allow it) or 403 Forbidden (a role or an API token's scope does not) is one audit entry
(accounts.audit, action ``task_action_refused``): the actor, the action, the task id, the
answer's status and its reason. Never the token, the task's input or the posted body: the
reason is the refusal's own sentence, which names neither.

A client that repeats the same refused request in a loop must not flood the trail: the
same (actor, action, task, status, reason) is recorded at most once per
REFUSED_AUDIT_SECONDS, as accounts.api_auth does for refused tokens.
"""

import hashlib
from typing import Any

from django.core.cache import cache
from django.http import HttpRequest

from accounts.audit import audit_record
from accounts.models import AuditAction, User

REFUSED_AUDIT_SECONDS = 60
REFUSED_STATUSES = (403, 409)


def action_of(request: HttpRequest) -> str:
    """Return the task action a request asked for, named by its URL (task-claim: claim)."""
    match = getattr(request, "resolver_match", None)
    name = (match.url_name or "") if match else ""
    return name.removeprefix("api-").removeprefix("task-") or "unknown"


def refusal_record(*, request: HttpRequest, user: Any, task_id: Any, status: int,
                   reason: str) -> bool:
    """Audit a refused task action, unless the same one was audited in the window; say if so.

    Only 403 and 409 answers of a signed-in user are recorded: anonymous requests never
    reach a task action (a refused API token is audited by accounts.api_auth).
    """
    if status not in REFUSED_STATUSES or not isinstance(user, User) or not user.pk:
        return False
    action = action_of(request)
    task = str(task_id) if task_id is not None else ""
    key = "inbox:refused:" + hashlib.sha256(
        "\x00".join([str(user.pk), action, task, str(status), reason]).encode()).hexdigest()
    # cache.add is atomic: of N identical refusals in the window, one writes the entry.
    if not cache.add(key, 1, timeout=REFUSED_AUDIT_SECONDS):
        return False
    audit_record(action=AuditAction.TASK_ACTION_REFUSED, actor=user, subject=task,
                 request=request, task_action=action, status=status, reason=reason)
    return True
