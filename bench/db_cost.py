"""What each job costs the database (issue 16): WAL bytes, statements and transactions per job.

``db_cost`` fills the queue with N no-op jobs by the system's bulk API (calls of 5,000, the fill
every drain starts from), then drains them with one burst worker at the system's best drain
setting of this run (the first setting when the drain was not measured). Around the fill and
around the drain it reads:

* the server's WAL insert position (``pg_current_wal_lsn()``): WAL bytes per job. It is the
  whole server's WAL, so on a shared server the figure is an upper bound;
* the statements the bench database's sessions sent, as the server logs them with
  ``log_statement = 'all'`` (set on the bench database for the window, so only new sessions,
  the workers', log; ``ALTER DATABASE ... RESET`` afterwards): one line per simple query or
  per execution of a prepared statement, whatever the client library. ``BEGIN`` and
  ``COMMIT`` count as statements: each is a round trip for the client and work for the server;
* the database's committed transactions (``pg_stat_database.xact_commit``; a backend reports
  its counts when it goes idle or exits, so the read waits until the workers have exited);
* the CPU time of the database's backends (``BackendCPU``: ``/proc/<pid>/stat`` of every
  process whose title is ``postgres: ... <user> <database> ...``, sampled every 20 ms through the
  window; ``pg_stat_statements`` is not loaded on this server). A backend's last < 20 ms before
  it exits are missed, and the server's shared processes (WAL writer, checkpointer) are left
  out: a lower bound, the same for every system. Only where the server runs on this machine
  (its backends are in this ``/proc``); otherwise left out and said to be.

The statements come from the server's log file (``BENCH_PG_LOG``, by default Debian's
``/var/log/postgresql/postgresql-<major>-main.log``); the log lines must name the database
(``%d`` in ``log_line_prefix``, as Debian's default does). When the file cannot be read, the
statements are left out and said to be.

Logging every statement slows a drain, so these drains are not timed; the drain's rate is the
``drain`` metric's. Peers: django-workqueue and PgQueuer (the issue's yardstick); the others
drain too slowly for a 20,000-job window to be worth its minutes.
"""

from __future__ import annotations

import os
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from . import pgadmin
from .metrics import Log, Sizes
from .scaling_metrics import _wal_position
from .stats import summary
from .systems.base import System

SYSTEMS = ("workqueue", "pgqueuer")
_LOGGED = re.compile(r"LOG:  (?:statement|execute [^:]*): ")


def log_path() -> Path | None:
    """The server's log file, if it can be read (``BENCH_PG_LOG`` or Debian's default)."""
    configured = os.environ.get("BENCH_PG_LOG")
    if configured:
        path = Path(configured)
    else:
        major = str(pgadmin.scalar("postgres", "SHOW server_version_num"))[:-4]
        path = Path(f"/var/log/postgresql/postgresql-{major}-main.log")
    try:
        with path.open("rb"):
            return path
    except OSError:
        return None


_TICK = os.sysconf("SC_CLK_TCK")


class BackendCPU:
    """CPU seconds spent by the backends of ``database`` while the sampler runs (see above)."""

    def __init__(self, database: str, interval: float = 0.02) -> None:
        self._title = re.compile(rb"^postgres: (?:[^:\x00]*: )?\S+ " + re.escape(database.encode())
                                 + rb" ")  # fmt: skip
        self.interval = interval
        self._start: dict[int, int] = {}  # backends present at the start: their ticks then
        self._last: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.found = False  # any backend of the database seen (the server is on this machine)

    def _backends(self) -> dict[int, int]:
        ticks = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as handle:
                    if not self._title.match(handle.read()):
                        continue
                with open(f"/proc/{entry.name}/stat", "rb") as handle:
                    stat = handle.read()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()
            ticks[int(entry.name)] = int(fields[11]) + int(fields[12])  # utime + stime
        return ticks

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        for pid, ticks in self._backends().items():
            self.found = True
            self._last[pid] = max(ticks, self._last.get(pid, 0))

    def __enter__(self) -> BackendCPU:
        self._start = self._backends()
        self._last = dict(self._start)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        # A backend seen only during the window started in it: from zero (a fork's counts do).
        ticks = sum(last - self._start.get(pid, 0) for pid, last in self._last.items())
        self.seconds = ticks / _TICK


class Window:
    """WAL, logged statements and committed transactions of ``database`` over a window."""

    def __init__(self, database: str, log: Path | None) -> None:
        self.database = database
        self.log = log
        self._marker = f"@{database} "  # log_line_prefix's %u@%d

    def __enter__(self) -> Window:
        if self.log is not None:
            pgadmin.execute("postgres", f'ALTER DATABASE "{self.database}" SET log_statement = '
                                        f"'all'")  # fmt: skip
            self._offset = self.log.stat().st_size
        self._wal = _wal_position()
        self._commits = _commits(self.database)
        self._cpu = BackendCPU(self.database).__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._cpu.__exit__()
        self.cpu = self._cpu.seconds if self._cpu.found else None
        self.wal = _wal_position() - self._wal
        if self.log is not None:
            pgadmin.execute("postgres", f'ALTER DATABASE "{self.database}" RESET log_statement')
        # Backends report their transaction counts when idle or on exit: the workers have
        # exited, the client's session has closed; give the reports a moment to land.
        time.sleep(1.0)
        self.commits = _commits(self.database) - self._commits
        self.statements = self._count_statements() if self.log is not None else None

    def _count_statements(self) -> int:
        assert self.log is not None
        with self.log.open("rb") as handle:
            handle.seek(self._offset)
            text = handle.read().decode("utf-8", "replace")
        return sum(1 for line in text.splitlines() if self._marker in line and _LOGGED.search(line))


def _commits(database: str) -> int:
    return int(
        pgadmin.scalar(
            "postgres",
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
            [database],
        )
    )


def _once(system: System, setting: dict[str, Any], jobs: int, log: Path | None) -> dict:
    system.reset()
    with Window(system.database, log) as fill:
        system.client("fill", n=jobs)
    system.after_fill()
    with Window(system.database, log) as drain:
        system.run_workers(setting)
    left = system.unfinished()
    if left:
        raise RuntimeError(f"{system.name} {setting}: {left} of {jobs} jobs not succeeded")
    point = {
        "enqueue_wal": fill.wal / jobs,
        "enqueue_commits": fill.commits / jobs,
        "drain_wal": drain.wal / jobs,
        "drain_commits": drain.commits / jobs,
    }
    if log is not None:
        assert fill.statements is not None and drain.statements is not None
        point["enqueue_statements"] = fill.statements / jobs
        point["drain_statements"] = drain.statements / jobs
    if drain.cpu is not None:
        point["drain_pg_cpu_ms_per_1000"] = drain.cpu * 1000 / jobs * 1000
    return point


# Settings measured beside the best one (issue 32: PgQueuer's batch nearest our pass size, and
# its best): their metrics get the suffix ``_batch<n>``.
EXTRA_SETTINGS = {"pgqueuer": [{"batch_size": 100}, {"batch_size": 500}]}


def db_cost(
    system: System, sizes: Sizes, reps: int, log: Log, setting: dict[str, Any]
) -> dict[str, Any]:
    jobs = int(sizes.drain)
    server_log = log_path()
    if server_log is None:
        log(f"{system.name}: db_cost: the server's log cannot be read (set BENCH_PG_LOG): "
            f"statements per job are left out")  # fmt: skip
    measured: dict[str, list[dict[str, float]]] = {}
    out: dict[str, Any] = {}
    extras = [
        (extra, f"_batch{extra['batch_size']}") for extra in EXTRA_SETTINGS.get(system.name, [])
    ]
    for each, suffix in [(setting, ""), *extras]:
        key = system.describe(each)
        if key not in measured:
            measured[key] = [_once(system, each, jobs, server_log) for _ in range(reps)]
            _log_point(system, key, measured[key], log)
        points = measured[key]
        detail = {"n": jobs, "setting": key}
        out.update({f"db_{name}{suffix}": summary([p[name] for p in points], **detail)
                    for name in points[0]})  # fmt: skip
    return out


def _log_point(system: System, setting: str, points: list[dict[str, float]], log: Log) -> None:
    median = {key: statistics.median(p[key] for p in points) for key in points[0]}
    statements = (
        f"; statements per job: fill {median['enqueue_statements']:.3f}, drain "
        f"{median['drain_statements']:.3f}"
        if "drain_statements" in median
        else ""
    )
    cpu = median.get("drain_pg_cpu_ms_per_1000")
    backends = "" if cpu is None else f"; PostgreSQL backends' CPU {cpu:,.0f} ms per 1,000 jobs"
    log(f"{system.name}: database cost per job [{setting}]: WAL fill "
        f"{median['enqueue_wal']:,.0f} B, drain {median['drain_wal']:,.0f} B; transactions "
        f"fill {median['enqueue_commits']:.4f}, drain {median['drain_commits']:.4f}"
        f"{statements}{backends}")  # fmt: skip
