"""A Django task (``django.tasks``) on the WorkqueueBackend survives a worker SIGKILL mid-run:
the lease expires, another ``runworker`` runs it again, and its ``TaskResult`` shows two
attempts and the lost one's error."""

from __future__ import annotations

import signal
from pathlib import Path

import django
import pytest

from django_workqueue.models import Job
from tests.support.processes import StartWorker, wait_for

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+"),
]
# Workers import the tests' Django tasks as a project's TASK_MODULES (never by a job's name).
TASK_MODULES = {"WORKQUEUE_TASK_MODULES": "tests.support.django_tasks"}


def test_killed_worker_leaves_the_result_a_second_attempt(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    from django.tasks import TaskResultStatus

    from tests.support import django_tasks

    marker = tmp_path / "started"
    result = django_tasks.die_once.enqueue(str(marker))
    a = start_worker(name="a", env=TASK_MODULES)
    wait_for(lambda: marker.exists() and marker.read_text(), alive=[a], message="attempt 1")
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.RUNNING, 1)
    assert result.worker_ids == [a.worker_id]

    a.send(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    b = start_worker(name="b", env=TASK_MODULES)

    def finished() -> bool:
        result.refresh()
        return result.is_finished

    wait_for(finished, alive=[b], message="the task to be recovered and finish")
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 2
    assert result.attempts == 2
    assert [error.exception_class_path for error in result.errors] == ["LeaseExpired"]
    assert a.worker_id in result.errors[0].traceback
    assert result.worker_ids == [a.worker_id, "unknown"]  # a success keeps no worker
    # One body attempt (the django.tasks default): the crash spent the crash budget, not it.
    job = Job.objects.get(pk=int(result.id))
    assert (job.max_attempts, job.attempts_charged, job.crashes_charged) == (1, 1, 1)
