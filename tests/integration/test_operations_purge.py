"""``operations.purge_jobs``: deletes the chosen finished jobs outside workflows that no job
depends on, and keeps every other one."""

from __future__ import annotations

import pytest

from django_workqueue import operations
from django_workqueue.models import Dependency, Job, Workflow
from tests.support.factories import JobFactory

pytestmark = pytest.mark.django_db


def test_finished_standalone_jobs_are_deleted_with_their_edges():
    done = [JobFactory(status=status) for status in ("succeeded", "failed", "cancelled")]
    prerequisite = JobFactory(status="succeeded")
    Dependency.objects.create(job=done[0], prerequisite=prerequisite, position=0)

    result = operations.purge_jobs(Job.objects.filter(pk__in=[job.pk for job in done]))

    assert (result.action, result.count) == ("purged", 3)
    assert not Job.objects.filter(pk__in=[job.pk for job in done]).exists()
    assert not Dependency.objects.exists()
    assert Job.objects.filter(pk=prerequisite.pk).exists()  # not chosen


def test_unfinished_jobs_workflow_jobs_and_prerequisites_are_kept():
    waiting = JobFactory()
    running = JobFactory(running=True)
    workflow = Workflow.objects.create(total=1, succeeded=1, status="succeeded")
    in_workflow = JobFactory(status="succeeded", workflow=workflow)
    prerequisite = JobFactory(status="succeeded")
    Dependency.objects.create(job=waiting, prerequisite=prerequisite, position=0)
    chosen = [waiting, running, in_workflow, prerequisite]

    result = operations.purge_jobs([job.pk for job in chosen])

    assert (result.action, result.count) == ("unchanged", 0)
    assert "kept" in result.message
    assert Job.objects.count() == 4


def test_many_jobs_are_deleted_batch_by_batch(monkeypatch):
    monkeypatch.setattr("django_workqueue.operations.jobs.BATCH_SIZE", 3)
    JobFactory.create_batch(8, status="succeeded")
    assert operations.purge_jobs(Job.objects.all()).count == 8
    assert not Job.objects.exists()
