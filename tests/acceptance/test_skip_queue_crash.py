"""A process killed while it runs a skip-queue job loses nothing: the job stays leased to it
until the lease expires, then a worker's reaper makes it retryable and a worker runs attempt 2.

Both databases: one host is enough for a killed process and an expired lease.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import sleep_for
from tests.support.database import ledger_with_pids
from tests.support.processes import REPO_ROOT, StartWorker, wait_for
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def test_sigkill_of_the_enqueuing_process_mid_job_leaves_a_retry_for_the_workers(
    worker_env: Callable[..., dict[str, str]], start_worker: StartWorker, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    # sleep_for has lease_seconds=2: the killed attempt's lease expires two seconds later; the
    # attempt sleeps 3 s, so it is killed mid-job.
    enqueuer = subprocess.Popen(
        [sys.executable, "-m", "tests.support.flow_process", "skip-queue-sleep", "3",
         str(marker)],
        cwd=REPO_ROOT, env=worker_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_until(lambda: marker.exists() and marker.read_text(), timeout=30, message="attempt 1")
        assert int(marker.read_text()) == enqueuer.pid
        job = Job.objects.get(task_name=sleep_for.name)
        # Running here, leased to this process, not to any worker.
        assert (job.status, job.attempt) == (Status.RUNNING, 1)
        assert job.lease_owner.startswith(f"skip-queue:{enqueuer.pid}:")
    finally:
        enqueuer.send_signal(signal.SIGKILL)
        enqueuer.wait(30)
    assert enqueuer.returncode == -signal.SIGKILL

    # The enqueue never returned: the process was still running the attempt when it died.
    job.refresh_from_db()
    assert (job.status, job.attempt) == (Status.RUNNING, 1)

    worker = start_worker(name="w")
    wait_for(lambda: _finished(job), alive=[worker], message="the job to be retried and finish")

    assert (job.status, job.attempt, job.result) == (Status.SUCCEEDED, 2, 3.0)
    assert [(e["attempt"], e["type"]) for e in job.errors] == [(1, "LeaseExpired")]
    assert f"skip-queue:{enqueuer.pid}:" in job.errors[0]["message"]
    assert ledger_with_pids(job) == [
        (1, "started", enqueuer.pid),  # never finished: killed while sleeping
        (2, "started", worker.pid),
        (2, "finished", worker.pid),
    ]


def _finished(job: Job) -> bool:
    job.refresh_from_db()
    return job.is_finished
