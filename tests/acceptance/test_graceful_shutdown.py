"""SIGTERM drains: running jobs get the grace period, nothing new is claimed, the rest goes back
to ready uncharged; a second signal exits at once and leaves recovery to lease expiry.

Both databases: shutdown is the worker's business, the same on either.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from django_workqueue.states import Status
from testproject.testapp.tasks import add, sleep_for
from tests.support.database import ledger_with_pids
from tests.support.processes import RunworkerProcess, StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def _wait_started(marker: Path, worker: RunworkerProcess) -> None:
    wait_for(lambda: marker.exists() and marker.read_text(), alive=[worker], message="the job")
    assert int(marker.read_text()) == worker.pid


def test_sigterm_lets_the_running_job_finish_and_claims_nothing_new(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    running = sleep_for.enqueue(seconds=1.5, marker=str(marker))
    waiting = add.using(priority=-10).enqueue(1, 2)  # claimed next, if anything were claimed
    worker = start_worker("--concurrency", "1", name="a", env={"WORKQUEUE_GRACE": "30"})
    _wait_started(marker, worker)

    worker.send(signal.SIGTERM)

    assert worker.wait() == 0
    assert "SIGTERM: draining" in worker.stderr
    assert "stopped after 1 attempt: 1 job finished (1 succeeded)" in worker.stdout
    running.refresh_from_db()
    assert (running.status, running.attempt, running.result) == (Status.SUCCEEDED, 1, 1.5)
    assert running.errors == []
    assert ledger_with_pids(running) == [(1, "started", worker.pid), (1, "finished", worker.pid)]
    # Had the worker claimed after SIGTERM, the quick job would have run once the slot freed.
    waiting.refresh_from_db()
    assert (waiting.status, waiting.attempt, waiting.lease_owner) == (Status.READY, 0, None)


def test_past_the_grace_period_the_job_goes_back_to_ready_uncharged(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    job = sleep_for.enqueue(seconds=30, marker=str(marker))
    worker = start_worker(name="a", env={"WORKQUEUE_GRACE": "0.2"})
    _wait_started(marker, worker)

    worker.send(signal.SIGTERM)

    # Well before the 30-second job could finish: the worker does not wait for it.
    assert worker.wait(timeout=15) == 0
    assert f"job {job.pk} released back to ready at shutdown" in worker.stderr
    job.refresh_from_db()
    assert (job.status, job.attempt, job.max_attempts) == (Status.READY, 1, 3)
    assert (job.attempts_charged, job.crashes_charged) == (0, 0)
    assert (job.lease_owner, job.lease_expires_at, job.finished_at) == (None, None, None)
    assert job.errors == []  # a release is not a failure
    assert ledger_with_pids(job) == [(1, "started", worker.pid)]


def test_a_second_sigterm_exits_at_once_and_lease_expiry_recovers_the_job(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    job = sleep_for.enqueue(seconds=2.5, marker=str(marker))
    a = start_worker(name="a", env={"WORKQUEUE_GRACE": "30"})
    _wait_started(marker, a)

    a.send(signal.SIGTERM)
    a.wait_logged("SIGTERM: draining")
    a.send(signal.SIGTERM)

    assert a.wait() == 1
    assert "second signal: exiting now" in a.stderr
    job.refresh_from_db()
    # Nothing was written on the way out: the job is still leased to the dead worker.
    assert (job.status, job.attempt, job.lease_owner) == (Status.RUNNING, 1, a.worker_id)
    assert ledger_with_pids(job) == [(1, "started", a.pid)]

    b = start_worker(name="b")
    wait_for(lambda: job.refresh_from_db() or job.is_finished, alive=[b], message="recovery")

    assert (job.status, job.attempt, job.result) == (Status.SUCCEEDED, 2, 2.5)
    assert [(e["attempt"], e["type"]) for e in job.errors] == [(1, "LeaseExpired")]
    assert ledger_with_pids(job) == [
        (1, "started", a.pid),
        (2, "started", b.pid),
        (2, "finished", b.pid),
    ]
