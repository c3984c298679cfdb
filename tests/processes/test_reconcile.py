"""The reconciler keeps execution records current from DescribeExecution."""

import threading

import pytest
from django.conf import settings
from django.db import connection

from processes.models import Execution, ExecutionStatus
from processes.services import (
    execution_refresh,
    executions_reconcile,
    process_deploy,
    process_start,
)
from processes.tasks import executions_reconcile_task
from tests.processes.lifecycle import status_of, succeed_spec, unique_name, wait_for, wait_spec

pytestmark = pytest.mark.django_db


def _reconciled(execution: Execution) -> bool:
    executions_reconcile()
    return status_of(execution) != ExecutionStatus.RUNNING


@pytest.mark.emulator
def test_reconciler_moves_a_finished_execution_to_succeeded_with_output(emulator):
    """A succeed-only process ends at once; the reconciler records status, output, times."""
    name = unique_name()
    process_deploy(text=succeed_spec(name=name), source="a.yaml")
    execution, _ = process_start(name=name, input={"invoice": "INV-1"}, business_key="K")

    wait_for(lambda: _reconciled(execution), what="the execution being reconciled")

    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.SUCCEEDED
    assert execution.output == {"invoice": "INV-1"}
    assert execution.error == ""
    assert execution.finished_at is not None
    assert execution.finished_at >= execution.started_at.replace(microsecond=0)
    assert execution.checked_at is not None


@pytest.mark.emulator
def test_failed_execution_records_error_and_cause(emulator):
    """A fail stage's error and cause are kept on the row."""
    name = unique_name()
    text = f"""\
process: {name}
version: 1
stages:
  - id: stop
    kind: fail
    error: Invoice.Rejected
    cause: Nobody wanted it.
"""
    process_deploy(text=text, source="a.yaml")
    execution, _ = process_start(name=name, input={}, business_key="K")

    wait_for(lambda: _reconciled(execution), what="the execution being reconciled")

    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.FAILED
    assert execution.error == "Invoice.Rejected"
    assert execution.cause == "Nobody wanted it."


@pytest.mark.emulator
def test_execution_is_missing_when_step_functions_does_not_know_it(emulator):
    """An execution ARN that never existed (as after an emulator restart) becomes MISSING.

    Such a row cannot come from the services, so it is written directly.
    """
    name = unique_name()
    version, _ = process_deploy(text=wait_spec(name=name), source="a.yaml")
    ghost = Execution.objects.create(
        process=version.process,
        version=version,
        business_key="ghost",
        name="never-started",
        execution_arn=f"arn:aws:states:us-east-1:123456789012:execution:{name}-v1:never-started",
        input={},
    )

    assert executions_reconcile() == 1

    ghost.refresh_from_db()
    assert ghost.status == ExecutionStatus.MISSING
    assert "ExecutionDoesNotExist" in ghost.error
    assert ghost.checked_at is not None


@pytest.mark.emulator
def test_running_execution_stays_running_and_is_stamped(emulator):
    """A waiting execution is still RUNNING; checked_at records the look."""
    name = unique_name()
    process_deploy(text=wait_spec(name=name, seconds=60), source="a.yaml")
    execution, _ = process_start(name=name, input={}, business_key="K")

    assert executions_reconcile() == 1

    execution.refresh_from_db()
    assert execution.status == ExecutionStatus.RUNNING
    assert execution.checked_at is not None
    assert execution.finished_at is None


@pytest.mark.emulator
def test_reconciler_takes_a_bounded_batch_least_recently_checked_first(emulator):
    """Batch 2 of 3: the unchecked one comes first in the next round."""
    name = unique_name()
    process_deploy(text=wait_spec(name=name, seconds=60), source="a.yaml")
    executions = [
        process_start(name=name, input={}, business_key=f"K-{n}")[0] for n in range(3)
    ]

    assert executions_reconcile(batch=2) == 2
    unchecked = [e for e in executions if Execution.objects.get(pk=e.pk).checked_at is None]
    assert len(unchecked) == 1
    assert executions_reconcile(batch=1) == 1

    assert Execution.objects.get(pk=unchecked[0].pk).checked_at is not None


@pytest.mark.emulator
def test_finished_executions_are_not_asked_about_again(emulator):
    """Only RUNNING rows are reconciled."""
    name = unique_name()
    process_deploy(text=succeed_spec(name=name), source="a.yaml")
    execution, _ = process_start(name=name, input={}, business_key="K")
    wait_for(lambda: _reconciled(execution), what="the execution being reconciled")

    assert executions_reconcile() == 0


@pytest.mark.emulator
def test_refresh_with_a_stale_copy_never_overwrites_a_recorded_final_state(emulator):
    """A refresh that read RUNNING writes only if the row is still RUNNING."""
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml")
    execution, _ = process_start(name=name, input={}, business_key="K")
    stale = Execution.objects.get(pk=execution.pk)
    Execution.objects.filter(pk=execution.pk).update(
        status=ExecutionStatus.ABORTED, error="recorded first"
    )

    refreshed = execution_refresh(execution=stale)

    assert refreshed.status == ExecutionStatus.ABORTED
    assert refreshed.error == "recorded first"


@pytest.mark.postgres
@pytest.mark.emulator
@pytest.mark.django_db(transaction=True)
def test_racing_reconcilers_are_harmless(emulator):
    """Three reconcilers at once over finished executions: no error, every row final."""
    name = unique_name()
    process_deploy(text=succeed_spec(name=name), source="a.yaml")
    for n in range(6):
        process_start(name=name, input={"n": n}, business_key=f"K-{n}")
    errors: list[Exception] = []
    barrier = threading.Barrier(3)

    def reconcile() -> None:
        try:
            barrier.wait()
            executions_reconcile()
        except Exception as exc:  # reported below
            errors.append(exc)
        finally:
            connection.close()

    def all_final() -> bool:
        threads = [threading.Thread(target=reconcile) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return not Execution.objects.filter(status=ExecutionStatus.RUNNING).exists()

    wait_for(all_final, what="every execution being final")

    assert errors == []
    assert set(Execution.objects.values_list("status", flat=True)) == {ExecutionStatus.SUCCEEDED}
    assert sorted(e.output["n"] for e in Execution.objects.all()) == list(range(6))


# Celery -------------------------------------------------------------------------------------


@pytest.mark.emulator
def test_reconcile_task_runs_the_service(emulator):
    """The Celery task is a thin entry point: it reconciles and returns how many it checked."""
    name = unique_name()
    process_deploy(text=wait_spec(name=name), source="a.yaml")
    process_start(name=name, input={}, business_key="K")

    assert executions_reconcile_task.apply().get() == 1


def test_beat_runs_the_reconciler_every_30_seconds():
    entry = settings.CELERY_BEAT_SCHEDULE["executions-reconcile"]

    assert entry["task"] == executions_reconcile_task.name
    assert entry["schedule"] == 30.0
