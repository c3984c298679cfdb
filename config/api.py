"""REST API plumbing shared by every room: every error as one JSON shape.

Every refused API request answers ``{"code", "detail"}``, where ``detail`` is a sentence
saying what is wrong and where, plus ``errors`` (field path: problem) when fields were
wrong and ``problems`` (a list) when a document was. The same shape for our errors
(InboxError), for DRF's (authentication, permissions, methods, parsing, validation) and
for URLs under /api/ that do not exist, and for what Django refuses or fails on under
/api/ before or outside DRF (bad_request, server_error): a body too large (413) or too
deep (400), a malformed request, a bug (500).
"""

import io
import logging
import sys
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, parsers
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from config.errors import InboxError
from config.json_bounds import MAX_DEPTH, json_depth

logger = logging.getLogger(__name__)

NO_CREDENTIALS = ("No credentials: send the header 'Authorization: Token <key>' with an API "
                  "token (create one at /team/tokens/), or sign in for a session.")

# The largest request body the API reads. Its largest honest body, a state input to start
# an execution with, is at most Step Functions' 256 KiB. Page forms keep Django's own
# DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB), above which Django refuses any body: under /api/
# that refusal answers the same 413 (bad_request below).
MAX_BODY_BYTES = 1_048_576
TOO_LARGE = (f"The request body is larger than {MAX_BODY_BYTES:,} bytes, the most the API "
             "reads.")


class BodyTooLarge(exceptions.APIException):
    status_code = 413
    default_code = "too_large"
    default_detail = TOO_LARGE


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, bounded in size and in depth.

    Named in REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]. json.loads recurses once per level:
    the depth is measured on the text first, so 50,000 nested brackets are a 400 naming
    the depth, not a RecursionError.
    """

    def parse(self, stream: IO[bytes] | None, media_type: str | None = None,
              parser_context: dict[str, Any] | None = None) -> Any:
        data = stream.read(MAX_BODY_BYTES + 1) if stream is not None else b""
        if len(data) > MAX_BODY_BYTES:
            raise BodyTooLarge()
        encoding = (parser_context or {}).get("encoding", settings.DEFAULT_CHARSET)
        try:
            text = data.decode(encoding)
        except (UnicodeDecodeError, LookupError):
            raise exceptions.ParseError(
                f"JSON parse error - the body is not valid {encoding} text.") from None
        depth = json_depth(text)
        if depth > MAX_DEPTH:
            raise exceptions.ParseError(
                f"The JSON body nests {depth:,} levels deep, more than the {MAX_DEPTH} the "
                "API reads.", code="too_deep")
        return super().parse(io.BytesIO(data), media_type, parser_context)


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


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The 400 answer to what Django refuses before a view (SuspiciousOperation).

    Under /api/, JSON in the error shape: a body over Django's size limit is a 413
    ``too_large`` like one over the API's own; anything else a 400 ``bad_request``. Pages
    keep Django's 400 page.
    """
    if not _is_api(request):
        return defaults.bad_request(request, exception)
    if isinstance(exception, RequestDataTooBig):
        return JsonResponse({"code": "too_large", "detail": TOO_LARGE}, status=413)
    return JsonResponse(
        {"code": "bad_request", "detail": "The request is malformed (its host, headers, "
         "fields or body): it was refused before it was read."},
        status=400,
    )


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The 404 answer: JSON in the error shape under /api/, the 404 page elsewhere."""
    if _is_api(request):
        return JsonResponse(
            {"code": "not_found", "detail": f"Nothing at {request.path}: check the URL "
             "(task ids are UUIDs) against the API schema at /api/schema/."},
            status=404,
        )
    return defaults.page_not_found(request, exception)


# How long a client is asked to wait when every pooled connection stayed busy.
BUSY_RETRY_SECONDS = 2
BUSY = ("The server is busy: every database connection stayed in use past the wait. "
        "Nothing was done; try again in a moment.")


def _pool_exhausted(error: BaseException | None) -> bool:
    """Whether error is (or was caused by) the connection pool's wait running out."""
    from psycopg_pool import PoolTimeout

    seen = 0
    while error is not None and seen < 10:  # Django wraps psycopg's error in its own
        if isinstance(error, PoolTimeout):
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False


def server_error(request: HttpRequest) -> HttpResponse:
    """The 500 answer: JSON in the error shape under /api/, the 500 page elsewhere.

    Nothing of the error itself: Django logs it with its traceback (logger django.request).
    A request that waited past the pool's timeout for a database connection (a burst: a
    thousand pages reopening their live streams at once) is answered 503 with Retry-After
    instead: nothing failed but the wait, and a retry soon succeeds (a live page's stream
    retries by itself, with backoff). Django still logs it as an error.
    """
    if _pool_exhausted(sys.exc_info()[1]):
        if _is_api(request):
            response = JsonResponse({"code": "busy", "detail": BUSY}, status=503)
        else:
            response = HttpResponse(BUSY, status=503, content_type="text/plain")
        response["Retry-After"] = str(BUSY_RETRY_SECONDS)
        return response
    if _is_api(request):
        return JsonResponse(
            {"code": "server_error", "detail": "The server failed on this request and "
             "logged the error; nothing says it was done. Try again, or tell an admin."},
            status=500,
        )
    return defaults.server_error(request)
