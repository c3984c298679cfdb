"""The demo invoice process, compiled and run for real on the emulator.

Step Functions is called directly with the envelope's token, as the inbox will do.
"""

import json
from pathlib import Path

import pytest
from django.conf import settings

from processes import aws
from processes.compiler import Target, compile_spec
from processes.envelope import envelope_problems
from processes.spec import spec_load
from tests.sfn import execution_wait, task_message_wait, unique

pytestmark = pytest.mark.emulator
SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"


def _target() -> Target:
    queue_url = aws.queue_url(name=settings.INBOX_INTAKE_QUEUE)
    queue_arn = aws.queue_attributes(url=queue_url)["QueueArn"]
    _arn, partition, _sqs, region, account, _name = queue_arn.split(":")
    return Target(queue_url, f"arn:{partition}:states:{region}:{account}:stateMachine:")


def _deploy(spec_name: str) -> str:
    asl = compile_spec(spec_load(SPECS / f"{spec_name}.yaml"), target=_target())
    return aws.state_machine_create_or_update(
        name=unique(spec_name), definition=asl, role_arn=settings.INBOX_STATES_ROLE_ARN
    )


@pytest.fixture(scope="module")
def invoice_machine(emulator) -> str:
    return _deploy("invoice-approval")


def _start(machine: str, invoice: dict) -> str:
    return aws.execution_start(state_machine_arn=machine, name=unique("inv"), input=invoice)


def _answer(decision: str, comment: str | None = None) -> dict:
    return {"answer": {"decision": decision, "comment": comment}, "worker": "7"}


INVOICE = {"invoice_id": "INV-42", "supplier": "ACME", "amount": 12500, "currency": "EUR"}


def test_compiled_demo_specs_are_accepted_by_the_emulator(emulator):
    for spec_name in ("invoice-approval", "document-check"):
        assert _deploy(spec_name).startswith("arn:aws:states:")


def test_large_invoice_goes_through_review_and_approval(invoice_machine):
    execution = _start(invoice_machine, INVOICE)
    review = task_message_wait(execution_arn=execution, stage="review")
    assert envelope_problems(review) == []
    assert review["title"] == "Review invoice INV-42 from ACME"
    assert review["skill"] == "invoice-review"
    assert review["process"] == {"name": "invoice-approval", "version": 1}
    assert review["input"] == INVOICE
    assert review["timeouts"] == {"offer": 300, "work": 1800, "overall": 86400}
    assert review["onTimeout"] == "abort"
    aws.task_success(token=review["taskToken"], output=_answer("approve"))

    approval = task_message_wait(execution_arn=execution, stage="approval")
    assert envelope_problems(approval) == []
    assert approval["skill"] == "finance-approval"
    assert approval["minProficiency"] == 3
    assert approval["excludeWorkersOf"] == ["review"]
    assert approval["title"] == "Approve invoice INV-42 (12500 EUR)"
    # Only what the approval shows: the review's comment, not its decision or worker (the
    # inbox sends completedAt; this answer has none, so the envelope has none either).
    assert approval["input"] == {**INVOICE, "stages": {"review": {"answer": {"comment": None}}}}
    aws.task_success(token=approval["taskToken"], output=_answer("approve", "fine"))

    done = execution_wait(execution_arn=execution)
    assert done["status"] == "SUCCEEDED"
    output = json.loads(done["output"])
    assert output["stages"]["approval"]["answer"] == {"decision": "approve", "comment": "fine"}


def test_small_invoice_needs_only_the_review(invoice_machine):
    execution = _start(invoice_machine, {**INVOICE, "amount": 900})
    review = task_message_wait(execution_arn=execution, stage="review")
    aws.task_success(token=review["taskToken"], output=_answer("approve"))
    assert execution_wait(execution_arn=execution)["status"] == "SUCCEEDED"


def test_a_reject_decision_ends_in_the_rejected_state(invoice_machine):
    execution = _start(invoice_machine, INVOICE)
    review = task_message_wait(execution_arn=execution, stage="review")
    aws.task_success(token=review["taskToken"], output=_answer("reject", "duplicate"))
    done = execution_wait(execution_arn=execution)
    assert (done["status"], done.get("error")) == ("FAILED", "Invoice.Rejected")


def test_a_rejected_task_follows_the_rejection_path(invoice_machine):
    """The inbox's reject action: SendTaskFailure with HumanTask.Rejected."""
    execution = _start(invoice_machine, INVOICE)
    review = task_message_wait(execution_arn=execution, stage="review")
    aws.task_failure(token=review["taskToken"], error="HumanTask.Rejected", cause="wrong queue")
    done = execution_wait(execution_arn=execution)
    assert (done["status"], done.get("error")) == ("FAILED", "Invoice.Rejected")


def test_an_aborted_task_follows_the_timeout_path(invoice_machine):
    """The default timeout policy: SendTaskFailure with HumanTask.TimedOut."""
    execution = _start(invoice_machine, INVOICE)
    review = task_message_wait(execution_arn=execution, stage="review")
    aws.task_success(token=review["taskToken"], output=_answer("approve"))
    approval = task_message_wait(execution_arn=execution, stage="approval")
    aws.task_failure(token=approval["taskToken"], error="HumanTask.TimedOut", cause="overall")
    done = execution_wait(execution_arn=execution)
    assert (done["status"], done.get("error")) == ("FAILED", "Invoice.TimedOut")


def test_an_unexpected_task_error_takes_the_failure_branch_and_notifies(invoice_machine):
    """Any other error is recorded on the intake queue (process-failure/v1), then fails."""
    execution = _start(invoice_machine, INVOICE)
    review = task_message_wait(execution_arn=execution, stage="review")
    aws.task_failure(token=review["taskToken"], error="Something.Else", cause="boom")
    notice = task_message_wait(execution_arn=execution)
    assert envelope_problems(notice) == []
    assert notice["kind"] == "process-failure/v1"
    assert notice["error"]["Error"] == "Something.Else"
    done = execution_wait(execution_arn=execution)
    assert (done["status"], done.get("error")) == ("FAILED", "Process.Failed")


def test_document_check_accepts_valid_documents_and_refuses_missing_ones(emulator):
    machine = _deploy("document-check")
    outcomes = {"valid": ("SUCCEEDED", None), "missing": ("FAILED", "Documents.Refused")}
    for outcome, expected in outcomes.items():
        execution = aws.execution_start(state_machine_arn=machine, name=unique("doc"),
                                        input={"customer": "C-7"})
        check = task_message_wait(execution_arn=execution, stage="check")
        assert envelope_problems(check) == []
        assert (check["onTimeout"], check["timeouts"]["escalation"]) == ("escalate", 14400)
        assert check["heartbeatSeconds"] == 300
        aws.task_success(token=check["taskToken"], output={"answer": {"outcome": outcome}})
        done = execution_wait(execution_arn=execution)
        assert (done["status"], done.get("error")) == expected
