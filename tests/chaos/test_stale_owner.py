"""3. Stale owner: a worker frozen past its lease comes back to a job another worker finished,
and its late outcome changes nothing.

Each round: the stale worker A (one long-lived ``runworker``, the only worker while it claims)
takes a fresh ``chaos_work`` job (on PostgreSQL a ``chaos_atomic`` one too), writes ``start`` to
the ledger, and is SIGSTOPped in the body. A fresh worker B reaps the expired lease and runs the
jobs to success on attempt 2; the rows are snapshotted and B is stopped (SIGTERM). Then A is
SIGCONTinued: it finishes its copy of the work, writes its external effect, and tries to record
its outcome, which the fence refuses.

Pass criteria, per round (3 rounds fast, 50 in full), on both databases:

- after A has logged the refusal, each row equals the snapshot taken when B finished (status,
  result, attempt, max_attempts, finished_at, errors, lease owner and expiry, run_after,
  progress): 0 writes by the stale owner;
- each job succeeded on attempt 2 by B, with exactly one error: ``LeaseExpired`` for attempt 1;
- A's external effect of attempt 1 is in the ledger (1 per ``chaos_work`` job: the ledger holds
  exactly rounds x 1 repeated effects), and only as a duplicate explained by A being stopped;
- PostgreSQL: exactly one ``Effect`` row per atomic job, written by attempt 2 (A's rolled back);
- every invariant of ``check_invariants`` with faulted = {A}; exactly one re-run attempt per job;
- A and every B exit with status 0 on SIGTERM, and no worker exits on its own.

The second test covers the ``attempt`` part of the fence: the stale worker itself claims the
job again once resumed (a worker serving another queue reaps it meanwhile), so attempts 1 and 2
run in one process at once; its pass criteria, per round (2 fast, 20 full), are in its docstring.

The atomic half is PostgreSQL only by design: on SQLite an ``atomic=True`` body holds the
database's single write lock, so a worker frozen inside it freezes every other writer (see
``tests/acceptance/test_stale_worker.py``).
"""

from __future__ import annotations

import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.models import Effect
from testproject.testapp.tasks import chaos_atomic, chaos_work
from tests.support.processes import RunworkerProcess, wait_for

from .harness import Ledger, StartWorker, check_invariants, record, size

pytestmark = [pytest.mark.chaos, pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

ROUNDS = size(3, 50)
SELF_ROUNDS = size(2, 20)
# A sleep's deadline passes while its process is stopped, so a body frozen for the ~2.5 s it
# takes to reap it ends at once when resumed: this one is long enough to still run afterwards.
SELF_SLEEP = 5.0
# Long enough that A is frozen inside the body (the test stops it within ~0.1 s of 'start'),
# short enough that a round takes a few seconds.
SLEEP = 1.5
SNAPSHOT = (
    "status", "result", "attempt", "max_attempts", "finished_at", "errors", "lease_owner",
    "lease_expires_at", "run_after", "started_at", "progress_current", "progress_total",
    "progress_message",
)  # fmt: skip
REFUSED = {
    "chaos_work": "job {id} attempt 1: this worker no longer holds the lease",
    "chaos_atomic": "job {id} attempt 1: lease lost; the result was rolled back",
}


def process_state(worker: RunworkerProcess) -> str:
    """The kernel's state letter for the worker process ('T' once a SIGSTOP has taken hold)."""
    stat = Path(f"/proc/{worker.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0]


def sqlite_write_lock_free() -> bool:
    """Whether some connection can take SQLite's write lock now (nobody else holds it)."""
    probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.3, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


def freeze(worker: RunworkerProcess) -> int:
    """SIGSTOP ``worker`` at a moment it holds no database lock; return the stops it took.

    On SQLite a stop that lands inside one of the worker's few-millisecond writes would keep
    the single write lock held for as long as the worker stays stopped, and no other worker
    could reap anything: then the worker is let go on for a moment and stopped again. (On
    PostgreSQL the server finishes an autocommit statement whatever its client does.)
    """
    for stops in range(1, 21):
        worker.send(signal.SIGSTOP)
        wait_for(lambda: process_state(worker) == "T", message="the SIGSTOP to take hold")
        if connection.vendor != "sqlite" or sqlite_write_lock_free():
            return stops
        worker.send(signal.SIGCONT)
        wait_for(lambda: process_state(worker) != "T", message="the SIGCONT to take hold")
        time.sleep(0.05)  # let it finish the write it was stopped in (no condition to wait on)
    raise AssertionError(f"{worker!r} held the SQLite write lock at each of 20 stops")


def snapshot(job_ids: list[int]) -> dict[int, dict[str, Any]]:
    rows = Job.objects.filter(pk__in=job_ids).values("id", *SNAPSHOT)
    return {row.pop("id"): row for row in rows}


def enqueue_round(ledger: Ledger, sleep: float = SLEEP) -> dict[int, str]:
    """This round's jobs: {id: task name}."""
    kwargs = {"ledger": str(ledger), "sleep": sleep}
    jobs = {chaos_work.enqueue(**kwargs).pk: "chaos_work"}
    if connection.vendor == "postgresql":
        jobs[chaos_atomic.enqueue(**kwargs).pk] = "chaos_atomic"
    return jobs


def started(ledger: Ledger, job_ids: set[int], attempt: int) -> dict[int, Any]:
    return {
        e.job: e
        for e in ledger.entries()
        if e.kind == "start" and e.job in job_ids and e.attempt == attempt
    }


def freeze_inside(a: RunworkerProcess, ledger: Ledger, ids: set[int], n: int) -> int:
    """Wait until A runs the bodies of ``ids`` (attempt 1), freeze it there; return the stops."""
    wait_for(
        lambda: len(started(ledger, ids, 1)) == len(ids),
        alive=[a],
        message=f"round {n}: A to start its jobs",
    )
    stops = freeze(a)
    held = snapshot(list(ids))
    assert all(
        (row["status"], row["attempt"], row["lease_owner"]) == (Status.RUNNING, 1, a.worker_id)
        for row in held.values()
    ), f"round {n}: A was not frozen inside its jobs (raise SLEEP?): {held}"
    assert not [e for e in ledger.entries() if e.kind == "effect" and e.job in ids], (
        f"round {n}: A finished a body before it was frozen (raise SLEEP?)"
    )
    return stops


def test_a_stale_owner_writes_nothing(start_worker: StartWorker, ledger: Ledger) -> None:
    per_round = 2 if connection.vendor == "postgresql" else 1
    a = start_worker("--concurrency", str(per_round), name="stale")
    a.wait_started()
    all_jobs: dict[int, str] = {}
    stops: list[int] = []
    rescue: list[float] = []
    for n in range(ROUNDS):
        jobs = enqueue_round(ledger)
        all_jobs.update(jobs)
        ids = set(jobs)
        stops.append(freeze_inside(a, ledger, ids, n))
        frozen_at = time.time()

        b = start_worker("--concurrency", "2", name=f"rescuer{n}-")
        wait_for(
            lambda: all(r["status"] == Status.SUCCEEDED for r in snapshot(list(ids)).values()),  # noqa: B023
            alive=[b],
            timeout=60,
            message=f"round {n}: B to reap the frozen attempts and finish the jobs",
        )
        done_by_b = snapshot(list(ids))
        for job_id, row in done_by_b.items():
            assert row["attempt"] == 2, (job_id, row)
            assert [(e["attempt"], e["type"]) for e in row["errors"]] == [(1, "LeaseExpired")]
            assert row["result"] == 2
        rescued = started(ledger, ids, 2)
        assert {e.owner for e in rescued.values()} == {b.worker_id}
        rescue.append(max(e.t for e in rescued.values()) - frozen_at)
        b.send(signal.SIGTERM)
        assert b.wait(timeout=60) == 0, b.describe()

        a.send(signal.SIGCONT)
        for job_id, task_name in jobs.items():
            a.wait_logged(REFUSED[task_name].format(id=job_id), timeout=60)
        assert snapshot(list(ids)) == done_by_b, f"round {n}: the stale owner changed a row"
        if connection.vendor == "postgresql":
            atomic = [job_id for job_id, name in jobs.items() if name == "chaos_atomic"]
            effects = Effect.objects.filter(job_id__in=atomic).values_list("job_id", "attempt")
            assert sorted(effects) == [(job_id, 2) for job_id in sorted(atomic)]

    a.send(signal.SIGTERM)
    assert a.wait(timeout=60) == 0, a.describe()
    report = check_invariants(all_jobs, ledger, {a.worker_id})
    print(report)
    report.assert_ok()
    plain = sum(1 for name in all_jobs.values() if name == "chaos_work")
    # Exactly the stale attempts re-ran, and exactly A's late effects were repeated.
    assert report.duplicate_attempts == len(all_jobs)
    assert report.duplicate_effects == plain
    stale = [e for e in ledger.entries() if e.attempt == 1]
    assert {e.owner for e in stale} == {a.worker_id}
    assert Job.objects.filter(status=Status.SUCCEEDED).count() == len(all_jobs)
    record(
        "stale_owner",
        rounds=ROUNDS,
        jobs=len(all_jobs),
        atomic_jobs=len(all_jobs) - plain,
        stale_writes=0,
        stale_effects_in_ledger=report.duplicate_effects,
        rescue_max_s=round(max(rescue), 2),
        sigstops=sum(stops),
    )


def test_a_stale_owner_that_claims_its_job_again_cannot_write_the_old_attempt(
    start_worker: StartWorker, ledger: Ledger
) -> None:
    """The same worker comes back and claims the job again (the ``attempt`` part of the fence).

    A worker that serves no queue of the jobs (``--queues low``) reaps A's expired leases but
    never claims; A, resumed with free slots, claims attempt 2 of each job while its attempt-1
    body is still running, and both bodies finish in the same process. Pass criteria, per round
    (2 fast, 20 full), both databases: the job succeeds with attempt 2's result (2), exactly
    one ``LeaseExpired`` error (attempt 1), A logs the refusal of attempt 1's outcome, the row
    is unchanged by it, and an atomic job (PostgreSQL) keeps only attempt 2's ``Effect``.
    """
    per_round = 2 if connection.vendor == "postgresql" else 1
    # Free slots besides the frozen bodies: A claims attempt 2 while attempt 1 still runs.
    a = start_worker("--concurrency", str(2 * per_round), name="stale")
    reaper = start_worker("--queues", "low", name="reaper")
    a.wait_started()
    reaper.wait_started()
    all_jobs: dict[int, str] = {}
    overlapped = 0
    for n in range(SELF_ROUNDS):
        jobs = enqueue_round(ledger, SELF_SLEEP)
        all_jobs.update(jobs)
        ids = set(jobs)
        freeze_inside(a, ledger, ids, n)
        wait_for(
            lambda: all(r["status"] == Status.READY for r in snapshot(list(ids)).values()),  # noqa: B023
            alive=[reaper],
            timeout=60,
            message=f"round {n}: the reaper to take back A's expired leases",
        )
        a.send(signal.SIGCONT)
        wait_for(
            lambda: all(r["status"] == Status.SUCCEEDED for r in snapshot(list(ids)).values()),  # noqa: B023
            alive=[a],
            timeout=60,
            message=f"round {n}: A to run attempt 2",
        )
        done = snapshot(list(ids))
        for job_id, task_name in jobs.items():
            a.wait_logged(REFUSED[task_name].format(id=job_id), timeout=60)
        assert snapshot(list(ids)) == done, f"round {n}: the stale attempt changed a row"
        for job_id, row in done.items():
            assert (row["attempt"], row["result"]) == (2, 2), (job_id, row)
            assert [(e["attempt"], e["type"]) for e in row["errors"]] == [(1, "LeaseExpired")]
        second = started(ledger, ids, 2)
        assert {e.owner for e in second.values()} == {a.worker_id}
        # Attempt 2 began before attempt 1's body had ended: both ran in A at once.
        ends = {e.job: e.t for e in ledger.entries() if e.kind == "effect" and e.attempt == 1}
        overlapped += sum(1 for j, e in second.items() if j in ends and e.t < ends[j])

    for worker in (a, reaper):
        worker.send(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, worker.describe()
    report = check_invariants(all_jobs, ledger, {a.worker_id})
    print(report)
    report.assert_ok()
    assert report.duplicate_attempts == len(all_jobs)
    assert overlapped, "attempt 2 never started while attempt 1 still ran: nothing was tested"
    record(
        "stale_owner_reclaims",
        rounds=SELF_ROUNDS,
        jobs=len(all_jobs),
        atomic_jobs=sum(1 for name in all_jobs.values() if name == "chaos_atomic"),
        attempts_overlapping_in_one_process=overlapped,
        stale_effects_in_ledger=report.duplicate_effects,
    )
