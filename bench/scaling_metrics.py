"""The scaling curve (issue 17): drain throughput with 1, 2, 4 and 8 ``runworker`` processes on
PostgreSQL, and where the database rather than Python becomes the bottleneck.

* ``scaling_curve`` queues N jobs, then drains them with P ``runworker --burst --concurrency C``
  processes started together, for P in 1, 2, 4, 8 (``--quick``: no-ops by 1 and 2, I/O jobs by
  1), and two kinds of job:

  - no-ops (``bench.noop``): the engine's own cost per job, nothing else;
  - 5 ms of I/O (``bench.io``: ``time.sleep(0.005)``, the GIL released), a job that waits on
    something outside the worker as most real jobs do.

  The rate is measured in the database, from the first claim to the last completion
  (``client_drain_check``), so the workers' start-up is left out. While the workers run, a
  sampler reads every 50 ms the CPU time (``utime + stime`` in ``/proc/<pid>/stat``) of each
  worker process and of each PostgreSQL backend of the bench database (the pids in
  ``pg_stat_activity``), and the machine's busy time (``/proc/stat``); each process's CPU time
  within the drain's window is interpolated from its samples. Reported per point: jobs/s, the
  PostgreSQL share of the CPU the drain used (backends / (backends + workers)), CPU ms per job
  on each side, and how busy the machine was (its cores' busy share over the window: work of
  other processes shows here as busy time that is neither side's).

  The server's WAL position is read around the enqueue and around the drain: WAL bytes per job
  of each (the whole server's WAL: on a shared server, an upper bound).

  PostgreSQL's share counts the backends of the bench database: the workers' sessions, and an
  autovacuum worker while it vacuums that database (part of what the jobs cost). The WAL writer
  and the checkpointer are left out: they serve the whole server.

PostgreSQL only (several worker processes on one SQLite file are one writer at a time, see
docs/explanation/sqlite.md): on the SQLite engine system it measures nothing.
"""

from __future__ import annotations

import bisect
import os
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import psycopg

from . import pgadmin
from .engine_metrics import _prefix
from .metrics import Log, Sizes
from .stats import summary
from .systems.base import System, WorkerProcess

PROCESSES = (1, 2, 4, 8)
QUICK_PROCESSES = {"noop": (1, 2), "io": (1,)}  # --quick: three drains, the paths kept alive
CONCURRENCY = 8  # slots per process: 8 processes x (8 + 2) connections fit in 100
IO_SECONDS = 0.005
SAMPLE_EVERY = 0.05
TICKS = os.sysconf("SC_CLK_TCK")  # the unit of /proc's CPU times
_BACKENDS = "SELECT pid FROM pg_stat_activity WHERE datname = %s"


def _cpu_seconds(pid: int) -> float | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


def _machine_busy() -> tuple[float, float]:
    """(busy, total) seconds of all cores since boot, from /proc/stat's first line."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return (sum(values) - idle) / TICKS, sum(values) / TICKS


class Sampler:
    """Samples the CPU time of the workers and of the bench database's backends on a thread."""

    def __init__(self, database: str, workers: list[WorkerProcess]) -> None:
        self.database = database
        self.workers = workers
        self.series: dict[tuple[str, int], list[tuple[float, float]]] = {}
        self.machine: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        backends: list[int] = []
        last_lookup = 0.0
        # One session for the look-ups (its own backend, in another database, is not counted).
        with psycopg.connect(pgadmin.url("postgres"), autocommit=True) as session:
            while not self._stop.is_set():
                if time.time() - last_lookup > 0.25:  # backends appear as the workers connect
                    backends = [pid for (pid,) in session.execute(_BACKENDS, [self.database])]
                    last_lookup = time.time()
                self._sample(backends)
                self._stop.wait(SAMPLE_EVERY)

    def _sample(self, backends: list[int]) -> None:
        pids = [("python", w.process.pid) for w in self.workers]
        pids += [("postgres", pid) for pid in backends]
        for side, pid in pids:
            cpu = _cpu_seconds(pid)
            if cpu is not None:
                self.series.setdefault((side, pid), []).append((time.time(), cpu))
        self.machine.append((time.time(), *_machine_busy()))

    def cpu_within(self, side: str, start: float, end: float) -> float:
        """CPU seconds the processes of ``side`` used between ``start`` and ``end``."""
        return sum(
            _at(series, end) - _at(series, start)
            for (kind, _), series in self.series.items()
            if kind == side
        )

    def machine_busy_within(self, start: float, end: float) -> float:
        """The share of all cores' time that was busy between ``start`` and ``end``."""
        busy = [(t, b) for t, b, _ in self.machine]
        total = [(t, s) for t, _, s in self.machine]
        elapsed = _at(total, end) - _at(total, start)
        return (_at(busy, end) - _at(busy, start)) / elapsed if elapsed > 0 else 0.0


def _at(series: list[tuple[float, float]], moment: float) -> float:
    """A cumulative counter's value at ``moment``, interpolated between its samples (before its
    first sample: the first value; after its last: the last, the process having exited)."""
    times = [t for t, _ in series]
    index = bisect.bisect_left(times, moment)
    if index == 0:
        return series[0][1]
    if index == len(series):
        return series[-1][1]
    (t0, v0), (t1, v1) = series[index - 1], series[index]
    return v0 + (v1 - v0) * (moment - t0) / (t1 - t0)


def _wal_position() -> int:
    """The server's WAL insert position in bytes (the whole server: other databases' writes
    count too, so the figures are upper bounds on a shared server)."""
    return int(pgadmin.scalar("postgres", "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"))


def _drain(system: Any, kind: str, processes: int, jobs: int) -> dict[str, float]:
    system.reset()
    before_enqueue = _wal_position()
    if kind == "io":
        system.client("enqueue_io_jobs", n=jobs, seconds=IO_SECONDS)
    else:
        system.client("enqueue_jobs", n=jobs)
    enqueue_wal = _wal_position() - before_enqueue
    system.after_fill()
    setting = {"concurrency": CONCURRENCY}
    before_drain = _wal_position()
    workers = [system.start_worker(setting, burst=True, tag=f"curve{n}") for n in range(processes)]
    with Sampler(system.database, workers) as sampler:
        for worker in workers:
            worker.wait(timeout=1800)
    drain_wal = _wal_position() - before_drain
    for worker in workers:
        worker.check()
    drained = system.client("drain_check", due=jobs, due_priority=0)
    start, end = drained["first"], drained["last"]
    postgres = sampler.cpu_within("postgres", start, end)
    python = sampler.cpu_within("python", start, end)
    return {
        "rate": drained["rate"],
        "pg_share": 100 * postgres / max(postgres + python, 1e-9),
        "pg_ms_per_job": 1000 * postgres / jobs,
        "py_ms_per_job": 1000 * python / jobs,
        "machine_busy": 100 * sampler.machine_busy_within(start, end),
        "enqueue_wal_per_job": enqueue_wal / jobs,
        "drain_wal_per_job": drain_wal / jobs,
    }


def scaling_curve(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    if _prefix(system):  # sqlite_
        log(f"{system.name}: scaling_curve is PostgreSQL only; skipped")
        return {}
    full = int(sizes.curve_processes) >= max(PROCESSES)
    out: dict[str, Any] = {}
    for kind, jobs in (("noop", int(sizes.curve_noop)), ("io", int(sizes.curve_io))):
        levels = PROCESSES if full else QUICK_PROCESSES[kind]
        for processes in levels:
            points = [_drain(system, kind, processes, jobs) for _ in range(reps)]
            median = {key: statistics.median(p[key] for p in points) for key in points[0]}
            detail = {
                "n": jobs,
                "setting": f"{processes} x runworker --burst --concurrency {CONCURRENCY}",
                "points": points,
            }
            name = f"curve_{kind}_{processes}"
            out[name] = summary([p["rate"] for p in points], **detail)
            out[f"{name}_pg_share"] = summary([p["pg_share"] for p in points], **detail)
            log(f"{system.name}: scaling curve {kind}, {processes} process(es): "
                f"{median['rate']:,.0f} jobs/s; PostgreSQL {median['pg_share']:.0f}% of the "
                f"drain's CPU ({median['pg_ms_per_job']:.3f} ms/job, Python "
                f"{median['py_ms_per_job']:.3f} ms/job); machine {median['machine_busy']:.0f}% "
                f"busy; WAL per job: enqueue {median['enqueue_wal_per_job']:,.0f} B, drain "
                f"{median['drain_wal_per_job']:,.0f} B")  # fmt: skip
    return out


# metric name on the command line (bench/run.py ENGINE_METRICS) -> measurement
MEASUREMENTS = {"scaling_curve": scaling_curve}
