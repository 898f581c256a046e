"""2. PostgreSQL faults mid-run: a restart, an outage longer than the lease, killed backends.

PostgreSQL only by design: the faults are PostgreSQL's (a server restart, ``pg_terminate_backend``)
and so is LISTEN/NOTIFY, whose recovery is measured. They are injected into a throwaway cluster
(``tests/chaos/pgcluster.py``), never into the shared server. Real ``runworker`` processes under
the harness's supervisor drain a backlog of ``chaos_work`` and ``chaos_atomic`` jobs while the
server is crash-restarted (``pg_ctl stop -m immediate``, then start), stopped for longer than a
lease, or has every workqueue backend of every worker terminated (control, slots and listener;
each worker names its sessions ``workqueue:<worker id>``). Workers poll only every 30 s, so a job
picked up within a second was announced by NOTIFY.

Pass criteria, after every fault:

- no worker exits (0 unexpected exits);
- claiming resumes within 10 s of the server accepting connections again;
- every worker LISTENs again (a new LISTEN backend) within 10 s, and each of 3 jobs enqueued once
  it does starts within 1 s of the enqueue call that commits it (pickup latency);
- 0 jobs lost and every invariant of ``harness.check_invariants`` (every worker counts as faulted:
  the fault hit them all), and, stricter, attempts needed again only where the fault interrupted
  one: claimed before a fault ended (started within 2 s of its end) and failed after it began,
  with a lost connection (the transaction of an ``atomic=True`` body dies with its backend, and
  so does a slot's pooled connection) or an expired lease, which only an outage longer than the
  lease may cause, or a claim whose answer the fault cut off (committed, never heard by the
  worker: that attempt never started, its lease expires and the reaper puts the job back);
- an outage shorter than the lease (restart, terminated backends; jobs leased for 10 s) expires
  0 leases of attempts that ran and re-runs 0 ``chaos_work`` jobs: their bodies never touch the
  database, so only a lost lease could re-run them.

Fast: 2 workers x 4 slots, 320 jobs, 1 restart, 2 rounds of terminations. Full
(``WORKQUEUE_CHAOS=full``): 4 x 8, 3,200 jobs, 5 restarts, 10 rounds.

One test drives no worker: the liveness rule at a restart, step by step (a key taken before it
proves no death until its worker takes it again), the race the restart battery can hit.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.db import connection
from django.db.models import Min

from django_workqueue.models import Job
from testproject.testapp.tasks import chaos_atomic, chaos_work
from tests.support.processes import wait_for
from tests.support.waiting import wait_until

from .harness import Ledger, StartWorker, Supervisor, check_invariants, record, size
from .pgcluster import PostgresCluster

pytestmark = [pytest.mark.chaos, pytest.mark.acceptance, pytest.mark.postgres_only]

WORKERS = size(2, 4)
SLOTS = size(4, 8)
JOBS = size(320, 3_200)
SLEEP = size(0.05, 0.05)
RESTARTS = size(1, 5)
TERMINATIONS = size(2, 10)
POLL_INTERVAL = "30"  # so that only NOTIFY explains a pickup within a second
LONG_LEASE = 10  # seconds: longer than a restart or a reconnect takes
CHAOS_LEASE = 2  # chaos tasks' own lease, outlived by the long outage
RESUME_BOUND = 10.0
LISTEN_BOUND = 10.0
PICKUP_BOUND = 1.0
PROBES = 3
PICKUP_GRACE = 2.0  # seconds from a job's claim to its body's start, on a loaded machine
CONNECTION_ERRORS = ("OperationalError", "InterfaceError")


@dataclass
class Fault:
    """When a fault began (``down``) and when the server accepted connections again (``up``)."""

    down: float
    up: float
    resumed_s: float = 0.0
    listen_s: float = 0.0
    killed: frozenset[int] = frozenset()  # terminated backends (pids)


def enqueue(ledger: Ledger, lease_seconds: int) -> list[int]:
    """JOBS jobs, one in four ``atomic=True`` (their bodies hold a transaction while they run),
    interleaved in the claim order so that faults find both kinds running."""
    kwargs = {"ledger": str(ledger), "sleep": SLEEP}
    atomic = chaos_atomic.using(lease_seconds=lease_seconds)
    plain = chaos_work.using(lease_seconds=lease_seconds)
    jobs = []
    for _ in range(JOBS // 8):
        jobs += atomic.enqueue_many([((), kwargs)] * 2) + plain.enqueue_many([((), kwargs)] * 6)
    return [job.pk for job in jobs]


def wait_atomic_running(supervisor: Supervisor) -> None:
    """Let the fault find an atomic body holding its transaction (likely, not certain)."""
    wait_for(
        lambda: Job.objects.filter(status="running", task_name__endswith="chaos_atomic").exists(),
        alive=supervisor.workers, timeout=60, message="an atomic job to run",
    )  # fmt: skip


def start_workers(start: StartWorker, cluster: PostgresCluster, name: str) -> Supervisor:
    supervisor = Supervisor(
        start, WORKERS, ["--concurrency", str(SLOTS)], name=name,
        env={"WORKQUEUE_POLL_INTERVAL": POLL_INTERVAL},
    )  # fmt: skip
    supervisor.wait_started()
    wait_listening(cluster, supervisor, since=time.time())
    return supervisor


def wait_listening(
    cluster: PostgresCluster,
    supervisor: Supervisor,
    since: float,
    old: frozenset[int] = frozenset(),
) -> float:
    """Wait until every worker has a LISTEN backend that is not in ``old``; return the delay."""

    def all_listening() -> bool:
        listening = {
            name: pid for pid, name, query in cluster.backends() if query.startswith("LISTEN")
        }
        return all(listening.get(f"workqueue:{w.worker_id}", -1) not in old | {-1}
                   for w in supervisor.workers)  # fmt: skip

    wait_for(all_listening, alive=supervisor.workers, timeout=60, message="every worker to LISTEN")
    return time.time() - since


def wait_progress(ledger: Ledger, supervisor: Supervisor, started: int) -> None:
    wait_for(lambda: ledger.started() >= started, alive=supervisor.workers, timeout=120,
             message=f"{started} attempts started")  # fmt: skip


def wait_resumed(supervisor: Supervisor, fault: Fault) -> None:
    """Wait for the first claim after the fault (a job's ``started_at`` is its claim's time, by
    the database's clock: this machine's); note how long after the fault it came."""
    after = datetime.fromtimestamp(fault.up, UTC)

    def first_claim() -> datetime | None:
        claims = Job.objects.filter(started_at__gt=after)
        return claims.aggregate(first=Min("started_at"))["first"]

    claimed = wait_for(first_claim, alive=supervisor.workers, timeout=60,
                       message="claiming to resume")  # fmt: skip
    fault.resumed_s = claimed.timestamp() - fault.up


def wait_drained(supervisor: Supervisor, timeout: float) -> None:
    def finished() -> bool:
        return not Job.objects.exclude(status__in=["succeeded", "failed", "cancelled"]).exists()

    wait_for(finished, alive=supervisor.workers, timeout=timeout, message="every job to finish")


def pickup_latencies(ledger: Ledger, supervisor: Supervisor) -> tuple[list[int], list[float]]:
    """Enqueue PROBES jobs one at a time into idle workers; return their ids and latencies."""
    ids, latencies = [], []
    for _ in range(PROBES):
        # From the call, whose autocommit insert commits (and notifies) before it returns.
        committed = time.time()
        job = chaos_work.enqueue(ledger=str(ledger))
        started = wait_for(
            lambda job=job: next((e.t for e in ledger.entries()
                                  if e.job == job.pk and e.kind == "start"), None),
            alive=supervisor.workers, timeout=60, message=f"probe {job.pk} to start",
        )  # fmt: skip
        ids.append(job.pk)
        latencies.append(started - committed)
        wait_drained(supervisor, timeout=30)
    return ids, latencies


def interrupted_reruns(
    job_ids: list[int], ledger: Ledger, faults: list[Fault], *, lease_may_expire: bool
) -> dict[str, int]:
    """Check that every attempt a job needed again was one a fault interrupted; count them.

    Such an attempt was claimed before a fault ended and failed (its error's time, the database
    clock: this machine's) after it began. The ledger dates an attempt's start, a moment after
    its claim: a slot may pick up a job handed to it before the fault a little after, and its
    pooled connection, killed by the fault, then fails it (nothing told the slot yet), hence
    PICKUP_GRACE. It failed with a lost connection (the transaction of an ``atomic=True`` body
    dies with its backend) or an expired lease, which is allowed when the outage outlasted the
    lease, or when the attempt never started: a claim that committed but whose answer the fault
    cut off, so nobody ran the job until its lease expired. ``chaos_work`` bodies never use the
    database: a lost lease is the only way one is re-run.
    """
    starts = {(e.job, e.attempt): e.t for e in ledger.entries() if e.kind == "start"}
    names = ["atomic_reruns", "plain_reruns", "lease_expired", "connection_lost", "never_started"]
    counts = dict.fromkeys(names, 0)
    problems = []
    wanted = set(job_ids)
    for job in (job for job in Job.objects.all() if job.pk in wanted):
        errors = {error["attempt"]: error for error in job.errors}
        for attempt in range(1, job.attempt):
            error = errors.get(attempt)
            kind = error["type"].rsplit(".", 1)[-1] if error else None
            failed = datetime.fromisoformat(error["at"]).timestamp() if error else 0.0
            started = starts.get((job.pk, attempt))
            if started is None:
                counts["never_started"] += 1
            else:
                counts["atomic_reruns" if "atomic" in job.task_name else "plain_reruns"] += 1
                counts["lease_expired"] += int(kind == "LeaseExpired")
                counts["connection_lost"] += int(kind in CONNECTION_ERRORS)
            expired_ok = kind == "LeaseExpired" and (lease_may_expire or started is None)
            if kind not in CONNECTION_ERRORS and not expired_ok:
                problems.append(f"job {job.pk} attempt {attempt} needed again after {error}")
            elif not any(
                failed > f.down - 0.2 and (started is None or started < f.up + PICKUP_GRACE)
                for f in faults
            ):
                problems.append(
                    f"job {job.pk} attempt {attempt} ({kind}) started at {started} and failed at "
                    f"{failed}: not during a fault {[(f.down, f.up) for f in faults]}"
                )
    assert not problems, "attempts lost not to a fault:\n" + "\n".join(problems[:30])
    return counts


def finish(
    test: str,
    supervisor: Supervisor,
    ledger: Ledger,
    job_ids: list[int],
    faults: list[Fault],
    *,
    lease_may_expire: bool,
) -> dict[str, object]:
    """The checks every fault test ends with; returns the figures to record."""
    for fault in faults:
        assert fault.resumed_s <= RESUME_BOUND, f"claiming resumed {fault.resumed_s:.1f}s after"
        assert fault.listen_s <= LISTEN_BOUND, f"LISTEN came back {fault.listen_s:.1f}s after"
    probes, latencies = pickup_latencies(ledger, supervisor)
    assert max(latencies) < PICKUP_BOUND, f"pickup latencies after the faults: {latencies}"
    supervisor.poll()
    assert not supervisor.unexpected_exits, supervisor.describe()
    everyone = {w.worker_id for w in supervisor.workers}
    report = check_invariants(job_ids + probes, ledger, everyone)
    print(report)
    report.assert_ok()
    counts = interrupted_reruns(job_ids, ledger, faults, lease_may_expire=lease_may_expire)
    figures = {
        "workers": WORKERS, "slots": SLOTS, "jobs": report.jobs, "faults": len(faults),
        "lost": sum(n for s, n in report.by_status.items() if s != "succeeded"),
        "resume_max_s": round(max(f.resumed_s for f in faults), 2),
        "listen_back_max_s": round(max(f.listen_s for f in faults), 2),
        "outage_max_s": round(max(f.up - f.down for f in faults), 2),
        "pickup_ms": [round(latency * 1000) for latency in latencies],
        **counts,
    }  # fmt: skip
    record(test, **figures)
    supervisor.stop_all()
    return figures


def fault_ran(supervisor: Supervisor, cluster: PostgresCluster, fault: Fault) -> None:
    """After the fault: claims resume, LISTEN is back (both measured from ``fault.up``)."""
    connection.close()  # the test's own session, if the fault ended it
    wait_resumed(supervisor, fault)
    fault.listen_s = wait_listening(cluster, supervisor, since=fault.up, old=fault.killed)


def test_restart_with_jobs_in_flight(
    cluster_worker: StartWorker, cluster_db: PostgresCluster, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    supervisor = start_workers(cluster_worker, cluster_db, "restart-")
    job_ids = enqueue(ledger, lease_seconds=LONG_LEASE)
    faults = []
    for n in range(RESTARTS):
        wait_progress(ledger, supervisor, JOBS * (n + 1) // (RESTARTS + 2))
        wait_atomic_running(supervisor)
        connection.close()
        down = time.time()
        cluster_db.restart(mode="immediate")  # a crash: backends die mid-statement
        fault = Fault(down, time.time())
        fault_ran(supervisor, cluster_db, fault)
        faults.append(fault)
    wait_drained(supervisor, timeout=size(120, 600))

    figures = finish("postgres_restart", supervisor, ledger, job_ids, faults,
                     lease_may_expire=False)  # fmt: skip
    assert figures["lease_expired"] == 0, f"a shorter outage than the lease expired some: {figures}"
    assert figures["plain_reruns"] == 0, f"a shorter outage than the lease re-ran jobs: {figures}"


def test_outage_longer_than_the_lease(
    cluster_worker: StartWorker, cluster_db: PostgresCluster, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    supervisor = start_workers(cluster_worker, cluster_db, "outage-")
    job_ids = enqueue(ledger, lease_seconds=CHAOS_LEASE)
    wait_progress(ledger, supervisor, JOBS // 4)
    wait_atomic_running(supervisor)
    connection.close()
    down = time.time()
    cluster_db.stop(mode="immediate")
    # The fault's length, not a wait for a condition: every running lease expires meanwhile.
    time.sleep(CHAOS_LEASE + 2)
    cluster_db.start()
    fault = Fault(down, time.time())
    fault_ran(supervisor, cluster_db, fault)
    wait_drained(supervisor, timeout=size(120, 600))

    finish("postgres_outage", supervisor, ledger, job_ids, [fault], lease_may_expire=True)


def test_terminating_every_workqueue_backend(
    cluster_worker: StartWorker, cluster_db: PostgresCluster, tmp_path: Path
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    supervisor = start_workers(cluster_worker, cluster_db, "terminate-")
    job_ids = enqueue(ledger, lease_seconds=LONG_LEASE)
    faults = []
    for n in range(TERMINATIONS):
        wait_progress(ledger, supervisor, JOBS * (n + 1) // (TERMINATIONS + 2))
        wait_atomic_running(supervisor)
        before = {pid for pid, _, _ in cluster_db.backends()}
        down = time.time()
        killed = cluster_db.terminate()
        fault = Fault(down, time.time(), killed=frozenset(before))
        # Every worker had its control, listener and busy slots' backends; all are gone.
        assert killed >= 2 * WORKERS, f"only {killed} workqueue backends to terminate"
        fault_ran(supervisor, cluster_db, fault)
        faults.append(fault)
    wait_drained(supervisor, timeout=size(120, 600))

    figures = finish("postgres_terminate", supervisor, ledger, job_ids, faults,
                     lease_may_expire=False)  # fmt: skip
    assert figures["lease_expired"] == 0, f"a shorter outage than the lease expired some: {figures}"
    assert figures["plain_reruns"] == 0, f"a shorter outage than the lease re-ran jobs: {figures}"


def test_a_key_taken_before_a_restart_proves_no_death_until_its_worker_takes_it_again(
    cluster_db: PostgresCluster,
) -> None:
    """Right after a restart no session holds any liveness key, a live worker's no more than a
    dead one's: until the worker's LISTEN connection is back and has taken its key again, its
    jobs wait for their leases instead of being reaped as a dead worker's. Once it has, its
    death is seen at once again. (A deterministic form of the race the restart battery can
    hit at full size: the maintainer's first pass after the restart, before the others'
    listeners reconnect.)"""
    import psycopg

    from django_workqueue.db import LivenessToken, driver_for, pg_liveness
    from django_workqueue.db.postgresql import listen_params
    from django_workqueue.maintenance.liveness import look_up
    from django_workqueue.maintenance.reaper import Reaper
    from django_workqueue.worker.registration import Registration
    from tests.support.factories import JobFactory

    params = listen_params(connection, None)
    held: list[LivenessToken | None] = []
    registration = Registration("default", "alive", ["default"], 1, liveness=lambda: held[-1])
    before = psycopg.connect(**params, autocommit=True)
    held.append(pg_liveness.hold(before))
    registration.register()
    job = JobFactory(running=True, lease_owner="alive")  # leased for a minute
    reaper = Reaper("default", 1.0)
    assert reaper.run_once() == 0  # alive: its session holds its key

    connection.close()
    cluster_db.restart(mode="immediate")  # every session ends: the worker's key is free
    connection.close()
    before.close()

    assert reaper.run_once() == 0, "a live worker's job was reaped as if it had died"
    job.refresh_from_db()
    assert (job.status, job.lease_owner) == ("running", "alive")
    holder = look_up("default", driver_for("default"), "alive")
    assert holder is not None and (holder.liveness, holder.gone) == ("", False)

    with psycopg.connect(**params, autocommit=True) as after:  # its listener reconnects
        first = held[-1]
        held.append(pg_liveness.hold(after, first.value if first else None))
        registration.declare_liveness()
        again = held[-1]
        assert again is not None and first is not None and again.value == first.value
        assert reaper.run_once() == 0
        holder = look_up("default", driver_for("default"), "alive")
        assert holder is not None and (holder.liveness, holder.gone) == (again.value, False)
    # The worker dies: its key, declared since the restart, tells at once (the lease has ~60 s).
    # Once its backend has ended (a close is not waited for) and its key with it.
    assert wait_until(lambda: reaper.run_once() or None, timeout=10, message="the death") == 1
    job.refresh_from_db()
    assert job.status == "ready" and "is gone" in job.errors[-1]["message"]
