"""Many worker processes drain one table together, and every job runs exactly once."""

from __future__ import annotations

import signal

import pytest
from django.db.models import Count

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.models import LedgerEntry
from testproject.testapp.tasks import ledger_noop
from tests.support.processes import StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

JOBS = 5_000
WORKERS = 4
CONCURRENCY = 4


# PostgreSQL only: this is the multi-process claim of `FOR UPDATE SKIP LOCKED`, where 16 slots in
# 4 processes claim concurrently without waiting on each other's row locks. SQLite serialises
# every claim behind its single write lock, so it has no concurrent claim to get wrong.
@pytest.mark.postgres_only
def test_four_workers_run_every_job_exactly_once(start_worker: StartWorker) -> None:
    workers = [
        start_worker("--concurrency", str(CONCURRENCY), name=f"w{n}") for n in range(WORKERS)
    ]
    for worker in workers:
        worker.wait_started()

    # Enqueued only once all four listen, so that they all compete for the same rows.
    jobs = ledger_noop.enqueue_many([((), {})] * JOBS)
    ids = {job.pk for job in jobs}
    assert len(ids) == JOBS

    wait_for(
        lambda: Job.objects.finished().count() == JOBS,
        alive=workers,
        timeout=120,
        message=f"{JOBS} jobs to finish",
    )
    for worker in workers:
        worker.send(signal.SIGTERM)
    assert [worker.wait() for worker in workers] == [0] * WORKERS

    # Every job succeeded on its first attempt: no job was claimed twice.
    assert set(Job.objects.values_list("pk", flat=True)) == ids
    assert Job.objects.filter(status=Status.SUCCEEDED, attempt=1, errors=[]).count() == JOBS
    # The task body ran exactly once per job.
    assert LedgerEntry.objects.count() == JOBS
    assert LedgerEntry.objects.values("job_id").distinct().count() == JOBS
    assert set(LedgerEntry.objects.values_list("job_id", flat=True)) == ids
    assert not LedgerEntry.objects.exclude(attempt=1).exists()
    # All four processes took part: the claims really were concurrent.
    per_pid = dict(LedgerEntry.objects.values_list("pid").annotate(n=Count("id")))
    assert set(per_pid) == {worker.pid for worker in workers}, per_pid
