"""A real ``runworker`` (Django 6+) runs the ``django.tasks`` tasks of an installed app's
tasks.py and of the modules its URLconf imports, on each pool, and fails a job whose task name
is the path of some other module as an unknown task, without importing that module."""

from __future__ import annotations

from pathlib import Path

import django
import pytest

from django_workqueue.models import Job
from django_workqueue.states import Status
from tests.support.factories import JobFactory
from tests.support.imports import MARKER, NAMED_MODULE
from tests.support.processes import StartWorker

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(django.VERSION < (6, 0), reason="django.tasks needs Django 6.0+"),
]

SETTINGS = ("--settings", "tests.acceptance.settings_django_tasks")


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_worker_runs_the_tasks_it_discovers_and_imports_no_job_row_name(
    start_worker: StartWorker, tmp_path: Path, pool: str
) -> None:
    in_app = JobFactory(task_name="tests.support.django_tasks_app.tasks.multiply", args=[6, 7])
    in_views = JobFactory(task_name="tests.support.django_task_views.greet", args=["you"])
    named = JobFactory(task_name=f"{NAMED_MODULE}.run_me", args=[], max_attempts=1)
    marker = tmp_path / "imported"
    # --skip-checks: the URLconf is imported by the worker itself, not by Django's URL checks.
    worker = start_worker(
        "--burst", "--skip-checks", "--pool", pool, *SETTINGS, env={MARKER: str(marker)}
    )
    assert worker.wait(timeout=120) == 0, worker.describe()
    rows = {job.pk: job for job in Job.objects.all()}
    assert (rows[in_app.pk].status, rows[in_app.pk].result) == (Status.SUCCEEDED, 42)
    assert (rows[in_views.pk].status, rows[in_views.pk].result) == (Status.SUCCEEDED, "hello you")
    assert rows[named.pk].status == Status.FAILED
    assert rows[named.pk].errors[-1]["type"].endswith("TaskNotRegistered")
    assert not marker.exists(), "a worker process imported the module a job row named"
