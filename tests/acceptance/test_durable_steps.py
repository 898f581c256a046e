"""A step's function runs once per job across a SIGKILL of the worker after the step: the
worker that takes the job over gets the step's result from its checkpoint. A job waiting for a
signal holds no slot, and a signal sent from another process wakes it in the worker's.

Both databases: one host is enough for a killed process (PostgreSQL notices it by its session,
SQLite by its pid; the job's two-second lease is the fallback).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from django_workqueue import operations
from django_workqueue.models import Checkpoint, Job, Signal
from django_workqueue.states import Status
from tests.support.database import fresh
from tests.support.durable_tasks import runs_a_step, step_then_waits_for_file, waits_for_approval
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


def test_a_waiting_job_holds_no_slot_and_runs_again_when_a_signal_comes_from_another_process(
    start_worker: StartWorker,
) -> None:
    """One slot: the waiting job gives it up (another job runs meanwhile), and the signal sent
    from this process wakes the job in the worker's process, where it takes the signal."""
    job = waits_for_approval.enqueue()
    worker = start_worker("--concurrency", "1", name="w", env=TASKS)
    wait_for(lambda: fresh(job).status == Status.WAITING, alive=[worker], message="the wait")
    assert (job.attempt, job.lease_owner) == (1, None)
    other = runs_a_step.enqueue("s", "meanwhile")
    wait_for(lambda: _finished(other), alive=[worker], message="another job in the one slot")

    assert operations.send_signal(job, "approve", {"by": "alice"}).count == 1
    wait_for(lambda: _finished(job), alive=[worker], message="the job to take the signal")

    assert (job.status, job.attempt, job.result[1]) == (Status.SUCCEEDED, 2, {"by": "alice"})
    assert Signal.objects.get().delivered_to == job.pk
