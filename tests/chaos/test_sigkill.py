"""1. Random SIGKILL of busy workers: nothing is lost, every orphan is recovered in time.

Real ``runworker`` processes under a supervisor that restarts them; the test SIGKILLs workers that
hold running jobs, at even intervals over the length of a fault-free run of the same size, and
then checks the ledger and the table (``harness.check_invariants``).

Pass criteria: 0 jobs lost and every invariant of the checker; every orphan's next attempt starts
within lease + reaper interval + 2 s of the kill; in the full run (4 workers x 8 slots, 10,000 jobs,
100 kills) the faulted run takes at most 1.5x the fault-free one. Both databases.
"""

from __future__ import annotations

import random
import time
from datetime import datetime
from pathlib import Path

import pytest
from django.db import connection

from django_workqueue.models import Job
from testproject.testapp.tasks import chaos_atomic, chaos_work

from .harness import (
    FULL,
    Ledger,
    StartWorker,
    Supervisor,
    check_invariants,
    record,
    size,
    wait_all_terminal,
)

pytestmark = [pytest.mark.chaos, pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WORKERS = size(2, 4)
SLOTS = size(4, 8)
JOBS = size(400, 10_000)
KILLS = size(5, 100)
SLEEP = size(0.04, 0.15)  # seconds of work per job, so that kills find busy workers
LEASE_SECONDS = 2  # chaos tasks' lease: an orphan's lease expires at most this long after a kill
REAPER_INTERVAL = 0.2  # tests.acceptance.processes.FAST_SETTINGS
RECOVERY_BOUND = LEASE_SECONDS + REAPER_INTERVAL + 2.0
MAX_SLOWDOWN = 1.5


def enqueue(ledger: Ledger) -> list[int]:
    """JOBS jobs, one in four ``atomic=True`` (a transactional effect), in two bulk inserts.

    On SQLite an atomic body holds the one write lock while it runs, so there they do not sleep:
    back-to-back 40 ms bodies starve heartbeats past a 2 s lease (see docs/explanation/sqlite.md).
    """
    kwargs = {"ledger": str(ledger), "sleep": SLEEP}
    atomic_sleep = SLEEP if connection.vendor == "postgresql" else 0.0
    atomic = chaos_atomic.enqueue_many([((), {**kwargs, "sleep": atomic_sleep})] * (JOBS // 4))
    plain = chaos_work.enqueue_many([((), kwargs)] * (JOBS - JOBS // 4))
    return [job.pk for job in atomic + plain]


def run(start_worker: StartWorker, ledger: Ledger, kills: int, seed: int, pace: float) -> dict:
    """Drain a fresh batch while killing ``kills`` busy workers, one every ``pace`` seconds."""
    rng = random.Random(seed)
    supervisor = Supervisor(start_worker, WORKERS, ["--concurrency", str(SLOTS)], name=f"k{kills}-")
    supervisor.wait_started()
    job_ids = enqueue(ledger)
    started = time.monotonic()
    next_kill = started + pace

    def maybe_kill() -> None:
        nonlocal next_kill
        due = len(supervisor.kills) < kills and time.monotonic() >= next_kill
        if due and supervisor.kill_busy(rng) is not None:
            next_kill += pace

    elapsed = wait_all_terminal(
        timeout=size(120, 900), supervisor=supervisor, while_waiting=maybe_kill
    )
    assert not supervisor.unexpected_exits, supervisor.describe()
    report = check_invariants(job_ids, ledger, supervisor.faulted)
    print(report)
    report.assert_ok()

    # Each orphan is recovered (reaped: its LeaseExpired error is stamped with the database's
    # clock, which is this machine's) within the bound; its next attempt's start is reported.
    reaped_at = {}
    for job in Job.objects.filter(pk__in={j for kill in supervisor.kills for j, _ in kill.orphans}):
        for error in job.errors:
            if error["type"] == "LeaseExpired":
                reaped_at[job.pk, error["attempt"]] = datetime.fromisoformat(
                    error["at"]
                ).timestamp()
    next_start: dict[tuple[int, int], float] = {}
    for entry in sorted(ledger.entries(), key=lambda e: e.t):
        if entry.kind == "start":
            for attempt in range(1, entry.attempt):
                next_start.setdefault((entry.job, attempt), entry.t)
    orphans = [(kill.at, orphan) for kill in supervisor.kills for orphan in kill.orphans]
    recoveries = [reaped_at[orphan] - at for at, orphan in orphans]
    restarts = [next_start[orphan] - at for at, orphan in orphans]
    late = [round(r, 2) for r in recoveries if r > RECOVERY_BOUND]
    assert not late, f"orphans recovered later than {RECOVERY_BOUND}s after the kill: {late}"
    supervisor.stop_all()
    return {
        "seconds": round(elapsed, 2),
        "kills": len(supervisor.kills),
        "orphans": len(recoveries),
        "recovery_max_s": round(max(recoveries, default=0.0), 2),
        "next_attempt_max_s": round(max(restarts, default=0.0), 2),
        "reruns": report.duplicate_attempts,
        "jobs": report.jobs,
        "lost": sum(n for s, n in report.by_status.items() if s != "succeeded"),
    }


def test_random_sigkills_lose_nothing(start_worker: StartWorker, tmp_path: Path) -> None:
    clean = run(start_worker, Ledger(tmp_path / "clean.jsonl"), 0, seed=1, pace=1.0)
    assert clean["reruns"] == 0, "a fault-free run re-ran jobs"
    # Spread the kills over 80% of the fault-free run's length.
    pace = clean["seconds"] * 0.8 / (KILLS + 1)
    faulted = run(start_worker, Ledger(tmp_path / "faulted.jsonl"), KILLS, seed=2, pace=pace)
    assert faulted["kills"] == KILLS, f"only {faulted['kills']} of {KILLS} kills found busy work"
    slowdown = faulted["seconds"] / clean["seconds"]
    record(
        "sigkill",
        workers=WORKERS,
        slots=SLOTS,
        clean=clean,
        faulted=faulted,
        slowdown=round(slowdown, 2),
        jobs_in_table=Job.objects.count(),
    )
    if FULL:
        assert slowdown <= MAX_SLOWDOWN, f"faulted run took {slowdown:.2f}x the fault-free one"
