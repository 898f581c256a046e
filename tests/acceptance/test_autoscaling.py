"""Autoscaling in a real ``runworker --concurrency 1-4`` (SQLite and PostgreSQL): a burst of slow
jobs makes the slots rise to the ceiling, never past it, and an idle second brings them back to
the floor; the registration row shows it all, and no job is cut short by a shrink.

The worker runs ``tests.acceptance.settings_autoscaling`` (``AUTOSCALE_IDLE_SECONDS`` 1 s).
"""

from __future__ import annotations

import pytest

from django_workqueue.models import Job, WorkerProcess
from django_workqueue.states import Status
from testproject.testapp.tasks import sleep_for
from tests.support.processes import StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

SETTINGS = ("--settings", "tests.acceptance.settings_autoscaling")


def test_a_burst_of_slow_jobs_scales_slots_to_the_ceiling_and_idle_brings_them_back(
    start_worker: StartWorker,
) -> None:
    worker = start_worker(*SETTINGS, "--queues", "default", "--concurrency", "1-4")
    worker.wait_started()
    row = WorkerProcess.objects.filter(pk=worker.worker_id)
    assert row.values_list("concurrency", "concurrency_min", "concurrency_max").get() == (1, 1, 4)
    observed: list[tuple[int, int]] = []  # (slots in the row, jobs running), at each look

    def look() -> tuple[int, int]:
        sample = (row.get().concurrency, Job.objects.filter(status=Status.RUNNING).count())
        observed.append(sample)
        return sample

    jobs = sleep_for.enqueue_many([((0.3,), {}) for _ in range(24)])

    wait_for(lambda: look()[0] == 4, alive=[worker], timeout=30, message="slots at the ceiling")
    wait_for(lambda: look() and not Job.objects.exclude(status=Status.SUCCEEDED).exists(),
             alive=[worker], timeout=60, message="the burst done")  # fmt: skip
    wait_for(lambda: look()[0] == 1, alive=[worker], timeout=30, message="slots back at 1")

    assert max(slots for slots, _ in observed) == 4
    assert max(running for _, running in observed) <= 4
    attempts = set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("attempt"))
    assert attempts == {(1,)}  # no job was interrupted by a shrink and run again
    assert "1 -> 2 slots" in worker.stderr
    assert "4 -> 1 slots" in worker.stderr
