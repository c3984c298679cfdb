"""REST API plumbing shared by every room: every error as one JSON shape.

Every refused API request answers ``{"code", "detail"}``, where ``detail`` is a sentence
saying what is wrong and where, plus ``errors`` (field path: problem) when fields were
wrong and ``problems`` (a list) when a document was. The same shape for our errors
(InboxError), for DRF's (authentication, permissions, methods, parsing, validation) and
for URLs under /api/ that do not exist.
"""

import logging
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config.errors import InboxError

logger = logging.getLogger(__name__)

NO_CREDENTIALS = ("No credentials: send the header 'Authorization: Token <key>' with an API "
                  "token (create one at /team/tokens/), or sign in for a session.")


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Answer an error with its status and the project's error shape.

    Named in REST_FRAMEWORK["EXCEPTION_HANDLER"]. Errors of ours with a 5xx status (AWS
    failed) are logged here, once; their messages never hold request values. Anything
    else (a bug) is left to Django: a 500, logged with its traceback.
    """
    if isinstance(exc, InboxError):
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
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response
    if isinstance(exc, exceptions.ValidationError):
        errors = _flatten(exc.detail)
        listed = "; ".join(f"{where}: {problem}" for where, problem in errors.items())
        response.data = {"code": "invalid", "detail": f"The request is not valid. {listed}.",
                         "errors": errors}
    else:
        code = exc.get_codes()
        detail = str(exc.detail)
        if isinstance(exc, exceptions.NotAuthenticated):
            detail = NO_CREDENTIALS
        response.data = {"code": code if isinstance(code, str) else exc.default_code,
                         "detail": detail}
    return response


def _flatten(detail: Any, prefix: str = "") -> dict[str, str]:
    """Turn DRF's nested error detail into {"field.path": "problem; problem"}."""
    if isinstance(detail, dict):
        flat: dict[str, str] = {}
        for key, value in detail.items():
            where = "(body)" if key == "non_field_errors" and not prefix else str(key)
            flat.update(_flatten(value, f"{prefix}.{where}" if prefix else where))
        return flat
    if isinstance(detail, list) and any(isinstance(item, (dict, list)) for item in detail):
        flat = {}
        for index, item in enumerate(detail):
            if item:
                flat.update(_flatten(item, f"{prefix}[{index}]" if prefix else f"[{index}]"))
        return flat
    items = detail if isinstance(detail, list) else [detail]
    return {prefix or "(body)": "; ".join(str(item) for item in items)}


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The 404 answer: JSON in the error shape under /api/, the 404 page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse(
            {"code": "not_found", "detail": f"Nothing at {request.path}: check the URL "
             "(task ids are UUIDs) against the API schema at /api/schema/."},
            status=404,
        )
    return page_not_found(request, exception)
