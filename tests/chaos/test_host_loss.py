"""Worker hosts that vanish or are partitioned, on one PostgreSQL: no job is lost, every job the
host held is recovered within a lease, and a partitioned host that comes back changes nothing.

PostgreSQL only by design: several hosts sharing one database is the PostgreSQL deployment
(SQLite is one host's embedded database).

Hosts are simulated with network namespaces made by the test (``tests/support/hosts.py``): each
has its own network stack and its own ``runworker`` processes (LISTEN/NOTIFY on), and reaches
the database over a veth link that the test takes down to partition it. Real: separate network
stacks, separate processes, a real partition (packets dropped, statements left hanging, not
refused). Shared: the kernel, the clock (so the ledger's times and the database's compare), the
hostname and the file system.

The hardest order for a host's loss: its network is cut first, so its workers are alive but
partitioned while their leases run out and their jobs are reaped and re-run elsewhere, and only
then are all its processes SIGKILLed. Pass criteria: 0 jobs lost and every invariant of the
fault battery's checker (``harness.check_invariants``); each job the host held is reaped within
lease + reaper interval + 2 s of the cut (or, if its completion was already on its way to the
server, ends on that very attempt).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import chaos_work
from tests.support.hosts import NamespacesUnavailable, SimulatedHost, simulated_hosts
from tests.support.processes import RunworkerProcess, wait_for

from .harness import Ledger, check_invariants, wait_all_terminal

pytestmark = [
    pytest.mark.chaos,
    pytest.mark.acceptance,
    pytest.mark.postgres_only,
    pytest.mark.django_db(transaction=True),
]

SLOTS = "4"
SLEEP = 0.3  # seconds of work per job, so that a cut finds the host busy
BATCH = 40
LEASE_SECONDS = 2  # chaos_work's lease
REAPER_INTERVAL = 0.2  # tests.support.processes.FAST_SETTINGS
RECOVERY_BOUND = LEASE_SECONDS + REAPER_INTERVAL + 2.0


@pytest.fixture
def hosts(transactional_db: None, tmp_path: Path) -> Iterator[Callable[[str], SimulatedHost]]:
    with simulated_hosts(connection.settings_dict, tmp_path) as add:

        def checked(name: str) -> SimulatedHost:
            try:
                return add(name)
            except NamespacesUnavailable as exc:
                pytest.skip(f"cannot simulate hosts: network namespaces unavailable ({exc})")

        yield checked


def _enqueue(ledger: Ledger, count: int = BATCH) -> list[int]:
    jobs = chaos_work.enqueue_many([((), {"ledger": str(ledger), "sleep": SLEEP})] * count)
    return [job.pk for job in jobs]


def _start(host: SimulatedHost, count: int = 1) -> list[RunworkerProcess]:
    return [host.start_worker("--concurrency", SLOTS, name=f"{host.name}{n}") for n in range(count)]


def _assert_inside(host: SimulatedHost, workers: list[RunworkerProcess]) -> None:
    for worker in workers:
        assert host.hosts(worker), f"{worker!r} is not in the network namespace of {host!r}"


def _held(owners: set[str]) -> list[tuple[int, int]]:
    """The (job, attempt) pairs running under a lease of ``owners``."""
    return list(
        Job.objects.filter(status=Status.RUNNING, lease_owner__in=owners).values_list(
            "id", "attempt"
        )
    )


def _reaped_at(job_ids: set[int]) -> dict[tuple[int, int], float]:
    """When each attempt of ``job_ids`` was reaped (the database's clock, this machine's)."""
    reaped = {}
    for job in Job.objects.filter(pk__in=job_ids):
        for error in job.errors:
            if error["type"] == "LeaseExpired":
                reaped[job.pk, error["attempt"]] = datetime.fromisoformat(error["at"]).timestamp()
    return reaped


def _reaped_as_gone(worker_id: str, jobs: Any) -> list[tuple[int, int]]:
    """The (job, attempt) pairs of ``jobs`` that the reaper took from ``worker_id`` because
    liveness said it was gone (not because a lease ran out)."""
    gone = f"worker {worker_id} is gone"
    return [(job.pk, error["attempt"]) for job in jobs for error in job.errors
            if error["type"] == "LeaseExpired" and error["message"].startswith(gone)]  # fmt: skip


def _assert_recovered(held: list[tuple[int, int]], cut_at: float) -> dict[str, Any]:
    """Every held attempt was reaped within the bound of the cut, or (its completion having
    reached the server before the cut) ended the job on that very attempt."""
    assert held, "the host held no job when it was cut: the test proved nothing"
    reaped = _reaped_at({job for job, _ in held})
    final = dict(Job.objects.filter(pk__in=[j for j, _ in held]).values_list("id", "attempt"))
    landed = [(j, a) for j, a in held if (j, a) not in reaped]
    unexplained = [(j, a) for j, a in landed if final[j] != a]
    assert not unexplained, f"held attempts neither reaped nor completed: {unexplained}"
    delays = [reaped[pair] - cut_at for pair in held if pair in reaped]
    late = [round(delay, 2) for delay in delays if delay > RECOVERY_BOUND]
    assert not late, f"jobs recovered later than {RECOVERY_BOUND}s after the cut: {late}"
    return {"held": len(held), "reaped": len(delays), "slowest": round(max(delays, default=0), 2)}


def test_a_host_that_vanishes_loses_no_job(
    hosts: Callable[[str], SimulatedHost], ledger: Ledger
) -> None:
    lost, kept = hosts("lost"), hosts("kept")
    lost_workers, kept_workers = _start(lost, 2), _start(kept)
    everyone = lost_workers + kept_workers
    for worker in everyone:
        worker.wait_started()
    _assert_inside(lost, lost_workers)
    _assert_inside(kept, kept_workers)
    ids = _enqueue(ledger)
    wait_for(
        lambda: {owner for owner in Job.objects.filter(status=Status.RUNNING).values_list(
            "lease_owner", flat=True)} >= lost.worker_ids,
        alive=everyone, message="both of the lost host's workers to hold running jobs",
    )  # fmt: skip

    cut_at = time.time()
    lost.cut()
    # Read after the cut: the host can start nothing more. (A completion it sent just before
    # may still land: _assert_recovered allows for it.)
    held = _held(lost.worker_ids)
    ids += _enqueue(ledger)  # the stream goes on while the host is partitioned
    wait_for(
        lambda: set(_reaped_at({job for job, _ in held})) & set(held),
        alive=everyone, message="a job of the partitioned host to be reaped",
    )  # fmt: skip
    # Partitioned, not dead: its workers lived on while their jobs were taken from them.
    assert all(worker.alive for worker in lost_workers)
    lost.kill()
    ids += _enqueue(ledger)

    wait_all_terminal(timeout=60)
    report = check_invariants(ids, ledger, lost.worker_ids)
    print(report)
    report.assert_ok()
    print("recovery:", _assert_recovered(held, cut_at))
    assert all(worker.alive for worker in kept_workers)


def test_a_partitioned_host_that_comes_back_cannot_overwrite_recovered_jobs(
    hosts: Callable[[str], SimulatedHost], ledger: Ledger
) -> None:
    away, home = hosts("away"), hosts("home")
    (stale,), (steady,) = _start(away), _start(home)
    for worker in (stale, steady):
        worker.wait_started()
    _assert_inside(away, [stale])
    _assert_inside(home, [steady])
    ids = _enqueue(ledger)
    wait_for(lambda: _held(away.worker_ids), alive=[stale, steady], message="away to hold jobs")

    cut_at = time.time()
    away.cut()
    held = _held(away.worker_ids)
    ids += _enqueue(ledger)

    def final_attempts() -> dict[int, int]:
        succeeded = Job.objects.filter(pk__in=[j for j, _ in held], status=Status.SUCCEEDED)
        return dict(succeeded.values_list("id", "attempt"))

    def recovered_and_finished_away() -> bool:
        """Each held job ended elsewhere on a later attempt, and the away host's body of it
        finished too (its outcome waits in its completer, unwritten). A completion that was
        on its way to the server at the cut may have landed: that job ended on its attempt."""
        final = final_attempts()
        effects = {(e.job, e.attempt) for e in ledger.entries() if e.kind == "effect"}
        return all(final.get(j) == a or (final.get(j, 0) > a and (j, a) in effects)
                   for j, a in held)  # fmt: skip

    wait_for(recovered_and_finished_away, alive=[stale, steady], message="recovery elsewhere")
    assert stale.alive, "the partitioned worker died"
    final = final_attempts()
    taken = [(job, attempt) for job, attempt in held if final[job] > attempt]
    assert taken, "every job the host held had completed before the cut: the test proved nothing"
    rows = {row["id"]: row for row in Job.objects.filter(pk__in=[j for j, _ in taken]).values()}

    # The hardest return: the server has ended every session of the partitioned host (its
    # keepalives gave up on it), so the host comes back to find its LISTEN session, and the
    # liveness key that session held, gone, while its own end of every connection looks open.
    wait_for(lambda: not away.relay.connections, alive=[stale, steady],
             message="the server to end the partitioned host's sessions")  # fmt: skip
    away.heal()
    for job, attempt in taken:
        stale.wait_logged(f"job {job} attempt {attempt}: this worker no longer holds the lease")
    assert {row["id"]: row for row in Job.objects.filter(pk__in=rows).values()} == rows

    # The host is back in the fleet: it claims and completes new work. (The queue is topped up
    # while it reconnects, so that the other host cannot empty it first.)
    newest = max(ids)

    def rejoined() -> bool:
        if not Job.objects.filter(status=Status.READY).exists():
            ids.extend(_enqueue(ledger, 8))
        mine = {(e.job, e.attempt) for e in ledger.entries() if e.owner == stale.worker_id}
        done = Job.objects.filter(pk__gt=newest, status=Status.SUCCEEDED).values_list(
            "id", "attempt"
        )
        return bool(mine & set(done))

    wait_for(rejoined, alive=[stale, steady], message="the healed host to complete a new job")
    wait_all_terminal(timeout=60)
    # Alive all along: nothing it claimed once back was taken from it as a dead worker's.
    taken_as_dead = _reaped_as_gone(stale.worker_id, Job.objects.filter(pk__gt=newest))
    assert not taken_as_dead, (
        f"the healed host's new jobs were reaped as if it had died: {taken_as_dead}"
    )
    report = check_invariants(ids, ledger, away.worker_ids)
    print(report)
    report.assert_ok()
    print("recovery:", _assert_recovered(held, cut_at))
