"""A runworker stopped by SIGTERM or SIGINT at any point of its life exits 0: while it starts
(before its first claim, as soon as Django made the app configs), idle once started, and while
it runs its first job (which finishes first)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from django_workqueue.models import WorkerProcess
from django_workqueue.states import Status
from testproject.testapp.tasks import sleep_for
from tests.support.processes import StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

STOP_SIGNALS = [signal.SIGTERM, signal.SIGINT]


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda s: s.name)
def test_a_signal_while_the_worker_starts_is_a_clean_immediate_exit(
    start_worker: StartWorker, tmp_path: Path, signum: signal.Signals
) -> None:
    marker = tmp_path / "importing"
    job = sleep_for.enqueue(seconds=0)
    worker = start_worker(env={
        "WORKQUEUE_TASK_MODULES": "tests.support.blocking_import",
        "BLOCKING_IMPORT_MARKER": str(marker),
    })  # fmt: skip
    wait_for(lambda: marker.exists() and marker.read_text(), alive=[worker], message="import")

    worker.send(signum)  # the import still waits: the worker is in the middle of its start

    assert worker.wait() == 0
    assert f"{signum.name}: stopped while starting, before the first claim" in worker.stderr
    assert "Traceback" not in worker.stderr
    job.refresh_from_db()
    assert (job.status, job.attempt) == (Status.READY, 0)
    assert not WorkerProcess.objects.exists()


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda s: s.name)
def test_a_signal_to_a_started_idle_worker_exits_0(
    start_worker: StartWorker, signum: signal.Signals
) -> None:
    worker = start_worker()
    wait_for(
        lambda: WorkerProcess.objects.filter(id=worker.worker_id).exists(),
        alive=[worker], message="the worker's registration",
    )  # fmt: skip

    worker.send(signum)

    assert worker.wait() == 0
    assert f"{signum.name}: draining" in worker.stderr
    assert "stopped after 0 attempts: 0 jobs finished" in worker.stdout


@pytest.mark.parametrize("signum", STOP_SIGNALS, ids=lambda s: s.name)
def test_a_signal_after_the_first_claim_finishes_the_job_and_exits_0(
    start_worker: StartWorker, tmp_path: Path, signum: signal.Signals
) -> None:
    marker = tmp_path / "running"
    job = sleep_for.enqueue(seconds=0.5, marker=str(marker))
    worker = start_worker(env={"WORKQUEUE_GRACE": "30"})
    wait_for(lambda: marker.exists() and marker.read_text(), alive=[worker], message="the job")

    worker.send(signum)

    assert worker.wait() == 0
    assert "stopped after 1 attempt: 1 job finished" in worker.stdout
    job.refresh_from_db()
    assert job.status == Status.SUCCEEDED
