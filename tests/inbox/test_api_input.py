"""inbox.api.valid_input validates with one serializer per input class, shared by every
request and thread. It must accept and refuse exactly as a new serializer's is_valid does."""

import json
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest
from django.http import QueryDict
from rest_framework import serializers

from accounts.models import User
from inbox.api import (
    ReasonInput,
    TakeNextInput,
    TaskCompleteInput,
    TaskRejectInput,
    TaskReleaseInput,
    VersionInput,
    valid_input,
)
from inbox.api_supervisor import ActionInput, BulkApi, ExtendInput, ReassignInput
from inbox.lifecycle import REASON_MAX_CHARS

WORKER_INPUTS = [TakeNextInput, VersionInput, ReasonInput, TaskReleaseInput,
                 TaskCompleteInput, TaskRejectInput]
SUPERVISOR_INPUTS = [ActionInput, ReassignInput, ExtendInput, BulkApi.InputSerializer]

BODIES: list[Any] = [
    {}, None, [], [{"version": 1}], "text", 5, True,
    {"skill": "invoice-review"}, {"skill": ""}, {"skill": None}, {"skill": 7},
    {"version": 1}, {"version": "2"}, {"version": 0}, {"version": "x"}, {"version": None},
    {"version": 2, "reason": "Wrong queue"}, {"reason": ""}, {"reason": "   "},
    {"reason": "r" * (REASON_MAX_CHARS + 1)}, {"reason": ["a list"]},
    {"answer": {"decision": "approve"}}, {"answer": None}, {"answer": [1, "two"]},
    {"answer": {"decision": "approve"}, "then": "next", "version": 3},
    {"answer": {}, "then": "later"}, {"reason": "No", "then": "next"},
    {"unknown": 1}, {"version": 1, "unknown": "ignored"},
    {"reason": "Late", "clock": "work", "seconds": 60}, {"clock": "never", "seconds": 0},
    {"action": "abort", "task_ids": ["4f1e8c62-3a9d-4c0e-9b7a-6d2f1e0c5b4a"], "reason": "x"},
    {"action": "extend", "task_ids": ["4f1e8c62-3a9d-4c0e-9b7a-6d2f1e0c5b4a"], "reason": "x"},
    {"action": "melt", "task_ids": [], "reason": "x"},
    {"action": "abort", "task_ids": ["not-a-uuid"], "reason": "x"},
]


def _fresh(serializer_class: type[serializers.Serializer], body: Any) -> tuple[str, Any]:
    """What a new serializer's is_valid says of body: its data, or its errors."""
    serializer = serializer_class(data=body)
    if serializer.is_valid():
        return "valid", dict(serializer.validated_data)
    return "invalid", _comparable(serializer.errors)


def _shared(serializer_class: type[serializers.Serializer], body: Any) -> tuple[str, Any]:
    try:
        return "valid", valid_input(serializer_class, SimpleNamespace(data=body))
    except serializers.ValidationError as exc:
        return "invalid", _comparable(exc.detail)


def _comparable(detail: Any) -> Any:
    # The messages and their codes (ErrorDetail's str and code), as plain JSON values.
    if isinstance(detail, dict):
        return {key: _comparable(value) for key, value in detail.items()}
    if isinstance(detail, list):
        return [_comparable(value) for value in detail]
    return [str(detail), getattr(detail, "code", None)]


def _assert_as_fresh(serializer_class: type[serializers.Serializer], bodies: list[Any]) -> None:
    """Each body validated through valid_input gives what a new serializer gives, and the
    bodies hold both valid and invalid ones."""
    outcomes = set()
    # Twice in turn, so a result or an error left on the shared instance would show.
    for body in [*bodies, *bodies]:
        expected = _fresh(serializer_class, body)
        assert _shared(serializer_class, body) == expected, (serializer_class.__name__, body)
        outcomes.add(expected[0])
    assert outcomes == {"valid", "invalid"}


@pytest.mark.parametrize("serializer_class", WORKER_INPUTS, ids=lambda c: c.__name__)
def test_each_worker_input_validates_and_refuses_as_a_new_serializer_does(serializer_class):
    forms = [QueryDict("version=2&reason=Wrong+queue"), QueryDict("version=x"), QueryDict("")]
    _assert_as_fresh(serializer_class, [*BODIES, *forms])


def test_a_null_body_is_no_data_provided_as_is_valid_says():
    kind, errors = _shared(VersionInput, None)
    assert kind == "invalid"
    assert errors == {"non_field_errors": [["No data provided", "null"]]}


def test_threads_sharing_the_validators_each_get_their_own_answers():
    cases = [(c, b) for c in WORKER_INPUTS for b in BODIES]
    expected = [_fresh(c, b) for c, b in cases]

    def run(offset: int) -> list[int]:
        # Each thread walks the cases from its own place, so the threads overlap differently.
        order = [*range(offset, len(cases)), *range(offset)]
        return [i for _ in range(20) for i in order if _shared(*cases[i]) != expected[i]]

    with ThreadPoolExecutor(max_workers=8) as pool:
        mismatches = list(pool.map(run, range(0, 8 * 5, 5)))
    assert mismatches == [[]] * 8


@pytest.mark.django_db
@pytest.mark.parametrize("serializer_class", SUPERVISOR_INPUTS, ids=lambda c: c.__name__)
def test_each_supervisor_input_validates_and_refuses_as_a_new_serializer_does(
        serializer_class, make_worker):
    worker, gone = make_worker({}), make_worker({})
    User.objects.filter(pk=gone.pk).update(is_active=False)
    bodies = [*BODIES,
              {"reason": "Cover", "worker": worker.email},
              {"reason": "Cover", "worker": worker.email.upper()},
              {"reason": "Cover", "worker": gone.email},
              {"reason": "Cover", "worker": "nobody@example.com"},
              {"reason": "Cover", "worker": "not an address"},
              {"action": "reassign", "task_ids": ["4f1e8c62-3a9d-4c0e-9b7a-6d2f1e0c5b4a"],
               "reason": "Cover", "worker": worker.email}]
    _assert_as_fresh(serializer_class, bodies)


def test_a_null_body_over_the_api_is_a_400_saying_no_data(api_client, make_worker, review_skill):
    client = api_client(make_worker({"invoice-review": 3}), scope="work")
    response = client.post("/api/inbox/tasks/next/", data=json.dumps(None),
                           content_type="application/json")
    assert response.status_code == 400
    assert response.json()["errors"] == {"(body)": "No data provided"}
