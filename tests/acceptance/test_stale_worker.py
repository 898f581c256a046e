"""Fencing: a worker frozen past its lease comes back to find the job done by another worker,
and its late writes change nothing.

Worker A claims the job and is SIGSTOPped; its lease expires; worker B reaps the job and runs it
to success on attempt 2; then A is SIGCONTinued, finishes its copy of the work and tries to
record it. The job row must stay exactly as B left it.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.models import Effect
from testproject.testapp.tasks import atomic_effect, sleep_for
from tests.support.database import ledger_with_pids
from tests.support.processes import RunworkerProcess, StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

FIELDS = (
    "status", "attempt", "max_attempts", "result", "errors", "finished_at", "started_at",
    "run_after", "lease_owner", "lease_expires_at",
)  # fmt: skip


def _row(job: Job) -> dict[str, Any]:
    return Job.objects.values(*FIELDS).get(pk=job.pk)


def _freeze_after_start(marker: Path, start_worker: StartWorker) -> RunworkerProcess:
    a = start_worker(name="a")
    wait_for(lambda: marker.exists() and marker.read_text(), alive=[a], message="attempt 1")
    a.send(signal.SIGSTOP)
    assert int(marker.read_text()) == a.pid
    return a


def _finish_elsewhere(job: Job, start_worker: StartWorker) -> RunworkerProcess:
    b = start_worker(name="b")
    wait_for(
        lambda: _row(job)["status"] == Status.SUCCEEDED,
        alive=[b],
        message="worker B to reap the frozen attempt and finish the job",
    )
    return b


def test_a_stopped_worker_cannot_overwrite_the_job_it_lost(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    """Runs on SQLite too: the frozen worker sleeps in its task, holding no database lock.

    (A SIGSTOP that lands inside one of A's few-millisecond writes would hold SQLite's write
    lock and block B until busy_timeout; the window is tiny next to the sleep.)
    """
    marker = tmp_path / "started"
    job = sleep_for.enqueue(seconds=1.5, marker=str(marker))
    a = _freeze_after_start(marker, start_worker)
    b = _finish_elsewhere(job, start_worker)
    done_by_b = _row(job)
    assert done_by_b["status"] == Status.SUCCEEDED
    assert (done_by_b["attempt"], done_by_b["result"]) == (2, 1.5)
    assert [(e["attempt"], e["type"]) for e in done_by_b["errors"]] == [(1, "LeaseExpired")]

    a.send(signal.SIGCONT)
    # A wakes, finishes its sleep and tries to record success for attempt 1.
    a.wait_logged(f"job {job.pk} attempt 1: this worker no longer holds the lease")
    a.send(signal.SIGTERM)
    assert a.wait() == 0

    assert _row(job) == done_by_b
    # The body's own autocommit writes are at-least-once: A's late "finished" is there, last.
    assert ledger_with_pids(job) == [
        (1, "started", a.pid),
        (2, "started", b.pid),
        (2, "finished", b.pid),
        (1, "finished", a.pid),
    ]


# PostgreSQL only: an atomic=True task runs its body inside the transaction that records its
# success. On SQLite that transaction is BEGIN IMMEDIATE and holds the database's single write
# lock for the whole body, so a worker frozen mid-body freezes every other writer too: B can
# neither reap nor complete anything until A resumes (tried: B cannot even register itself and
# exits with "database is locked" once busy_timeout passes). On PostgreSQL A's open transaction
# locks only its own Effect row; B goes on.
@pytest.mark.postgres_only
def test_a_stopped_atomic_worker_leaves_exactly_one_effect(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    job = atomic_effect.enqueue(value="paid", sleep=1.5, marker=str(marker))
    a = _freeze_after_start(marker, start_worker)
    # A's Effect row is written but not committed: its transaction is frozen with A.
    assert not Effect.objects.exists()
    _finish_elsewhere(job, start_worker)
    done_by_b = _row(job)
    assert done_by_b["status"] == Status.SUCCEEDED
    assert (done_by_b["attempt"], done_by_b["result"]) == (2, "paid")
    assert [(e["attempt"], e["type"]) for e in done_by_b["errors"]] == [(1, "LeaseExpired")]

    a.send(signal.SIGCONT)
    # A's fenced completion matches no row, so its transaction — and its Effect — roll back.
    a.wait_logged(f"job {job.pk} attempt 1: lease lost; the result was rolled back")
    a.send(signal.SIGTERM)
    assert a.wait() == 0

    assert _row(job) == done_by_b
    assert list(Effect.objects.values_list("job_id", "attempt", "value")) == [(job.pk, 2, "paid")]
