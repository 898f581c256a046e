"""Slots in a running worker (SQLite and PostgreSQL): budgets per queue bound each queue's claims,
and ``operations.scale_worker`` resizes a worker at its heartbeat without interrupting a job.

Workers run on threads and read committed rows: ``transaction=True``.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from django_workqueue import operations, task
from django_workqueue.models import Job, WorkerProcess
from django_workqueue.states import Status
from django_workqueue.worker.runner import Worker
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

#: Set by a test to let every ``held`` job finish.
released = threading.Event()
#: The abort reason each ``held`` job saw when it finished (None: never told to stop).
seen_reasons: dict[int, str | None] = {}


@task(max_attempts=1, lease_seconds=30)
def held(context: Any) -> None:
    assert released.wait(20), "the test never released the jobs"
    seen_reasons[context.job_id] = context.abort_reason


@pytest.fixture(autouse=True)
def fresh_release():
    released.clear()
    seen_reasons.clear()
    yield
    released.set()  # a failing test must not leave slots waiting


class CountedPasses(Worker):
    """Counts finished claim steps, so a test can wait for passes that could have claimed."""

    fills = 0

    def _fill(self) -> int:
        claimed = super()._fill()
        self.fills += 1
        return claimed


@pytest.fixture
def counted_worker():
    """Start a ``CountedPasses`` worker on a thread; stopped (after the release) at the end."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(**options: Any) -> CountedPasses:
        worker = CountedPasses(poll_interval=0.05, **options)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        assert worker.started.wait(10), "worker did not start"
        started.append((worker, thread))
        return worker

    yield start
    released.set()
    for worker, thread in started:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"


def row_shows(worker: Worker, **fields: Any) -> bool:
    return WorkerProcess.objects.filter(pk=worker.id, **fields).exists()


def running_by_queue() -> dict[str, int]:
    rows = Job.objects.filter(status=Status.RUNNING).values_list("queue", flat=True)
    counts: dict[str, int] = {}
    for queue in rows:
        counts[queue] = counts.get(queue, 0) + 1
    return counts


def alive_slots(worker: Worker) -> int:
    return sum(thread.is_alive() for thread in worker._slots)


def test_claims_for_a_queue_never_exceed_its_slots(counted_worker):
    for _ in range(5):
        held.enqueue()
    for _ in range(4):
        held.using(queue="mail").enqueue()
    worker = counted_worker(queue_slots={"default": 3, "mail": 1})
    assert worker.concurrency == 4

    wait_until(lambda: running_by_queue() == {"default": 3, "mail": 1}, message="slots full")
    passes = worker.fills
    wait_until(lambda: worker.fills >= passes + 3, message="three more passes")
    assert running_by_queue() == {"default": 3, "mail": 1}
    assert Job.objects.filter(status=Status.READY).count() == 5
    assert alive_slots(worker) == 4

    released.set()
    wait_until(lambda: Job.objects.filter(status=Status.SUCCEEDED).count() == 9, timeout=30)


def test_a_flooded_queue_does_not_take_the_slots_of_another(counted_worker):
    """Eight jobs of default (higher priority, enqueued first) wait while one of mail comes:
    mail's own slot takes it."""
    for _ in range(8):
        held.using(priority=10).enqueue()
    counted_worker(queue_slots={"default": 2, "mail": 1})
    wait_until(lambda: running_by_queue() == {"default": 2}, message="default's slots full")

    mail = held.using(queue="mail").enqueue()

    wait_until(lambda: running_by_queue() == {"default": 2, "mail": 1})
    mail.refresh_from_db()
    assert mail.status == Status.RUNNING


def test_the_registration_row_shows_the_slots_per_queue(background_worker):
    worker = background_worker(queue_slots={"default": 3, "mail": 1})

    row = WorkerProcess.objects.get(pk=worker.id)
    assert (row.queues, row.queue_slots, row.concurrency) == (
        ["default", "mail"], {"default": 3, "mail": 1}, 4,
    )  # fmt: skip
    assert (row.concurrency_min, row.concurrency_max) == (None, None)


@pytest.fixture
def quick_heartbeat():
    with workqueue_settings(HEARTBEAT_INTERVAL=0.1):
        yield


def test_scale_worker_grows_a_worker_at_its_heartbeat(background_worker, quick_heartbeat):
    worker = background_worker(concurrency=1)
    for _ in range(3):
        held.enqueue()
    wait_until(lambda: running_by_queue() == {"default": 1})

    result = operations.scale_worker(worker.id, 3)

    assert result.action == "scale_requested"
    wait_until(lambda: running_by_queue() == {"default": 3}, message="two more slots claimed")
    wait_until(lambda: row_shows(worker, concurrency=3, requested_concurrency=None))
    assert worker.concurrency == 3
    assert alive_slots(worker) == 3
    released.set()
    wait_until(lambda: Job.objects.filter(status=Status.SUCCEEDED).count() == 3)


def test_scale_worker_shrinks_a_worker_without_interrupting_its_jobs(
    background_worker, quick_heartbeat
):
    worker = background_worker(concurrency=3)
    jobs = [held.enqueue() for _ in range(4)]
    wait_until(lambda: running_by_queue() == {"default": 3})

    operations.scale_worker(worker.id, 1)

    wait_until(lambda: row_shows(worker, concurrency=1, requested_concurrency=None))
    assert worker.concurrency == 1
    assert alive_slots(worker) == 3  # each slot still in its job
    released.set()
    wait_until(lambda: Job.objects.filter(status=Status.SUCCEEDED).count() == 4, timeout=30)
    wait_until(lambda: alive_slots(worker) == 1, message="two slots retired after their jobs")
    for job in jobs:
        job.refresh_from_db()
        assert (job.status, job.attempt) == (Status.SUCCEEDED, 1)
    assert set(seen_reasons.values()) == {None}  # no job was told to stop


def test_an_autoscaling_worker_takes_a_request_within_its_range(background_worker, quick_heartbeat):
    worker = background_worker(concurrency=1, max_concurrency=4)
    row = WorkerProcess.objects.get(pk=worker.id)
    assert (row.concurrency, row.concurrency_min, row.concurrency_max) == (1, 1, 4)

    operations.scale_worker(worker.id, 3)

    wait_until(lambda: row_shows(worker, concurrency=3, requested_concurrency=None))
    assert worker.concurrency == 3
