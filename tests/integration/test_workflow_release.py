"""Release: what a job's ending, or a new job, does to its workflow's status."""

from __future__ import annotations

import pytest

from django_workqueue import operations
from django_workqueue.models import Workflow
from django_workqueue.states import Status, WorkflowStatus
from testproject.testapp.tasks import echo

pytestmark = pytest.mark.django_db(transaction=True)


def finished_workflow() -> tuple[Workflow, int]:
    """A workflow of one job, completed: succeeded and finished."""
    job = echo.using(depends_on=[]).enqueue()
    operations.complete_job(job, "first")
    workflow = Workflow.objects.get(pk=job.workflow_id)
    assert (workflow.status, workflow.result) == (WorkflowStatus.SUCCEEDED, "first")
    assert workflow.finished_at is not None
    return workflow, job.pk


def test_a_job_joining_a_finished_workflow_runs_it_again_until_it_ends() -> None:
    workflow, first = finished_workflow()
    finished_before = workflow.finished_at

    joined = echo.using(depends_on=[first]).enqueue("second")

    assert (joined.workflow_id, joined.status) == (workflow.pk, Status.READY)
    workflow.refresh_from_db()
    assert (workflow.status, workflow.finished_at, workflow.result) == (
        WorkflowStatus.RUNNING, None, None
    )  # fmt: skip
    assert workflow.counts == {"total": 2, "open": 1, "succeeded": 1, "failed": 0, "cancelled": 0}
    operations.fail_job(joined, "the second job failed")
    workflow.refresh_from_db()
    assert workflow.status == WorkflowStatus.FAILED
    assert workflow.finished_at is not None and workflow.finished_at >= finished_before


def test_a_job_joining_a_finished_workflow_and_cancelled_at_once_finishes_it_anew() -> None:
    workflow, first = finished_workflow()
    elsewhere = echo.using(depends_on=[]).enqueue()
    operations.cancel_job(elsewhere)

    # It joins the workflow of its first prerequisite; its second one was cancelled.
    joined = echo.using(depends_on=[first, elsewhere]).enqueue()

    assert (joined.workflow_id, joined.status) == (workflow.pk, Status.CANCELLED)
    workflow.refresh_from_db()
    assert workflow.counts == {"total": 2, "open": 0, "succeeded": 1, "failed": 0, "cancelled": 1}
    assert (workflow.status, workflow.result) == (WorkflowStatus.CANCELLED, "first")
    assert workflow.finished_at is not None
