"""The whole path on the emulator: deploy, start, intake, take, complete, callback, next stage.

Nothing is faked: a compiled state machine runs on the emulator, the intake long-polls its
queue, workers act through the REST API and pages, and the outbox sends the answers.
"""

import json
import logging
import time
from pathlib import Path

import pytest
from django.test import Client
from rest_framework.test import APIClient

from inbox.models import Outbox, OutboxStatus, Task, TaskState
from inbox.services.callback import callback_send
from inbox.services.intake import intake_poll
from inbox.tokens import token_decrypt
from processes.services import process_deploy, process_start
from tests.sfn import execution_wait, unique

pytestmark = pytest.mark.emulator
SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"
INVOICE = {"invoice_id": "INV-77", "supplier": "Globex", "amount": 18250, "currency": "EUR"}


class Recorder:
    """Keeps every response body and page the test saw, to search them for tokens."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    def api(self, user) -> APIClient:
        recorder = self

        class Recording(APIClient):
            def generic(self, *args, **kwargs):
                response = super().generic(*args, **kwargs)
                recorder.seen.append(response.content.decode())
                return response

        recording = Recording()
        recording.force_authenticate(user)
        return recording

    def page(self, user, path: str) -> str:
        browser = Client()
        browser.force_login(user)
        body = browser.get(path).content.decode()
        self.seen.append(body)
        return body


def _intake_until(*, stage: str, timeout: float = 20) -> Task:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        intake_poll(wait_seconds=1, budget_seconds=2)
        task = Task.objects.filter(stage=stage, state=TaskState.QUEUED).first()
        if task:
            return task
    raise AssertionError(f"no {stage} task arrived within {timeout} s")


def _send_callbacks() -> None:
    for outbox in Outbox.objects.filter(status=OutboxStatus.PENDING):
        assert callback_send(outbox_id=outbox.pk) == "sent"


def test_invoice_goes_through_review_and_approval_and_no_token_leaks(
    private_intake, make_worker, approval_skill, review_skill, caplog
):
    caplog.set_level(logging.DEBUG)
    recorder = Recorder()
    process_deploy(text=(SPECS / "invoice-approval.yaml").read_text(), source="invoice")
    ana = make_worker({"invoice-review": 4}, email="ana@example.com")
    both = make_worker({"invoice-review": 4, "finance-approval": 5}, email="both@example.com")
    cleo = make_worker({"finance-approval": 5}, email="cleo@example.com")
    execution, _ = process_start(name="invoice-approval", input=INVOICE,
                                 business_key=unique("INV-77"))

    review = _intake_until(stage="review")
    tokens = {token_decrypt(review.token_ciphertext)}
    api = recorder.api(both)
    taken = api.post("/api/inbox/tasks/next/", {"skill": "invoice-review"}, format="json")
    assert taken.status_code == 200 and taken.json()["id"] == str(review.pk)
    assert taken.json()["title"] == "Review invoice INV-77 from Globex"
    recorder.page(both, "/")
    done = api.post(f"/api/inbox/tasks/{review.pk}/complete/",
                    {"answer": {"decision": "approve", "comment": "ok"}}, format="json")
    assert done.status_code == 200, done.json()
    _send_callbacks()
    review.refresh_from_db()
    assert review.state == TaskState.COMPLETED

    approval = _intake_until(stage="approval")
    tokens.add(token_decrypt(approval.token_ciphertext))
    # Separation of duties: the reviewer may not approve, another approver may.
    assert recorder.api(both).post(f"/api/inbox/tasks/{approval.pk}/claim/", {},
                                   format="json").status_code == 409
    assert recorder.api(ana).get(f"/api/inbox/tasks/{approval.pk}/").status_code == 404
    cleo_api = recorder.api(cleo)
    claimed = cleo_api.post(f"/api/inbox/tasks/{approval.pk}/claim/", {}, format="json")
    assert claimed.status_code == 200
    # The approval shows the review's comment and when it was done, not its decision.
    shown = claimed.json()["input"]
    assert shown["stages"]["review"]["answer"] == {"comment": "ok"}
    assert set(shown["stages"]["review"]) == {"answer", "completedAt"}
    recorder.page(cleo, "/")
    cleo_api.post(f"/api/inbox/tasks/{approval.pk}/complete/",
                  {"answer": {"decision": "approve"}}, format="json")
    _send_callbacks()

    finished = execution_wait(execution_arn=execution.execution_arn)
    assert finished["status"] == "SUCCEEDED"
    output = json.loads(finished["output"])
    assert output["stages"]["review"]["answer"] == {"decision": "approve", "comment": "ok"}
    assert output["stages"]["approval"]["answer"]["decision"] == "approve"
    assert output["stages"]["approval"]["worker"] == str(cleo.pk)

    recorder.api(cleo).get(f"/api/inbox/tasks/{approval.pk}/")
    logged = [record.getMessage() for record in caplog.records]
    for token in tokens:
        assert not any(token in text for text in recorder.seen), "a token reached a response"
        assert not any(token in text for text in logged), "a token reached a log record"
    assert len(recorder.seen) >= 8 and len(logged) > 0


def test_rejecting_drives_the_execution_to_its_rejection_path(private_intake, make_worker,
                                                              review_skill):
    process_deploy(text=(SPECS / "invoice-approval.yaml").read_text(), source="invoice")
    ana = make_worker({"invoice-review": 4})
    execution, _ = process_start(name="invoice-approval", input=INVOICE,
                                 business_key=unique("INV-78"))
    review = _intake_until(stage="review")
    api = Recorder().api(ana)
    api.post(f"/api/inbox/tasks/{review.pk}/claim/", {}, format="json")
    rejected = api.post(f"/api/inbox/tasks/{review.pk}/reject/",
                        {"reason": "not our supplier"}, format="json")
    assert rejected.status_code == 200 and rejected.json()["state"] == TaskState.REJECTING
    _send_callbacks()
    review.refresh_from_db()
    assert review.state == TaskState.REJECTED
    finished = execution_wait(execution_arn=execution.execution_arn)
    assert (finished["status"], finished.get("error")) == ("FAILED", "Invoice.Rejected")
