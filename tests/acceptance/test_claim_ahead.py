"""Claim ahead of free slots (``WORKQUEUE["CLAIM_AHEAD"]``, ``worker/ahead.py``): a worker
holding a full buffer that dies gives the buffered jobs back uncharged and is charged a crash
for the jobs whose bodies began; a graceful stop gives the buffered jobs back at once; the
buffer never holds more than its bound; a poison pill still ends in the dead-letter queue.

Real ``runworker`` processes and signals. Both databases.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from django_workqueue.maintenance import reaper
from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import crash, sleep_for
from tests.support.database import fresh
from tests.support.processes import RunworkerProcess, StartWorker, restart_until, wait_for
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

SLOTS = 2
AHEAD = {"WORKQUEUE_CLAIM_AHEAD": "1"}  # one more job per slot: a buffer of SLOTS


def _enqueue_sleepers(tmp_path: Path, count: int, seconds: float = 60.0) -> list[Job]:
    return [
        sleep_for.enqueue(seconds=seconds, marker=str(tmp_path / f"began-{n}"))
        for n in range(count)
    ]


def _held(worker: RunworkerProcess) -> tuple[set[int], set[int]]:
    """(jobs whose body began, jobs buffered) of ``worker``, as the database says."""
    rows = Job.objects.filter(status=Status.RUNNING, lease_owner=worker.worker_id)
    began = {pk for pk, ahead in rows.values_list("pk", "claimed_ahead") if not ahead}
    buffered = {pk for pk, ahead in rows.values_list("pk", "claimed_ahead") if ahead}
    return began, buffered


def _full_buffer(worker: RunworkerProcess, tmp_path: Path, jobs: list[Job]) -> tuple[set, set]:
    """Wait until ``worker`` runs SLOTS jobs and holds SLOTS more in its buffer."""

    def full() -> tuple[set[int], set[int]] | None:
        began, buffered = _held(worker)
        markers = {job.pk for n, job in enumerate(jobs) if (tmp_path / f"began-{n}").exists()}
        if len(began) == SLOTS and len(buffered) == SLOTS and markers == began:
            return began, buffered
        return None

    return wait_for(full, alive=[worker], message="two jobs running and two buffered")


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_sigkill_with_a_full_buffer_charges_only_the_jobs_that_began(
    start_worker: StartWorker, tmp_path: Path, pool: str
) -> None:
    jobs = _enqueue_sleepers(tmp_path, 3 * SLOTS)
    a = start_worker("--concurrency", str(SLOTS), "--pool", pool, name="a", env=AHEAD)
    began, buffered = _full_buffer(a, tmp_path, jobs)
    # The bound: never more than SLOTS buffered, the rest left for other workers.
    assert Job.objects.filter(status=Status.READY).count() == SLOTS

    a.send(signal.SIGKILL)
    assert a.wait() == -signal.SIGKILL

    def recovered() -> bool:
        reaper.run_once()  # the fleet's reaper, here: liveness or the 2 s lease
        return not Job.objects.filter(status=Status.RUNNING).exists()

    wait_until(recovered, timeout=30, message="the killed worker's jobs to be reaped")
    rows = {
        job.pk: (job.status, job.attempt, job.attempts_charged, job.crashes_charged)
        for job in Job.objects.filter(pk__in=began | buffered)
    }
    assert {pk: rows[pk] for pk in buffered} == {pk: ("ready", 1, 0, 0) for pk in buffered}
    assert {pk: rows[pk] for pk in began} == {pk: ("ready", 1, 0, 1) for pk in began}
    for job in Job.objects.filter(pk__in=buffered):
        assert job.errors == []
    for job in Job.objects.filter(pk__in=began):
        assert [e["type"] for e in job.errors] == ["LeaseExpired"]


def test_a_graceful_stop_gives_buffered_jobs_back_at_once_uncharged(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    jobs = _enqueue_sleepers(tmp_path, 3 * SLOTS)
    a = start_worker(
        "--concurrency", str(SLOTS), name="a", env={**AHEAD, "WORKQUEUE_GRACE": "60"}
    )  # fmt: skip
    began, buffered = _full_buffer(a, tmp_path, jobs)

    a.send(signal.SIGTERM)
    # Within the grace the running bodies go on; the buffered jobs are back already.
    wait_for(
        lambda: set(Job.objects.filter(pk__in=buffered, status=Status.READY).values_list(
            "pk", flat=True)) == buffered,
        alive=[a], message="the buffered jobs to be given back",
    )  # fmt: skip
    assert set(
        Job.objects.filter(status=Status.RUNNING, lease_owner=a.worker_id).values_list(
            "pk", flat=True
        )
    ) == began  # fmt: skip
    for job in Job.objects.filter(pk__in=buffered):
        assert (job.attempt, job.attempts_charged, job.crashes_charged) == (1, 0, 0)
        assert job.lease_owner is None and job.errors == []
    a.send(signal.SIGKILL)  # the started bodies are not this test's concern
    a.wait()


def test_a_poison_pill_taken_from_the_buffer_still_ends_in_the_dead_letter_queue(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    """One slot busy for a moment, the pill next in line, so it is claimed ahead and the slot
    takes it from the buffer as it frees: its first death may come before the database
    learns it began (given back uncharged, once); it is never claimed ahead again, so its
    crashes are charged and it ends ``failed`` (``crash``: max_attempts=3, lease 1 s)."""
    sleep_for.enqueue(seconds=0.5)
    pill = crash.enqueue()
    crashed, current = restart_until(
        lambda: fresh(pill).status == Status.FAILED,
        lambda n: start_worker("--concurrency", "1", name=f"w{n}", env=AHEAD),
        most=4, timeout=90, message="the poison pill to end failed",
    )  # fmt: skip
    pill.refresh_from_db()
    assert (pill.crashes_charged, pill.attempts_charged) == (3, 0)
    # One death at most went uncharged: the one taken from the buffer.
    assert pill.attempt in (3, 4)
    assert len(crashed) == pill.attempt
    current.send(signal.SIGTERM)
    assert current.wait() == 0
