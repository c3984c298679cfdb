"""A process composed of a child process (kind: process), compiled and run on the emulator."""

import json
from pathlib import Path

import pytest

from processes import aws
from processes.services import process_deploy, process_start
from tests.sfn import execution_wait, task_message_wait, unique

pytestmark = pytest.mark.emulator
SPECS = Path(__file__).resolve().parents[2] / "processes" / "specs"

PARENT = """
process: customer-onboarding
version: 1
stages:
  - id: documents
    kind: process
    process: document-check
    version: 1
    input: {customer: $.customer}
  - id: welcome
    kind: succeed
"""


@pytest.fixture
def onboarding(emulator, db):
    process_deploy(text=(SPECS / "document-check.yaml").read_text(), source="document-check")
    process_deploy(text=PARENT, source="onboarding")


def _child_task(customer: str) -> dict:
    return task_message_wait(
        match=lambda body: body["process"]["name"] == "document-check"
        and body["input"].get("customer") == customer
    )


def test_parent_waits_for_its_child_and_gets_its_output(onboarding):
    customer = unique("C")
    execution, _ = process_start(name="customer-onboarding", input={"customer": customer},
                                 business_key=unique("onboard"))
    check = _child_task(customer)
    assert check["execution"] != execution.execution_arn  # the child's own execution
    aws.task_success(token=check["taskToken"],
                     output={"answer": {"outcome": "valid", "expires_on": "2031-01-01"}})
    finished = execution_wait(execution_arn=execution.execution_arn)
    assert finished["status"] == "SUCCEEDED"
    child = json.loads(finished["output"])["stages"]["documents"]
    assert child["output"]["stages"]["check"]["answer"]["outcome"] == "valid"
    assert child["execution"].startswith("arn:aws:states:")


def test_a_failed_child_takes_the_parents_failure_branch(onboarding):
    customer = unique("C")
    execution, _ = process_start(name="customer-onboarding", input={"customer": customer},
                                 business_key=unique("onboard"))
    check = _child_task(customer)
    aws.task_success(token=check["taskToken"], output={"answer": {"outcome": "missing",
                                                                  "note": "no passport"}})
    notice = task_message_wait(execution_arn=execution.execution_arn)
    assert notice["kind"] == "process-failure/v1"
    finished = execution_wait(execution_arn=execution.execution_arn)
    assert (finished["status"], finished.get("error")) == ("FAILED", "Process.Failed")


def test_the_parent_cannot_be_deployed_before_its_child(emulator, db):
    from config.errors import Conflict

    with pytest.raises(Conflict, match="document-check"):
        process_deploy(text=PARENT, source="onboarding")
