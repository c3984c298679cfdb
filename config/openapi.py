"""The OpenAPI schema documents every error an operation can answer, in the one shape.

drf-spectacular describes what each view declares (its 200 and, where a view says so, a
404 or 409). This post-processing hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"])
adds the errors every operation shares, so a client (and the schema-conformance fuzz in
tests/drills/test_api_fuzz.py) can rely on the schema for every answer:

- 401 (no or bad credential) and 403 (role or token scope too small): every operation;
- 400: an operation with a body or query parameters (invalid input);
- 413 and 415: an operation with a body (too large; not JSON);
- 404: an operation with path parameters (nothing there, or not visible to the caller);
- 502: an operation under /api/processes/ (Step Functions or SQS failed);
- 500: every operation (a bug: the same shape, no internals).

Each is the component "Error": ``{"code", "detail"}`` plus ``errors`` (field: problem)
or ``problems`` (a list), as config.api.exception_handler writes it.
"""

from typing import Any

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "Every refused request: what is wrong and where.",
    "properties": {
        "code": {"type": "string", "description": "A stable machine-readable code."},
        "detail": {"type": "string", "description": "A sentence saying what is wrong."},
        "errors": {
            "type": "object",
            "additionalProperties": {"type": "string"},
            "description": "Each bad field (by its path) and what is wrong with it.",
        },
        "problems": {
            "type": "array",
            "items": {"type": "string"},
            "description": "What is wrong with a document (a process spec, say).",
        },
    },
    "required": ["code", "detail"],
}

DESCRIPTIONS = {
    "400": "The request is not valid: errors names each bad field.",
    "401": "No credential, or one that is bad, expired or revoked.",
    "403": "The caller's role or the token's scope does not allow this.",
    "404": "Nothing here, or nothing the caller may see.",
    "409": "The task's state or holder does not allow this now.",
    "413": "The body is larger than the API accepts.",
    "415": "The body is not JSON.",
    "500": "A fault of the server (reported to its operators).",
    "502": "AWS (Step Functions or SQS) failed; retry later.",
}

_METHODS = ("get", "put", "post", "patch", "delete")
_ERROR_REF = {"$ref": "#/components/schemas/Error"}
# The component drf-spectacular makes of inbox.api.ErrorSerializer (the errors views
# declare themselves): the same shape, so it becomes "Error" too.
_DECLARED_REF = {"$ref": "#/components/schemas/InboxError"}


def error_responses(result: dict[str, Any], generator: Any, request: Any,
                    public: bool) -> dict[str, Any]:
    """Add the shared errors to every operation of result (the schema) and return it."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("InboxError", None)
    schemas["Error"] = ERROR_SCHEMA
    for path, item in result.get("paths", {}).items():
        for method in _METHODS:
            operation = item.get(method)
            if operation is None:
                continue
            parameters = operation.get("parameters", [])
            codes = {"401", "403", "500"}
            if any(parameter.get("in") == "path" for parameter in parameters):
                codes.add("404")
            if any(parameter.get("in") == "query" for parameter in parameters):
                codes.add("400")
            if "requestBody" in operation:
                codes |= {"400", "413", "415"}
            if path.startswith("/api/processes/"):
                codes.add("502")
            responses = operation.setdefault("responses", {})
            for code, response in responses.items():
                content = response.get("content", {}).get("application/json", {})
                if code >= "400" and content.get("schema") == _DECLARED_REF:
                    content["schema"] = _ERROR_REF
                    response["description"] = DESCRIPTIONS.get(code, response["description"])
            for code in sorted(codes):
                if code not in responses:
                    responses[code] = {
                        "description": DESCRIPTIONS[code],
                        "content": {"application/json": {"schema": _ERROR_REF}},
                    }
    return result
