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
  when the server cannot hold 50 (the fleet is capped at 80% of the free connections, and the
  JSON says so). Straight to the server, each idle worker holds two connections: its control
  connection and its LISTEN connection; besides, ``MAINTAINER_STANDBYS`` (2) of them hold one
  more, the watch of the maintainer. When 50 do not fit that way and ``pgbouncer`` is
  installed, both fleets run as the deployment guide advises for a large fleet: the control
  connections through a PgBouncer the harness starts (transaction pooling, ``POOL_SIZE``
  server connections), the LISTEN connections direct; the pooler's own queries (its checks of
  an idle server connection) are then counted too. Issue 17's goal: 50 idle workers ≤ 5
  queries/s in total.

``pg_stat_statements`` would count statements instead of transactions, but it needs a server
setting (``shared_preload_libraries``) that the harness does not change. A backend reports its
counts when a transaction ends (at most once a second) or after 10 s idle, so a window's edges
blur by a few transactions; the window is long against that.

Returns ``{metric: summary}``; nothing on SQLite (no NOTIFY: a SQLite fleet is one host).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlsplit

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
STANDBY_WATCHES = 2  # WORKQUEUE["MAINTAINER_STANDBYS"]: that many watch the maintainer, direct
GOAL_WORKERS, GOAL_QUERIES = 50, 5.0
POOL_SIZE = 5  # the pooler's server connections, when the fleet goes through one


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


def fleet_size(wanted: int, *, pooled: bool = False) -> int:
    """``wanted``, or as many idle workers as 80% of the server's free connections hold
    (``pooled``: one LISTEN connection each, beside the pooler's ``POOL_SIZE``), the
    standbys' watch connections set aside."""
    most = int(pgadmin.scalar("postgres", "SHOW max_connections"))
    reserved = int(pgadmin.scalar("postgres", "SHOW superuser_reserved_connections"))
    used = int(pgadmin.scalar("postgres", "SELECT count(*) FROM pg_stat_activity"))
    free = (most - reserved - used) * 8 // 10 - STANDBY_WATCHES
    if pooled:
        return max(1, min(wanted, free - POOL_SIZE))
    return max(1, min(wanted, free // CONNECTIONS_PER_WORKER))


@contextlib.contextmanager
def pooled_env(database: str) -> Iterator[dict[str, str]]:
    """A PgBouncer (transaction pooling) in front of the bench server, and the environment
    that sends a worker's control connection through it and its LISTEN connection direct
    (what ``tests/support/pgbouncer.py`` gives the test suite)."""
    from tests.support.pgbouncer import Pooler

    server = urlsplit(pgadmin.SERVER)
    host, port = server.hostname or "127.0.0.1", server.port or 5432
    pooler = Pooler(
        host=host, port=port, user=unquote(server.username or "postgres"),
        password=unquote(server.password or ""), pool_size=POOL_SIZE,
    ).start()  # fmt: skip
    try:
        yield {
            "DATABASE_URL": pooler.url(database),
            "WORKQUEUE_LISTEN_DSN": f"host={host} port={port}",
            "WORKQUEUE_PREPARED_STATEMENTS": "false",
            "DISABLE_SERVER_SIDE_CURSORS": "true",
        }
    finally:
        pooler.stop()


def _pgbouncer_installed() -> bool:
    return bool(shutil.which("pgbouncer") or os.path.exists("/usr/sbin/pgbouncer"))


def _measure(
    system: System, workers: int, settle: float, seconds: float, log: Log, env: dict[str, str]
) -> float:
    """Start ``workers`` idle workers, wait, count; return transactions per second."""
    system.reset()
    extra = {**LIBRARY_DEFAULTS, **env}
    setting: dict[str, Any] = {"concurrency": 1, "queues": None}
    started = [
        system.start_worker(setting, burst=False, tag=f"idle-{n}", **extra) for n in range(workers)
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
    pooled = workers < wanted and _pgbouncer_installed()
    if pooled:
        workers = fleet_size(wanted, pooled=True)
        log(f"{system.name}: idle_fleet: {wanted} workers do not fit the server's connections "
            f"two each: control connections through PgBouncer ({POOL_SIZE} server "
            "connections), LISTEN direct")  # fmt: skip
    if workers < wanted:
        log(f"{system.name}: idle_fleet: the server's free connections hold {workers} idle "
            f"workers, not {wanted}; the figure for {GOAL_WORKERS} is extrapolated")  # fmt: skip
    settle, seconds = float(sizes.idle_settle), float(sizes.idle_seconds)
    alone, fleet, extrapolated = [], [], []
    with pooled_env(system.database) if pooled else contextlib.nullcontext({}) as env:
        for _ in range(reps):
            one = _measure(system, 1, settle, seconds, log, env)
            many = _measure(system, workers, settle, seconds, log, env)
            other = (many - one) / (workers - 1) if workers > 1 else 0.0
            alone.append(one)
            fleet.append(many)
            extrapolated.append(one + (GOAL_WORKERS - 1) * other)
    each = [(m - o) / max(1, workers - 1) for m, o in zip(fleet, alone, strict=True)]
    detail = {"workers": workers, "wanted": wanted, "seconds": seconds, "settle": settle,
              "through": "pgbouncer (control), direct (LISTEN)" if pooled else "direct",
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
