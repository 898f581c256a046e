"""What an idle fleet costs the database (issue 17, item 4), for django-workqueue on PostgreSQL.

* ``idle_fleet`` starts ``idle_workers`` (50) ``runworker --concurrency 1`` processes on an empty
  jobs table, with the library's own intervals (``POLL_INTERVAL`` 1 s, ``REAPER_INTERVAL``
  5 s: the test project's faster ones are put back) and LISTEN/NOTIFY on; waits until every
  one has its LISTEN connection up, lets the start-up settle (``idle_settle``, 90 s: a whole
  poll cycle, past every worker's first heartbeat, first lease read and first poll, which
  would otherwise all fall into the window), then counts the transactions the database
  committed or rolled back over ``idle_seconds`` (``pg_stat_database``'s ``xact_commit +
  xact_rollback`` of the jobs database over ``idle_seconds``, 120 s, read from another
  database so the reads do not count; the workers run in autocommit, so each statement outside
  ``atomic()`` is one transaction).
  The same is measured for a fleet of one (the maintainer alone), which splits the figure
  into the maintainer's share and each other worker's, and gives the figure for 50 workers
  when the server cannot hold 50 (each idle worker holds two connections: its control
  connection and its LISTEN connection; the fleet is capped at 80% of the free connections,
  and the JSON says so). Issue 17's goal: 50 idle workers ≤ 5 queries/s in total.

``pg_stat_statements`` would count statements instead of transactions, but it needs a server
setting (``shared_preload_libraries``) that the harness does not change. A backend reports its
counts when a transaction ends (at most once a second) or after 10 s idle, so a window's edges
blur by a few transactions; the window is long against that.

Returns ``{metric: summary}``; nothing on SQLite (no NOTIFY: a SQLite fleet is one host).
"""

from __future__ import annotations

import time
from typing import Any

from . import pgadmin
from .metrics import Log, Sizes
from .stats import summary
from .systems.base import System, WorkerProcess

# The library's defaults where the test project's settings differ (bench/settings.py is the
# test project's): an idle fleet is measured as a user would run it.
LIBRARY_DEFAULTS = {
    "WORKQUEUE_POLL_INTERVAL": "1.0",
    "WORKQUEUE_REAPER_INTERVAL": "5.0",
    "WORKQUEUE_SCHEDULER_INTERVAL": "1.0",
    "WORKQUEUE_LISTEN_NOTIFY": "1",
}
CONNECTIONS_PER_WORKER = 2  # control + LISTEN; a slot connects only to run a job
GOAL_WORKERS, GOAL_QUERIES = 50, 5.0


def _transactions(database: str) -> int:
    return int(
        pgadmin.scalar(
            "postgres",
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            [database],
        )
    )


def _listening(database: str) -> int:
    """Workers of ``database`` whose LISTEN connection is up (one LISTEN backend each)."""
    return int(
        pgadmin.scalar(
            "postgres",
            "SELECT count(DISTINCT application_name) FROM pg_stat_activity "
            "WHERE datname = %s AND application_name LIKE 'workqueue:%%' "
            "AND query LIKE 'LISTEN%%'",
            [database],
        )
    )


def fleet_size(wanted: int) -> int:
    """``wanted``, or as many idle workers as 80% of the server's free connections hold."""
    most = int(pgadmin.scalar("postgres", "SHOW max_connections"))
    reserved = int(pgadmin.scalar("postgres", "SHOW superuser_reserved_connections"))
    used = int(pgadmin.scalar("postgres", "SELECT count(*) FROM pg_stat_activity"))
    free = (most - reserved - used) * 8 // 10
    return max(1, min(wanted, free // CONNECTIONS_PER_WORKER))


def _measure(system: System, workers: int, settle: float, seconds: float, log: Log) -> float:
    """Start ``workers`` idle workers, wait, count; return transactions per second."""
    system.reset()
    started = [
        system.start_worker(
            {"concurrency": 1, "queues": None}, burst=False, tag=f"idle-{n}", **LIBRARY_DEFAULTS
        )
        for n in range(workers)
    ]
    try:
        deadline = time.monotonic() + 60 + 3 * workers  # imports on a shared 2-core machine
        while (up := _listening(system.database)) < workers:
            _check_alive(started)
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {up} of {workers} idle workers listen after the wait")
            time.sleep(0.5)
        time.sleep(settle)
        before = _transactions(system.database)
        time.sleep(seconds)
        after = _transactions(system.database)
        _check_alive(started)
    finally:
        for worker in started:
            worker.stop()
    rate = (after - before) / seconds
    log(f"{system.name}: idle_fleet: {workers} idle worker(s): {after - before} transactions "
        f"in {seconds:.0f} s = {rate:.2f}/s")  # fmt: skip
    return rate


def _check_alive(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        if worker.process.poll() is not None:
            worker.check()  # raises with its log


def idle_fleet(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    if getattr(system, "metric_prefix", "") == "sqlite_":
        return {}
    wanted = int(sizes.idle_workers)
    workers = fleet_size(wanted)
    if workers < wanted:
        log(f"{system.name}: idle_fleet: the server's free connections hold {workers} idle "
            f"workers, not {wanted}; the figure for {GOAL_WORKERS} is extrapolated")  # fmt: skip
    settle, seconds = float(sizes.idle_settle), float(sizes.idle_seconds)
    alone, fleet, extrapolated = [], [], []
    for _ in range(reps):
        one = _measure(system, 1, settle, seconds, log)
        many = _measure(system, workers, settle, seconds, log)
        other = (many - one) / (workers - 1) if workers > 1 else 0.0
        alone.append(one)
        fleet.append(many)
        extrapolated.append(one + (GOAL_WORKERS - 1) * other)
    each = [(m - o) / max(1, workers - 1) for m, o in zip(fleet, alone, strict=True)]
    detail = {"workers": workers, "wanted": wanted, "seconds": seconds, "settle": settle,
              "unit": "transactions/s (pg_stat_database)"}  # fmt: skip
    return {
        "idle_fleet_maintainer": summary(alone, **detail),
        "idle_fleet_other_worker": summary(each, **detail),
        f"idle_fleet_{workers}": summary(fleet, **detail),
        f"idle_fleet_{GOAL_WORKERS}_per_s": summary(
            fleet if workers == GOAL_WORKERS else extrapolated,
            **detail,
            measured=workers == GOAL_WORKERS,
        ),
    }


# metric name on the command line (bench/run.py ENGINE_METRICS) -> measurement
MEASUREMENTS = {"idle_fleet": idle_fleet}
