"""6. Graceful shutdown under load: SIGTERM with short and long jobs in flight behaves as
documented (docs/reference/runworker.md, "Stopping"; docs/explanation/guarantees.md).

What is documented for the first SIGTERM: the worker stops claiming and keeps renewing leases
while running jobs finish, for up to ``SHUTDOWN_GRACE_SECONDS``; jobs still running then are
released: their row goes back to ``ready`` at once without using an attempt (``attempt`` stays,
neither budget is spent, no error is recorded); the process exits with status 0.

Real workers under the supervisor, a feeder keeping short jobs (0.4 s) and long ones (the grace
+ 3 s) queued. Each round SIGTERMs a worker that holds both a short job and a long one that
cannot finish within the grace; the supervisor starts a replacement. After the rounds every
worker is SIGTERMed at once, and a fresh ``--burst`` worker drains what is left.

Pass criteria, both databases (fast: 3 workers x 4 slots, grace 2.5 s, 3 rounds; full: 4 x 8,
grace 5 s, 20 rounds). For every SIGTERMed worker:

- it exits with status 0 within grace + 5 s of the signal, says it is draining, removes its
  ``WorkerProcess`` row, and leaves 0 jobs leased to it;
- every short job it held finished there, on the attempt it held (0 short jobs released);
- every long job it held with more than grace + 1 s of work left is released (logged), and only
  long jobs are released;
- it starts no job later than 1 s after the signal (it stops claiming).

And over the whole run: every job succeeded with 0 errors (no lease ever expired, the grace
renewing them), attempt == 1 + its releases, max_attempts == 20 and attempts_charged == 1 (a
release spends nothing); the only re-run attempts are released ones; exactly one ``Effect`` per
atomic job, by its final attempt (a released atomic body rolls back); every invariant of
``check_invariants``; the fresh worker exits 0; no worker exits on its own.
"""

from __future__ import annotations

import itertools
import random
import re
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.db import connection

from django_workqueue.models import Job, WorkerProcess
from django_workqueue.states import Status
from testproject.testapp.tasks import chaos_atomic, chaos_work
from tests.support.processes import RunworkerProcess, wait_for

from .harness import (
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
SLOTS = size(4, 8)
ROUNDS = size(3, 20)
GRACE = size(2.5, 5.0)  # > the chaos tasks' 2 s lease: leases must be renewed during the grace
SHORT = 0.4
LONG = GRACE + 3.0
MARGIN = 1.0  # a long job with more than grace + MARGIN left must be released
EXIT_BOUND = 5.0  # seconds past the grace by which the worker has exited
LATE_START = 1.0  # a job started this long after the signal was claimed after it
BUDGET = 20  # the chaos tasks' max_attempts
RELEASED = re.compile(r"job (\d+) released back to ready at shutdown")


@dataclass(frozen=True, slots=True)
class Held:
    """A job a worker held when it was signalled."""

    attempt: int
    long: bool
    started: float  # when its body started (the ledger), or when it was seen if not yet


@dataclass(slots=True)
class Stopped:
    """What one SIGTERMed worker did."""

    worker_id: str
    exit_s: float
    released: dict[int, int]  # job id -> the attempt it gave back
    finished: int  # held jobs it finished within the grace


def enqueue_mix(ledger: Ledger, atomic_long: bool) -> list[int]:
    """One top-up of the backlog: 16 short jobs (4 of them atomic) and a long one (atomic on
    PostgreSQL every other time: a released atomic body must roll back). Short jobs take long
    enough that the slots do not fill up with long ones."""
    kwargs = {"ledger": str(ledger)}
    # SQLite: an atomic body holds the one write lock; keep it short there.
    atomic_short = SHORT if connection.vendor == "postgresql" else 0.0
    jobs = chaos_work.enqueue_many([((), {**kwargs, "sleep": SHORT})] * 12)
    jobs += chaos_atomic.enqueue_many([((), {**kwargs, "sleep": atomic_short})] * 4)
    long_task = chaos_atomic if atomic_long and connection.vendor == "postgresql" else chaos_work
    jobs += long_task.enqueue_many([((), {**kwargs, "sleep": LONG})])
    return [job.pk for job in jobs]


def held_by_owner(ledger: Ledger) -> dict[str, dict[int, Held]]:
    """The running jobs of each lease owner, now."""
    now = time.time()
    starts = {(e.job, e.attempt): e.t for e in ledger.entries() if e.kind == "start"}
    held: dict[str, dict[int, Held]] = {}
    for job_id, attempt, owner, kwargs in Job.objects.filter(status=Status.RUNNING).values_list(
        "id", "attempt", "lease_owner", "kwargs"
    ):
        started = starts.get((job_id, attempt), now)
        held.setdefault(owner, {})[job_id] = Held(attempt, kwargs["sleep"] >= LONG, started)
    return held


def must_release(item: Held, signalled_at: float) -> bool:
    return item.long and item.started + LONG - signalled_at > GRACE + MARGIN


def pick_busy(
    supervisor: Supervisor, ledger: Ledger, rng: random.Random, top_up: Callable[[], None]
) -> RunworkerProcess:
    """A worker that holds a short job and a long one it cannot finish within the grace."""

    def candidates() -> list[tuple[RunworkerProcess, dict[int, Held]]]:
        top_up()
        held = held_by_owner(ledger)
        now = time.time()
        found = []
        for worker in supervisor.workers:
            jobs = held.get(worker.worker_id, {})
            short = any(not h.long for h in jobs.values())
            if worker.alive and short and any(must_release(h, now + 0.5) for h in jobs.values()):
                found.append((worker, jobs))
        return found

    found = wait_for(candidates, timeout=60, message="a worker busy with short and long jobs")
    return rng.choice(found)[0]


def terminate(
    workers: list[RunworkerProcess], supervisor: Supervisor, ledger: Ledger
) -> list[Stopped]:
    """SIGTERM ``workers`` at once and check each one's shutdown against the documentation."""
    held = held_by_owner(ledger)
    signalled_at = time.time()
    for worker in workers:
        supervisor.faulted.add(worker.worker_id)  # an exit the test caused, not a crash
        worker.send(signal.SIGTERM)
    results = []
    for worker in workers:
        code = worker.wait(timeout=GRACE + EXIT_BOUND + 60)
        exit_s = time.time() - signalled_at
        results.append(check_shutdown(worker, code, exit_s, held.get(worker.worker_id, {}),
                                      signalled_at, ledger))  # fmt: skip
    return results


def check_shutdown(
    worker: RunworkerProcess,
    code: int,
    exit_s: float,
    held: dict[int, Held],
    signalled_at: float,
    ledger: Ledger,
) -> Stopped:
    log = worker.stderr
    assert code == 0, worker.describe()
    assert exit_s <= GRACE + EXIT_BOUND, f"exited {exit_s:.2f}s after SIGTERM\n{worker.describe()}"
    assert "SIGTERM: draining" in log and "stopped after" in worker.stdout, worker.describe()
    assert not WorkerProcess.objects.filter(id=worker.worker_id).exists()
    # Finished or released, nothing is left leased to it (a release is at once, not by expiry).
    leased = list(Job.objects.filter(lease_owner=worker.worker_id).values_list("id", "status"))
    assert not leased, f"jobs still leased to {worker.worker_id} after it exited: {leased}"

    mine = [e for e in ledger.entries() if e.owner == worker.worker_id and e.kind == "start"]
    # A job held before the signal may start its body late on a busy machine; others may not.
    late = [
        (e.job, round(e.t - signalled_at, 2))
        for e in mine
        if e.t > signalled_at + LATE_START and e.job not in held
    ]
    assert not late, f"{worker.worker_id} started jobs after SIGTERM: {late}"
    attempt_of = {job_id: item.attempt for job_id, item in held.items()}
    attempt_of.update((e.job, e.attempt) for e in sorted(mine, key=lambda e: e.t))
    released = {int(n): attempt_of.get(int(n), 0) for n in RELEASED.findall(log)}
    kinds = dict(Job.objects.filter(pk__in=released).values_list("id", "kwargs"))
    short_released = [j for j in released if kinds[j]["sleep"] < LONG]
    assert not short_released, f"short jobs released instead of finished: {short_released}"
    overdue = [j for j, h in held.items() if must_release(h, signalled_at) and j not in released]
    assert not overdue, f"long jobs not released past the grace: {overdue}\n{worker.describe()}"
    finished = 0
    rows = dict(Job.objects.filter(pk__in=held).values_list("id", "status"))
    attempts = dict(Job.objects.filter(pk__in=held).values_list("id", "attempt"))
    for job_id, item in held.items():
        if job_id in released:
            assert released[job_id] == item.attempt
            continue
        # Not released: it finished here, on the attempt this worker held, within the grace.
        assert (rows[job_id], attempts[job_id]) == (Status.SUCCEEDED, item.attempt), (
            job_id, rows[job_id], attempts[job_id], item, worker.describe(),
        )  # fmt: skip
        finished += 1
    return Stopped(worker.worker_id, exit_s, released, finished)


def test_sigterm_under_load(start_worker: StartWorker, ledger: Ledger) -> None:
    rng = random.Random(6)
    env = {"WORKQUEUE_GRACE": str(GRACE)}
    supervisor = Supervisor(
        start_worker, WORKERS, ["--concurrency", str(SLOTS)], name="sd", env=env
    )
    supervisor.wait_started()
    job_ids: list[int] = []
    top_ups = itertools.count()

    def top_up() -> None:
        while Job.objects.filter(status=Status.READY).count() < WORKERS * SLOTS * 3:
            job_ids.extend(enqueue_mix(ledger, atomic_long=next(top_ups) % 2 == 1))

    top_up()
    stopped: list[Stopped] = []
    for _ in range(ROUNDS):
        top_up()
        supervisor.poll()
        supervisor.wait_started()
        worker = pick_busy(supervisor, ledger, rng, top_up)
        stopped += terminate([worker], supervisor, ledger)
        top_up()
    supervisor.poll()
    supervisor.wait_started()
    pick_busy(supervisor, ledger, rng, top_up)  # the last SIGTERM finds them busy too
    stopped += terminate(supervisor.workers, supervisor, ledger)
    assert not supervisor.unexpected_exits, supervisor.describe()

    drainer = start_worker("--burst", "--concurrency", str(SLOTS * 2), name="drain", env=env)
    assert drainer.wait(timeout=size(120, 600)) == 0, drainer.describe()
    wait_all_terminal(timeout=10)

    terminated = {s.worker_id for s in stopped}
    report = check_invariants(job_ids, ledger, terminated)
    print(report)
    report.assert_ok()
    releases = Counter(j for s in stopped for j in s.released)
    gave_back = {(j, a) for s in stopped for j, a in s.released.items()}
    wrong = []
    for job in Job.objects.all():
        expected = (Status.SUCCEEDED, [], 1 + releases[job.pk], BUDGET, 1)
        actual = (job.status, job.errors, job.attempt, job.max_attempts, job.attempts_charged)
        if actual != expected:
            wrong.append((job.pk, *actual))
    assert not wrong, f"jobs whose attempts do not match their releases: {wrong[:10]}"
    final = dict(Job.objects.values_list("id", "attempt"))
    rerun = {(e.job, e.attempt) for e in ledger.entries() if e.attempt != final[e.job]}
    assert rerun <= gave_back, f"re-runs that were not releases: {rerun - gave_back}"
    drained = sum(1 for e in ledger.entries() if e.owner == drainer.worker_id and e.kind == "start")
    record(
        "shutdown_under_load",
        workers=WORKERS,
        slots=SLOTS,
        grace_s=GRACE,
        long_s=LONG,
        rounds=ROUNDS,
        sigterms=len(stopped),
        jobs=len(job_ids),
        held_finished_in_grace=sum(s.finished for s in stopped),
        released=sum(releases.values()),
        exit_max_s=round(max(s.exit_s for s in stopped), 2),
        reruns=report.duplicate_attempts,
        repeated_effects=report.duplicate_effects,
        drained_by_fresh_worker=drained,
    )
