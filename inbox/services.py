"""Worker actions that finish a task: the answer is checked here, the change is lifecycle's."""

from typing import Any

from accounts.models import User
from config.errors import Conflict, InboxError
from inbox import lifecycle
from inbox.models import Task, TaskState
from inbox.selectors import access_task
from processes.forms import Form, form_validate
from processes.selectors import form_for


class UnknownForm(InboxError):
    status = 500
    code = "unknown_form"


def task_form(*, task: Task) -> Form:
    """Return the form of the task's stage; raise if the process no longer defines it."""
    form = form_for(process_name=task.process_name, process_version=task.process_version,
                    form_name=task.form)
    if form is None:
        raise UnknownForm(
            f"The form {task.form!r} of {task.process_name} v{task.process_version} is not "
            "known here; deploy that process version."
        )
    return form


def task_complete(*, worker: User, task_id: Any, answer: Any,
                  expected_version: int | None = None) -> Task:
    """Validate the worker's answer against the stage's form and complete the task.

    Raise FormInvalid (400, naming each field) before anything changes.
    """
    task = access_task(user=worker, task_id=task_id, action="work")
    cleaned = form_validate(task_form(task=task), answer)
    try:
        return lifecycle.task_complete(task=task, worker=worker, answer=cleaned,
                                       expected_version=expected_version)
    except Conflict:
        # A retried request (lost response, double click) with the same answer: the
        # decision stands, once; answer it as it was answered the first time.
        task.refresh_from_db()
        if task.state in _DECIDED["complete"] and task.answer == cleaned:
            return task
        raise


def task_reject(*, worker: User, task_id: Any, reason: str,
                expected_version: int | None = None) -> Task:
    """Reject the held task with a reason (Step Functions hears HumanTask.Rejected)."""
    task = access_task(user=worker, task_id=task_id, action="work")
    try:
        return lifecycle.task_reject(task=task, worker=worker, reason=reason,
                                     expected_version=expected_version)
    except Conflict:
        task.refresh_from_db()  # A retried request: see task_complete.
        if task.state in _DECIDED["reject"] and task.reason == reason:
            return task
        raise


_DECIDED = {
    "complete": (TaskState.COMPLETING, TaskState.COMPLETED),
    "reject": (TaskState.REJECTING, TaskState.REJECTED),
}
