"""4. Long jobs: a job that runs many times its lease, with its lease renewed, is never rescued.

Several real workers run long jobs (leases of 1 and 2 s, bodies of 3.5x the lease in the fast
variant, 10x in full: 10 and 20 s) while a feeder keeps a backlog of short jobs queued the
whole time, so every worker claims, completes and renews under load. On PostgreSQL some long
jobs are ``atomic=True`` (their body holds a transaction open the whole time).

Pass criteria, both databases (fast: 3 workers x 3 slots, 4 long jobs; full: 4 workers x 4
slots, 8 long jobs):

- 0 ``LeaseExpired`` errors, on the long jobs and on every other job: no job was ever reaped;
- every job succeeded with attempt == 1, and the ledger holds exactly one start per job (0 re-runs);
- each long job's body ran for at least its length (>= 3.5x / 10x its lease, by the ledger);
- at least 100 short jobs (full: 1,000) ran while the long jobs were running;
- every invariant of ``check_invariants`` with no faulted worker; no worker exited.
"""

from __future__ import annotations

import time

import pytest
from django.db import connection
from django.utils import timezone

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import chaos_atomic, chaos_work

from .harness import (
    TERMINAL,
    Ledger,
    StartWorker,
    Supervisor,
    check_invariants,
    record,
    size,
    wait_all_terminal,
)

pytestmark = [pytest.mark.chaos, pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WORKERS = size(3, 4)
SLOTS = size(3, 4)
LONG_JOBS = size(4, 8)  # half with a 1 s lease, half with 2 s
LEASES = (1, 2)
LENGTH = size(3.5, 10.0)  # a long job's body, in leases
SHORT_SLEEP = 0.02
MIN_SHORT_DURING = size(100, 1_000)  # short jobs that must run alongside the long ones
BATCH = 50  # short jobs per top-up of the backlog


def enqueue_long(ledger: Ledger) -> dict[int, int]:
    """The long jobs, claimed first (priority 10): {id: lease seconds}."""
    jobs: dict[int, int] = {}
    for n in range(LONG_JOBS):
        lease = LEASES[n % 2]
        # On PostgreSQL one long job of each lease is atomic: a transaction open for its length.
        atomic = connection.vendor == "postgresql" and n < 2
        task = (chaos_atomic if atomic else chaos_work).using(lease_seconds=lease, priority=10)
        jobs[task.enqueue(ledger=str(ledger), sleep=lease * LENGTH).pk] = lease
    return jobs


def test_long_jobs_are_never_rescued(start_worker: StartWorker, ledger: Ledger) -> None:
    supervisor = Supervisor(start_worker, WORKERS, ["--concurrency", str(SLOTS)], name="long")
    supervisor.wait_started()
    short_ids: list[int] = []

    def top_up() -> None:
        """Keep short jobs waiting, so every worker stays busy around the long ones."""
        if Job.objects.filter(status=Status.READY).count() < WORKERS * SLOTS:
            kwargs = {"ledger": str(ledger), "sleep": SHORT_SLEEP}
            plain = chaos_work.enqueue_many([((), kwargs)] * (BATCH - BATCH // 5))
            # SQLite: an atomic body holds the one write lock; keep it short (no sleep).
            atomic = chaos_atomic.enqueue_many([((), {**kwargs, "sleep": 0.0})] * (BATCH // 5))
            short_ids.extend(job.pk for job in plain + atomic)

    top_up()
    long_jobs = enqueue_long(ledger)
    top_up()
    min_margin = float("inf")
    deadline = time.monotonic() + max(LEASES) * LENGTH + size(60, 180)
    while Job.objects.filter(pk__in=long_jobs).exclude(status__in=list(TERMINAL)).exists():
        assert time.monotonic() < deadline, "long jobs still running\n" + supervisor.describe()
        supervisor.poll()
        top_up()
        now = timezone.now()
        for expires in Job.objects.filter(
            pk__in=long_jobs, status=Status.RUNNING, lease_expires_at__isnull=False
        ).values_list("lease_expires_at", flat=True):
            min_margin = min(min_margin, (expires - now).total_seconds())
        time.sleep(0.1)
    wait_all_terminal(timeout=size(60, 300), supervisor=supervisor)
    assert not supervisor.unexpected_exits, supervisor.describe()
    supervisor.stop_all()

    all_ids = [*long_jobs, *short_ids]
    report = check_invariants(all_ids, ledger, set())
    print(report)
    report.assert_ok()
    rescued = [
        (job.pk, job.attempt, job.errors)
        for job in Job.objects.all()
        if job.attempt != 1 or job.errors
    ]
    assert not rescued, f"{len(rescued)} job(s) re-run or with errors: {rescued[:10]}"
    assert report.attempts_started == len(all_ids)
    assert report.duplicate_attempts == 0

    entries = ledger.entries()
    starts = {e.job: e.t for e in entries if e.kind == "start"}
    ends = {e.job: e.t for e in entries if e.kind == "effect"}
    lengths = {}
    for job in Job.objects.filter(pk__in=long_jobs):
        # Atomic jobs write no ledger effect: their row's times measure the body.
        if job.pk in ends:
            ran = ends[job.pk] - starts[job.pk]
        else:
            ran = (job.finished_at - job.started_at).total_seconds()
        lengths[job.pk] = ran / long_jobs[job.pk]
    short_ones = [e for e in short_ids if e in starts]
    window = (
        min(starts[j] for j in long_jobs),
        max(starts[j] + lease * LENGTH for j, lease in long_jobs.items()),
    )
    during = sum(1 for j in short_ones if window[0] <= starts[j] <= window[1])
    record(
        "long_jobs",
        workers=WORKERS,
        slots=SLOTS,
        long_jobs=len(long_jobs),
        leases_s=list(LEASES),
        min_length_in_leases=round(min(lengths.values()), 2),
        short_jobs=len(short_ids),
        short_jobs_during_long=during,
        min_lease_margin_s=round(min_margin, 2),
        lease_expired_errors=0,
        reruns=report.duplicate_attempts,
    )
    short_of_length = {j: round(n, 2) for j, n in lengths.items() if n < LENGTH * 0.99}
    assert not short_of_length, f"long jobs that ran less than {LENGTH} leases: {short_of_length}"
    assert during >= MIN_SHORT_DURING, f"only {during} short jobs ran alongside the long ones"
