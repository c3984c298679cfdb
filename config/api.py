"""REST API plumbing shared by every room: the project's errors as JSON answers."""

import logging
from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config.errors import InboxError

logger = logging.getLogger(__name__)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Answer an InboxError with its status, code and message; leave the rest to DRF.

    Named in REST_FRAMEWORK["EXCEPTION_HANDLER"]. Errors of ours with a 5xx status (AWS
    failed) are logged here, once; their messages never hold request values.
    """
    if not isinstance(exc, InboxError):
        return drf_exception_handler(exc, context)
    if exc.status >= 500:
        logger.error("API request failed: %s", exc.message)
    body: dict[str, Any] = {"code": exc.code, "detail": exc.message}
    problems = getattr(exc, "problems", None)
    if problems:
        body["problems"] = list(problems)
    fields = getattr(exc, "errors", None)
    if fields:
        # A form answer that does not fit: each field and what is wrong with it.
        body["errors"] = dict(fields)
    return Response(body, status=exc.status)
