"""Task versions (``@task(version=N, compatible_versions=...)``): each checkpoint records the
version whose body stored it, and a run that resumes a job (its checkpoints stored by an earlier
run) fails the job at once if they were stored by a version the running code neither is nor
declares compatible — a deploy never feeds old checkpoints to new code silently."""

from __future__ import annotations

import pytest

from django_workqueue import task
from django_workqueue.exceptions import InvalidOption
from django_workqueue.models import Checkpoint
from django_workqueue.states import Status
from tests.integration.test_checkpoints import calls_of, wake_now
from tests.support import durable_tasks
from tests.support.database import fresh

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _forget_calls():
    durable_tasks.calls.clear()


def started_by(job, version: int) -> None:
    """As if another version of the task's code had run the job's body so far."""
    Checkpoint.objects.filter(job=job).update(task_version=version)


def resumed(drain, task, started_by_version: int):
    """A job of ``task`` parked by its sleep, its checkpoints as if stored by
    ``started_by_version``, run again once the sleep ended."""
    job = task.enqueue(3600)
    drain()
    started_by(job, started_by_version)
    wake_now(job)
    drain()
    return fresh(job)


def test_each_checkpoint_records_the_version_that_stored_it(drain):
    old = durable_tasks.sleeps_between_steps.enqueue(3600)
    new = durable_tasks.sleeps_at_version_2.enqueue(3600)

    drain()

    assert set(Checkpoint.objects.filter(job=old).values_list("task_version", flat=True)) == {1}
    assert set(Checkpoint.objects.filter(job=new).values_list("task_version", flat=True)) == {2}


def test_a_job_started_by_another_version_fails_when_resumed(drain):
    job = resumed(drain, durable_tasks.sleeps_at_version_2, 1)

    assert job.status == Status.FAILED
    assert job.attempt == 2  # failed at the resume, not after retries
    assert calls_of(job) == [(1, "before")]  # nothing of version 2's body ran on version 1's steps
    error = job.errors[-1]
    assert error["type"] == "django_workqueue.exceptions.IncompatibleVersion"
    name = "tests.support.durable_tasks.sleeps_at_version_2"
    assert name in error["message"]
    assert "started by version 1" in error["message"]
    assert "running code is version 2" in error["message"]
    assert "compatible_versions=(1,)" in error["message"]
    assert Checkpoint.objects.filter(job=job).count() == 2  # kept, for a redrive on the right code


def test_a_version_listed_as_compatible_resumes_the_job(drain):
    job = resumed(drain, durable_tasks.sleeps_at_version_3_resuming_2, 2)

    assert job.status == Status.SUCCEEDED
    assert calls_of(job) == [(1, "before"), (2, "after")]
    stored = dict(Checkpoint.objects.filter(job=job).values_list("name", "task_version"))
    assert stored == {"before": 2, "1": 2, "after": 3}


def test_compatibility_names_versions_not_a_range(drain):
    job = resumed(drain, durable_tasks.sleeps_at_version_3_resuming_2, 1)

    assert job.status == Status.FAILED


def test_a_first_run_is_never_refused_whatever_version_enqueued_it(drain):
    # The version is the body's that stores checkpoints, not the enqueuer's.
    job = durable_tasks.sleeps_at_version_2.enqueue(0)

    drain()

    assert fresh(job).status == Status.SUCCEEDED


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"version": 0}, "version must be a whole number from 1"),
        ({"version": "2"}, "version must be a whole number from 1"),
        ({"version": True}, "version must be a whole number from 1"),
        ({"version": 2, "compatible_versions": 1}, "compatible_versions must be a tuple"),
        ({"version": 2, "compatible_versions": (2,)}, "lists the task's own version 2"),
    ],
)
def test_bad_versions_are_refused_at_the_definition(options, problem):
    def body(context):
        return None

    with pytest.raises(InvalidOption, match=problem):
        task(name="tests.versions.bad", **options)(body)
