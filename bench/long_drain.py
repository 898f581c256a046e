"""The long drain under churn (issue 32, item 7): throughput per slice and the jobs table's size
over a drain of ``long_drain`` (1,000,000) jobs with retention on, on PostgreSQL.

What "steady state" means here: jobs flowing in and out at once, as in a fleet, at a steady
rate. A producer process (``client_feed``) enqueues ``long_rate`` (1,500) jobs/s in
``enqueue_many`` calls four times a second, until ``long_drain`` jobs have been enqueued, and
waits while more than ``long_backlog`` (20,000) are ready; one ``runworker --concurrency 32``
(not burst: its maintenance services run as in production, retention among them) drains them
meanwhile, after a first fill of one call's worth. The table then holds what a fleet's
does: the rows retention has not deleted yet, about rate x (retention age + its interval), so
its steady-state size is set by the rate and the settings, not by how fast a loaded machine
happens to drain. ``long_rate=0`` feeds as fast as the worker drains instead (a chunk of a quarter
of the backlog whenever it falls below three quarters): the slices then show the worker's own
pace, but the table's size follows that pace (a faster slice leaves more finished rows for
retention's next run), so its ratios mix bloat with speed. Retention keeps succeeded jobs
``long_retention`` seconds (30; ``BENCH_RETENTION_SECONDS``, read by ``bench/settings.py``) and
runs as the library runs it: once a minute (±20 %), 10,000 jobs per run, again after 1 s while a
backlog is left.

Sampled every ``SAMPLE_EVERY`` seconds from a session of its own: jobs enqueued (the id
sequence's high mark: ids are never reused) and still unfinished (``ready`` or ``running``,
through their partial indexes), so jobs completed = enqueued - unfinished (finished rows may
already be deleted: the jobs' ``finished_at`` cannot be counted afterwards); and the sizes:
``pg_relation_size`` (heap), ``pg_indexes_size`` and ``pg_total_relation_size`` (heap, indexes
and TOAST) of ``django_workqueue_job``, and the total of every ``django_workqueue_`` table.

Reported:

* the rate of each slice of ``long_slice`` completions (``slice_rates``: from the samples
  that bracket each slice, the clock started at the first completion) and last / first;
* the sizes at the start (after the first fill and VACUUM ANALYZE), at each
  slice's end, and at the end: after the drain, once retention has deleted every finished job
  (it waits up to ``END_WAIT`` seconds for the worker's own retention, which runs once a minute;
  past that, or in ``--quick`` where the age is 0, ``retention.purge()`` is called: the same
  function, on demand);
* the steady-state size: the largest total size seen in the first half of the drain (jobs
  flowing in and out, retention having run: the JSON says whether it had); the second half's
  largest and the end's, each over it (target ≤ 1.2: the table does not keep growing);
* autovacuum's runs on the jobs table over the drain (``pg_stat_user_tables``) and its
  per-table settings (``reloptions``).

PostgreSQL only (the sizes are PostgreSQL's); on the SQLite engine system it measures nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg

from . import pgadmin
from .engine_metrics import _prefix
from .metrics import Log, Sizes
from .slices import growth, slice_rates
from .stats import summary
from .systems.base import System, WorkerProcess

SETTING = {"concurrency": 32, "queues": "default"}
SAMPLE_EVERY = 0.5
END_WAIT = 150.0  # retention's interval (60 s, +20 %) twice, and the retention age's 30 s
TABLE = "django_workqueue_job"

_PROGRESS = (
    "SELECT coalesce((SELECT max(id) FROM django_workqueue_job), 0), "
    "(SELECT count(*) FROM django_workqueue_job WHERE status = 'ready' AND flow_key IS NULL) "
    "+ (SELECT count(*) FROM django_workqueue_job WHERE status = 'running')"
)
_SIZES = (
    "SELECT pg_relation_size(%(t)s::regclass), pg_indexes_size(%(t)s::regclass), "
    "pg_total_relation_size(%(t)s::regclass), "
    "(SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class AS c "
    " WHERE c.relkind = 'r' AND c.relname LIKE 'django\\_workqueue\\_%%'), "
    "(SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = %(t)s::regclass), "
    "(SELECT n_tup_del FROM pg_stat_user_tables WHERE relid = %(t)s::regclass)"
)
_ROWS = "SELECT count(*) FROM django_workqueue_job"
_VACUUMS = (
    "SELECT autovacuum_count, n_dead_tup FROM pg_stat_user_tables WHERE relid = %(t)s::regclass"
)
_RELOPTIONS = "SELECT reloptions FROM pg_class WHERE oid = %(t)s::regclass"


# --- the measurement ------------------------------------------------------------------------


def _sizes(session: psycopg.Connection) -> dict[str, int]:
    row = session.execute(_SIZES, {"t": TABLE}).fetchone()
    assert row is not None
    heap, indexes, total, tables, rows, deleted = (int(v or 0) for v in row)
    return {"heap": heap, "indexes": indexes, "total": total, "all_tables": tables,
            "rows": rows, "deleted": deleted}  # fmt: skip


def _rows(session: psycopg.Connection) -> int:
    row = session.execute(_ROWS).fetchone()
    return int(row[0]) if row else 0


def _vacuums(session: psycopg.Connection) -> tuple[int, int]:
    row = session.execute(_VACUUMS, {"t": TABLE}).fetchone()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def _check_alive(processes: Sequence[WorkerProcess]) -> None:
    for process in processes:
        if process.process.poll() is not None and process.process.returncode != 0:
            process.check()  # raises with its log


@contextlib.contextmanager
def _running(*processes: WorkerProcess) -> Iterator[None]:
    try:
        yield
    finally:
        for process in processes:
            process.stop()


def _chunk(backlog: int, rate: float) -> int:
    """Jobs per ``enqueue_many`` call: four calls a second at a steady rate, else a quarter of
    the backlog."""
    return max(1, int(rate / 4) if rate > 0 else backlog // 4)


def _mib(value: float) -> str:
    return f"{value / 2**20:,.1f} MiB"


def _once(system: System, sizes: Sizes, log: Log) -> dict[str, Any]:
    total, size = int(sizes.long_drain), int(sizes.long_slice)
    backlog = min(int(sizes.long_backlog), total)
    age = float(sizes.long_retention)
    rate = float(sizes.long_rate)
    env = {"BENCH_RETENTION_SECONDS": str(age)}
    autovacuum = str(pgadmin.scalar("postgres", "SHOW autovacuum"))
    if autovacuum != "on":
        log(f"{system.name}: long_drain: autovacuum is {autovacuum} on this server: nothing "
            "reclaims dead rows, and no per-table setting can (performance.md)")  # fmt: skip
    system.reset()
    # The first fill: the backlog, for a feed as fast as drained; one call's worth at a steady
    # rate (what the producer has just sent), so that no first burst speeds the first slice.
    first = _chunk(backlog, rate) if rate > 0 else backlog
    system.client("fill", n=first)
    system.after_fill()
    with psycopg.connect(pgadmin.url(system.database), autocommit=True) as session:
        start = _sizes(session)
        vacuums_before, _ = _vacuums(session)
        worker = system.start_worker(SETTING, burst=False, tag="long-drain", **env)
        feeder = system.start_client(
            "feed", tag="long-drain-feed", total=total - first, backlog=backlog,
            chunk=_chunk(backlog, rate), rate=rate,
        )  # fmt: skip
        progress: list[tuple[float, int]] = []
        sampled: list[tuple[int, int]] = []
        slice_sizes: list[dict[str, int]] = []
        deleted_in_first_half = False
        with _running(worker, feeder):
            began = time.monotonic()
            completed = 0
            while completed < total:
                _check_alive([worker, feeder])
                if time.monotonic() - began > 4 * 3600:
                    raise RuntimeError(f"long_drain: {completed} of {total} after 4 hours")
                enqueued, unfinished = session.execute(_PROGRESS).fetchone()  # type: ignore[misc]
                completed = int(enqueued) - int(unfinished)
                progress.append((time.monotonic(), completed))
                now = _sizes(session)
                sampled.append((completed, now["total"]))
                if completed <= total / 2 and now["deleted"] > start["deleted"]:
                    deleted_in_first_half = True
                if completed >= size * (len(slice_sizes) + 1) or completed >= total:
                    slice_sizes.append({"completed": completed, **now})
                    log(f"{system.name}: long_drain {completed:,} done, {now['rows']:,} rows, "
                        f"job table {_mib(now['total'])} (heap {_mib(now['heap'])}, indexes "
                        f"{_mib(now['indexes'])})")  # fmt: skip
                time.sleep(SAMPLE_EVERY)
            drained_at = time.monotonic()
            # Once retention has run: every finished job is past its age within END_WAIT.
            by = "worker"
            deadline = drained_at + (END_WAIT if age > 0 else 0)
            while _rows(session) and time.monotonic() < deadline:
                _check_alive([worker])
                time.sleep(1.0)
            if _rows(session):
                by = "purge()"
                system.client("purge", seconds=age)
            end = _sizes(session)
            vacuums_after, dead = _vacuums(session)
        reloptions = session.execute(_RELOPTIONS, {"t": TABLE}).fetchone()
    rates = slice_rates(progress, size)
    grown = growth(sampled, total, end["total"])
    log(
        f"{system.name}: long_drain slices of {size:,}: {[round(r) for r in rates]} jobs/s; "
        f"job table: start {_mib(start['total'])}, steady {_mib(grown['steady'])}, later "
        f"{grown['later_ratio']:.2f}x, end {_mib(end['total'])} = {grown['end_ratio']:.2f}x "
        f"(retention by {by}); autovacuum ran {vacuums_after - vacuums_before} time(s)"
    )  # fmt: skip
    return {
        "rates": rates,
        "ratio": rates[-1] / rates[0] if rates else 0.0,
        "seconds": drained_at - began,
        "start": start,
        "slices": slice_sizes,
        "end": end,
        "end_retention_by": by,
        "steady_total": grown["steady"],
        "later_ratio": grown["later_ratio"],
        "end_ratio": grown["end_ratio"],
        "retention_ran_in_first_half": deleted_in_first_half,
        "autovacuums": vacuums_after - vacuums_before,
        "dead_tuples_at_end": dead,
        "reloptions": (reloptions or [None])[0],
        "server_autovacuum": autovacuum,
    }


def long_drain(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    if _prefix(system):  # sqlite_
        log(f"{system.name}: long_drain is PostgreSQL only; skipped")
        return {}
    runs = [_once(system, sizes, log) for _ in range(reps)]
    detail = {
        "n": int(sizes.long_drain), "slice": int(sizes.long_slice),
        "backlog": int(sizes.long_backlog), "retention_seconds": float(sizes.long_retention),
        "feed_rate": float(sizes.long_rate) or "as fast as drained",
        "setting": f"runworker --concurrency {SETTING['concurrency']} and a feeder",
        "runs": runs,
    }  # fmt: skip
    return {
        "long_drain_first": summary([r["rates"][0] if r["rates"] else 0.0 for r in runs], **detail),
        "long_drain_last": summary([r["rates"][-1] if r["rates"] else 0.0 for r in runs]),
        "long_drain_ratio": summary([r["ratio"] for r in runs]),
        "long_drain_size_later": summary([r["later_ratio"] for r in runs]),
        "long_drain_size_end": summary([r["end_ratio"] for r in runs]),
    }


# metric name on the command line (bench/run.py ENGINE_METRICS) -> measurement
MEASUREMENTS = {"long_drain": long_drain}
