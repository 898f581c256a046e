"""7. Claim race: many claimers over one table; no job claimed twice, no deadlock, priority kept.

Real ``runworker`` processes (full: 4 processes x 16 slots, 50,000 jobs over 5 queues x 3
priorities; fast: 2 x 4, 2,000) all serve the five queues. Every job is enqueued in one
transaction once all workers are up, so the whole backlog becomes claimable at one instant and
every worker races for it from the first claim. Each job is a ``chaos_work`` with no sleep: the
claims themselves are the load. No faults are injected. The test runs on both databases, at the
same sizes: on PostgreSQL it is the ``FOR UPDATE SKIP LOCKED`` race; SQLite serialises every
claim behind its write lock, where the no-double-claim criterion still has to hold.

In this engine a process's slots do not claim: its control thread claims for all free slots in
one statement, so there are as many concurrent claimers as processes, each taking up to 16 jobs.
The slots of a ``chaos_work`` never touch the database, so they open no connection: a worker
holds its control connection and, on PostgreSQL, its LISTEN connection (2 per process, 8 in the
full run, well inside the shared server's 100).

The fifth queue: ``testproject/settings.py`` reads ``WORKQUEUE_QUEUES`` (comma-separated) for the
worker processes; this test process gets the same list through the ``settings`` fixture.

Pass criteria (fault-free run, so every number is exact):

- 0 jobs lost and every invariant of ``harness.check_invariants``; in particular each
  (job, attempt) has exactly 1 lease owner in the ledger, and exactly 1 ledger ``start`` line;
- every job succeeded at attempt 1 with 0 errors (a deadlock or serialization failure that
  reached a job would show as an error or a second attempt);
- 0 worker log lines mentioning a deadlock, a serialization failure, "database is locked", a
  failed control-loop step, a lost lease or a reaped job, and 0 unexpected worker exits;
- every worker process claimed jobs (the race really had every claimer in it);
- priority within a queue, at claim granularity (below): at most 0 late jobs per
  (queue, priority) on SQLite, at most (processes - 1) x slots on PostgreSQL;
- PostgreSQL: at most processes x (slots + 2) connections to the test database at any sample.

What is honestly checkable about priority. A claim is one statement that takes the first
``limit`` (free slots) ready rows in ``priority DESC, run_after, id`` order, and stamps them with
its own clock as ``started_at``: the time the claim began. A job's claim had committed before the
job wrote its ledger ``start`` line, which bounds the claim's end from above. Call a job H of
queue q *late* for priority p < H's priority when H's claim began after the end of the first
claim that took a priority-p job of q: H was still unclaimed while that claim ran, and was not
taken by it although it comes first in the claim's order. This is checked at the granularity of
claims (a claim takes a batch, so jobs within one batch are not ordered); the bounds are:

- SQLite: claims take turns under the one write lock, so a higher-priority row still unclaimed
  is ready and visible to every later claim: 0 late jobs.
- PostgreSQL: a claim skips rows that concurrent claims hold locked. Each worker has one claim
  in flight at a time, and each claim locks at most ``limit`` <= slots rows per queue (one
  LATERAL branch per queue, merged and cut to ``limit``: rows of a queue it locked but did not
  take are skipped by others until it commits). So a claim can skip at most
  (processes - 1) x slots higher-priority rows of q, and only skipped rows can be late.

Jobs are enqueued lowest priority first (lowest ids, earliest ``run_after``), so an engine that
ignored priority would start thousands of jobs late and fail the check.
"""

from __future__ import annotations

import bisect
import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection, transaction

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import chaos_work

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

WORKERS = size(2, 4)
SLOTS = size(4, 16)
JOBS = size(2_000, 50_000)
QUEUES = ["default", "mail", "reports", "low", "bulk"]
PRIORITIES = [-5, 0, 5]  # enqueued in this order: lowest priority first
CHUNK = 500  # jobs per enqueue_many (one INSERT each)

# Lines that would mean a claim, a completion or a heartbeat hit a lock problem, or that a job
# was taken from its worker: none may appear in a fault-free run.
LOG_PROBLEMS = re.compile(
    r"deadlock|could not serialize|serialization failure|database is locked|"
    r"failed \(|lease lost|reaped \d|Traceback",
    re.IGNORECASE,
)


def enqueue_backlog(ledger: Ledger) -> list[int]:
    """JOBS jobs over QUEUES x PRIORITIES, in one transaction: they become claimable together."""
    kwargs = {"ledger": str(ledger), "sleep": 0}
    per_kind = JOBS // (len(QUEUES) * len(PRIORITIES))
    ids: list[int] = []
    with transaction.atomic():
        for priority in PRIORITIES:
            for start in range(0, per_kind, CHUNK):
                count = min(CHUNK, per_kind - start)
                for queue in QUEUES:  # queues interleaved, so ids mix queues
                    task = chaos_work.using(queue=queue, priority=priority)
                    ids += [job.pk for job in task.enqueue_many([((), kwargs)] * count)]
    return ids


def connections_now() -> int:
    """Other sessions connected to this test database (PostgreSQL): the workers' connections."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


@dataclass(frozen=True, slots=True)
class Claimed:
    """One job's claim: when the claim statement began and an upper bound on when it ended."""

    queue: str
    priority: int
    owner: str
    claimed_at: float  # the claim statement's clock (the database's, on this machine)
    ended_by: float  # the job's ledger ``start``: its claim had committed by then


def claimed_jobs(ledger: Ledger) -> list[Claimed]:
    starts = {e.job: e for e in ledger.entries() if e.kind == "start"}
    rows = Job.objects.values_list("id", "queue", "priority", "started_at")
    return [
        Claimed(queue, priority, starts[pk].owner, started_at.timestamp(), starts[pk].t)
        for pk, queue, priority, started_at in rows
    ]


def late_jobs(jobs: list[Claimed]) -> dict[tuple[str, int], int]:
    """For each (queue, priority), how many higher-priority jobs of that queue were claimed
    after the first claim that took one of its jobs had ended (module docstring)."""
    claim_starts: dict[tuple[str, int], list[float]] = defaultdict(list)
    first_end: dict[tuple[str, int], float] = {}
    for job in jobs:
        kind = (job.queue, job.priority)
        claim_starts[kind].append(job.claimed_at)
        first_end[kind] = min(first_end.get(kind, job.ended_by), job.ended_by)
    for times in claim_starts.values():
        times.sort()
    return {
        (queue, priority): sum(
            len(times) - bisect.bisect_right(times, end)
            for (q, p), times in claim_starts.items()
            if q == queue and p > priority
        )
        for (queue, priority), end in first_end.items()
    }


def test_claim_race(start_worker: StartWorker, ledger: Ledger, settings: Any) -> None:
    settings.WORKQUEUE = {**settings.WORKQUEUE, "QUEUES": QUEUES}
    postgres = connection.vendor == "postgresql"
    supervisor = Supervisor(
        start_worker,
        WORKERS,
        ["--concurrency", str(SLOTS)],
        name="race",
        env={"WORKQUEUE_QUEUES": ",".join(QUEUES)},
    )
    supervisor.wait_started()
    job_ids = enqueue_backlog(ledger)
    assert len(job_ids) == len(set(job_ids)) == JOBS - JOBS % (len(QUEUES) * len(PRIORITIES))

    peak_connections = 0

    def sample() -> None:
        nonlocal peak_connections
        if postgres:
            peak_connections = max(peak_connections, connections_now())

    elapsed = wait_all_terminal(
        timeout=size(120, 1800), supervisor=supervisor, while_waiting=sample
    )
    assert not supervisor.unexpected_exits, supervisor.describe()
    supervisor.stop_all()

    report = check_invariants(job_ids, ledger, faulted=set())
    print(report)
    report.assert_ok()
    first_try = Job.objects.filter(status=Status.SUCCEEDED, attempt=1, errors=[]).count()
    assert first_try == len(job_ids), f"only {first_try} of {len(job_ids)} succeeded at attempt 1"

    entries = [e for e in ledger.entries() if e.kind == "start"]
    per_attempt = Counter((e.job, e.attempt) for e in entries)
    twice = {key: n for key, n in per_attempt.items() if n != 1}
    assert not twice, f"(job, attempt) started more than once: {list(twice.items())[:20]}"
    assert set(per_attempt) == {(job_id, 1) for job_id in job_ids}

    per_worker = Counter(e.owner for e in entries)
    assert set(per_worker) == {w.worker_id for w in supervisor.everyone}, per_worker

    problems = [
        f"{worker.worker_id}: {line}"
        for worker in supervisor.everyone
        for line in worker.stderr.splitlines()
        if LOG_PROBLEMS.search(line)
    ]
    assert not problems, "worker log lines about lock trouble:\n" + "\n".join(problems[:50])

    jobs = claimed_jobs(ledger)
    late = late_jobs(jobs)
    allowed = (WORKERS - 1) * SLOTS if postgres else 0
    too_late = {f"{q}/{p}": n for (q, p), n in late.items() if n > allowed}
    assert not too_late, f"higher-priority jobs claimed late (allowed {allowed}): {too_late}"

    # Jobs one claim statement took share (owner, started_at). On SQLite, whose clock has
    # millisecond resolution, two claims of one worker within a millisecond count as one.
    claims = Counter((job.owner, job.claimed_at) for job in jobs)
    if postgres:
        budget = WORKERS * (SLOTS + 2)
        assert peak_connections <= budget, f"{peak_connections} connections > {budget}"
    record(
        "claim_race",
        vendor=connection.vendor,
        workers=WORKERS,
        slots=SLOTS,
        queues=len(QUEUES),
        priorities=len(PRIORITIES),
        jobs=len(job_ids),
        seconds=round(elapsed, 2),
        jobs_per_second=round(len(job_ids) / elapsed),
        claims=len(claims),
        mean_claim=round(len(job_ids) / len(claims), 2),
        max_claim=max(claims.values()),
        jobs_per_worker=sorted(per_worker.values()),
        late_max=max(late.values(), default=0),
        late_total=sum(late.values()),
        late_allowed=allowed,
        peak_connections=peak_connections if postgres else None,
        double_claims=len(twice),
    )
