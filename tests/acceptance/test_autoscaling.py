"""Autoscaling in a real ``runworker --concurrency 1-4`` (SQLite and PostgreSQL): a burst of slow
jobs makes the slots rise to the ceiling, never past it, and an idle second brings them back to
the floor; the registration row shows it all, and no job is cut short by a shrink.

The worker runs ``tests.acceptance.settings_autoscaling`` (``AUTOSCALE_IDLE_SECONDS`` 1 s).
"""

from __future__ import annotations

import pytest

from django_workqueue.models import Job, WorkerProcess
from django_workqueue.states import Status
from testproject.testapp.models import LedgerEntry
from testproject.testapp.tasks import sleep_for
from tests.support.processes import StartWorker, wait_for

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

SETTINGS = ("--settings", "tests.acceptance.settings_autoscaling")


def most_bodies_at_once() -> int:
    """The most ``sleep_for`` bodies that ran at once, from their ledger rows in write order
    (each body writes "started" before its sleep and "finished" after it). Rows in status
    running would overcount: a finished job stays running until its outcome is written."""
    running = most = 0
    for note in LedgerEntry.objects.order_by("id").values_list("note", flat=True):
        running += 1 if note == "started" else -1
        most = max(most, running)
    return most


def test_a_burst_of_slow_jobs_scales_slots_to_the_ceiling_and_idle_brings_them_back(
    start_worker: StartWorker,
) -> None:
    worker = start_worker(*SETTINGS, "--queues", "default", "--concurrency", "1-4")
    worker.wait_started()
    row = WorkerProcess.objects.filter(pk=worker.worker_id)
    assert row.values_list("concurrency", "concurrency_min", "concurrency_max").get() == (1, 1, 4)
    observed: list[int] = []  # the slots the row shows, at each look

    def look() -> int:
        observed.append(row.get().concurrency)
        return observed[-1]

    jobs = sleep_for.enqueue_many([((0.3,), {}) for _ in range(24)])

    wait_for(lambda: look() == 4, alive=[worker], timeout=30, message="slots at the ceiling")
    wait_for(lambda: look() and not Job.objects.exclude(status=Status.SUCCEEDED).exists(),
             alive=[worker], timeout=60, message="the burst done")  # fmt: skip
    wait_for(lambda: look() == 1, alive=[worker], timeout=30, message="slots back at 1")

    assert max(observed) == 4
    assert most_bodies_at_once() == 4
    attempts = set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("attempt"))
    assert attempts == {(1,)}  # no job was interrupted by a shrink and run again
    assert f"worker {worker.worker_id}: 1 -> 2 slots" in worker.stderr
