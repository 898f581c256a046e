"""A worker that dies mid-job loses nothing: the lease expires, another worker takes the job over,
and the crashed attempt counts — so a job that kills every worker ends in the dead-letter queue.

Both databases: one host is enough for a killed process and an expired lease.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import crash, sleep_for
from tests.support.database import fresh, ledger_with_pids
from tests.support.processes import StartWorker, restart_until, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]


def _finished(job: Job) -> bool:
    job.refresh_from_db()
    return job.is_finished


def test_sigkill_mid_job_recovers_on_attempt_two(start_worker: StartWorker, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    # sleep_for has lease_seconds=2: the lease of the killed attempt expires two seconds later.
    job = sleep_for.enqueue(seconds=1.5, marker=str(marker))
    a = start_worker(name="a")
    wait_for(lambda: marker.exists() and marker.read_text(), alive=[a], message="attempt 1")
    assert int(marker.read_text()) == a.pid

    a.send(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL
    job.refresh_from_db()
    # The killed worker wrote nothing: the job is still leased to it.
    assert (job.status, job.attempt, job.lease_owner) == (Status.RUNNING, 1, a.worker_id)

    b = start_worker(name="b")
    wait_for(lambda: _finished(job), alive=[b], message="the job to be recovered and finish")

    assert (job.status, job.attempt, job.result) == (Status.SUCCEEDED, 2, 1.5)
    assert job.lease_owner is None
    assert [(e["attempt"], e["type"]) for e in job.errors] == [(1, "LeaseExpired")]
    assert a.worker_id in job.errors[0]["message"]
    assert ledger_with_pids(job) == [
        (1, "started", a.pid),  # never finished: killed while sleeping
        (2, "started", b.pid),
        (2, "finished", b.pid),
    ]


def test_poison_pill_ends_failed_after_max_attempts(start_worker: StartWorker) -> None:
    """``crash`` calls os._exit(17) on every attempt (max_attempts=3, lease_seconds=1).

    A small supervisor restarts the worker whenever it exits, as systemd or Kubernetes would; the
    job must end ``failed`` after three attempts instead of killing workers forever.
    """
    job = crash.enqueue()
    crashed, current = restart_until(
        lambda: fresh(job).status == Status.FAILED, lambda n: start_worker(name=f"w{n}"),
        most=5, message="the poison pill to end failed",
    )  # fmt: skip

    assert [process.returncode for process in crashed] == [17, 17, 17]
    assert (job.status, job.attempt, job.max_attempts) == (Status.FAILED, 3, 3)
    assert (job.crashes_charged, job.attempts_charged) == (3, 0)  # its crashes, not its body
    assert job.finished_at is not None
    assert job.lease_owner is None
    assert [(e["attempt"], e["type"]) for e in job.errors] == [
        (1, "LeaseExpired"), (2, "LeaseExpired"), (3, "LeaseExpired"),
    ]  # fmt: skip
    assert ledger_with_pids(job) == [(n, "", process.pid) for n, process in enumerate(crashed, 1)]
    # The worker that reaped the last attempt is alive and healthy: nothing more to run.
    assert current.alive
    current.send(signal.SIGTERM)
    assert current.wait() == 0
    job.refresh_from_db()
    assert (job.status, job.attempt) == (Status.FAILED, 3)
