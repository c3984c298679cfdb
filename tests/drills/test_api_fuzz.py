"""Drill: fuzz the REST API from its own OpenAPI schema (schemathesis).

The schema is the one ``/api/schema/`` serves (drf-spectacular's generator); schemathesis
generates requests for every operation, valid and invalid, and sends them to the Django
WSGI application signed in (API token) as a worker and as a supervisor. No answer may be
a 5xx, invalid input must be refused with a 4xx and an unsupported method with a 405, and
every answer must match the schema: a documented status, content type and body.
Bounded: a few examples per operation and role (about a minute in all).
"""

from collections.abc import Iterator

import hypothesis
import pytest
import schemathesis
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from drf_spectacular.generators import SchemaGenerator
from schemathesis import checks

from accounts.roles import Role

# No 5xx, invalid input refused with a 4xx, unsupported methods answered 405, and every
# answer conforms to the schema: its status documented for the operation (config/openapi.py
# documents the shared errors), its content type and its body (errors in the one shape).
# Not positive_data_acceptance (a valid request for an unknown task is rightly a 404) nor
# ignored_auth (the caller's token goes with every request; anonymous calls are refused
# in tests/inbox/test_api.py).
CHECKS = [
    checks.not_a_server_error,
    checks.negative_data_rejection,
    checks.unsupported_method,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
]

EXAMPLES = 10

pytestmark = pytest.mark.slow  # ~60 s for the module, though each operation is quick

schema = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
schema.app = get_wsgi_application()


@pytest.fixture(autouse=True)
def connection_kept() -> Iterator[None]:
    """Keep the test's database connection across requests, as Django's test client does.

    The WSGI handler closes connections it finds in a transaction at each request's start
    and end; the test's own transaction (and its rows) would go with it on PostgreSQL.
    """
    for signal in (signals.request_started, signals.request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (signals.request_started, signals.request_finished):
        signal.connect(close_old_connections)


@pytest.fixture(params=["worker", "supervisor"])
def token_of(request, make_task, make_worker, approval_skill, api_token) -> str:
    """Sign in as a worker (or a supervisor) of invoice-review, with tasks in the queues."""
    roles = (Role.WORKER,) if request.param == "worker" else (Role.WORKER, Role.SUPERVISOR)
    caller = make_worker({"invoice-review": 3, "finance-approval": 2}, roles=roles)
    for _ in range(3):
        make_task()
    make_task(skill="finance-approval")
    return api_token(caller)  # the widest scope the caller's roles allow


@schema.parametrize()
@hypothesis.settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True,
    suppress_health_check=list(hypothesis.HealthCheck),
)
def test_the_api_answers_every_generated_request_without_a_5xx(
    case, token_of
):
    case.call_and_validate(headers={"Authorization": f"Token {token_of}"}, checks=CHECKS)
