"""Process failures: a state machine's failure notice, recorded once and mailed to the admins.

A compiled state machine's failure branch puts a ``process-failure/v1`` notice on the
intake queue before it fails (docs/ENVELOPE.md); the intake hands each valid notice here.
"""

import functools
import logging
from typing import Any

from django.core.mail import send_mail
from django.db import IntegrityError, transaction

from accounts.models import User
from accounts.roles import Role
from inbox.models import ProcessFailure
from inbox.redaction import redact

logger = logging.getLogger(__name__)

_EXECUTION_MAX = 2048
_PROCESS_NAME_MAX = 48
_ERROR_MAX = 256
_CAUSE_MAX = 32_768
_SUBJECT_MAX = 200


def process_failure_record(*, envelope: dict[str, Any], message_id: str) -> bool:
    """Record a valid process-failure/v1 notice; return False if it was known already.

    A notice is known by its message id (a redelivery) or its execution (a second copy
    from Step Functions' retry of the send, with its own message id). The admins are
    mailed once the new row is committed.
    """
    execution_arn = envelope["execution"][:_EXECUTION_MAX]
    error = envelope["error"]
    try:
        with transaction.atomic():
            known = ProcessFailure.objects.filter(message_id=message_id).exists() or (
                ProcessFailure.objects.filter(execution_arn=execution_arn).exists()
            )
            if known:
                return False
            failure = ProcessFailure.objects.create(
                message_id=message_id,
                execution_arn=execution_arn,
                process_name=str(envelope["process"]["name"])[:_PROCESS_NAME_MAX],
                process_version=envelope["process"]["version"],
                error=str(error.get("Error") or "(none given)")[:_ERROR_MAX],
                # A cause may quote a failed state's parameters, a task token among them.
                cause=redact(str(error.get("Cause") or ""))[:_CAUSE_MAX],
            )
            # After commit: a rolled-back notice is delivered again, and mailing on both
            # attempts would tell the admins twice.
            transaction.on_commit(functools.partial(_admins_mail, failure_id=failure.pk))
    except IntegrityError:
        # The same message handled twice at once: the unique message id let one win.
        if ProcessFailure.objects.filter(message_id=message_id).exists():
            return False
        raise
    logger.warning(
        "Process %s v%s failed (%s): %s",
        failure.process_name, failure.process_version, failure.error, failure.execution_arn,
    )
    return True


def _admins_mail(*, failure_id: int) -> None:
    """Tell the admins about a process failure; a mail server error is logged, not raised."""
    failure = ProcessFailure.objects.get(pk=failure_id)
    recipients = list(
        User.objects.filter(groups__name=Role.ADMIN.value, is_active=True)
        .exclude(email="")
        .order_by("email")
        .values_list("email", flat=True)
        .distinct()
    )
    if not recipients:
        logger.warning("No active admin to tell about process failure %s", failure.pk)
        return
    # A header may not hold a line break, and a notice's process name is free text.
    subject = " ".join(
        f"[inbox] Process {failure.process_name} v{failure.process_version} failed: "
        f"{failure.error}".split()
    )
    body = (
        f"Process {failure.process_name} v{failure.process_version} took its failure "
        "branch.\n\n"
        f"Execution: {failure.execution_arn}\n"
        f"Error:     {failure.error}\n"
        f"Cause:     {failure.cause or '(none given)'}\n"
        f"Recorded:  {failure.received_at.isoformat()}\n"
    )
    try:
        send_mail(subject=subject[:_SUBJECT_MAX], message=body, from_email=None,
                  recipient_list=recipients)
    except Exception:
        # After commit nothing rolls back, and the row stays on the admin pages; the lost
        # mail is logged here, once.
        logger.exception("Could not mail the admins about process failure %s", failure.pk)
