"""A step's function runs once per job across a SIGKILL of the worker after the step: the
worker that takes the job over gets the step's result from its checkpoint.

Both databases: one host is enough for a killed process (PostgreSQL notices it by its session,
SQLite by its pid; the job's two-second lease is the fallback).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from django_workqueue.models import Checkpoint, Job
from django_workqueue.states import Status
from tests.support.durable_tasks import step_then_waits_for_file
from tests.support.processes import StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

TASKS = {"WORKQUEUE_TASK_MODULES": "tests.support.durable_tasks"}


def _finished(job: Job) -> bool:
    job.refresh_from_db()
    return job.is_finished


def test_a_steps_function_runs_once_across_a_sigkill_after_the_step(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    job = step_then_waits_for_file.enqueue(str(tmp_path))
    a = start_worker(name="a", env=TASKS)
    stepped = tmp_path / "stepped"
    wait_for(lambda: stepped.exists() and stepped.read_text(), alive=[a], message="the step")
    assert Checkpoint.objects.get(job=job).result == a.pid  # stored as soon as it returned

    a.send(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    (tmp_path / "go").touch()
    b = start_worker(name="b", env=TASKS)
    wait_for(lambda: _finished(job), alive=[b], message="the job to be taken over and finish")

    assert (job.status, job.attempt) == (Status.SUCCEEDED, 2)
    assert stepped.read_text() == str(b.pid)  # attempt 2 ran the body, in worker b
    assert (tmp_path / "calls").read_text().split() == [str(a.pid)]  # the function ran once
    assert job.result == a.pid  # attempt 2 got attempt 1's result from the checkpoint
