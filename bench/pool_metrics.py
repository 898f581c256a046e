"""The thread pool against the process pool (issue 15), for django-workqueue on PostgreSQL and on
SQLite.

* ``pools`` drains N queued jobs with ``runworker --burst --pool threads`` and with
  ``--pool processes`` (every queue of the settings), each at a few concurrencies:

  - CPU-bound jobs (``bench.cpu``): pure-Python arithmetic calibrated once per run to about
    ``pools_cpu_ms`` (20 ms) on this machine, no I/O and no sleep, at concurrency 2 and 4;
  - no-op jobs (``bench.noop``) at concurrency 4, 8 and 16.

  Concurrencies above ``pools_concurrency`` are left out (``--quick`` keeps 2 only). The rate
  is measured in the database, from the first claim to the last completion, so the start-up of
  the worker and of its children is left out (``client_drain_check``, as ``future_backlog``).
  Each repetition runs every setting once, in turn, so a slow spell of the machine hits them
  all; each pool's best concurrency (by median) is reported, and the ratio processes / threads
  of those two, paired per repetition. Issue 15's goals: ≥ 1.8x on CPU-bound jobs, ≥ 0.5x on
  no-ops, on 2 cores.

Each returns ``{metric: summary}``, with the system's ``metric_prefix`` (``sqlite_`` on SQLite).
"""

from __future__ import annotations

import statistics
from typing import Any

from .engine_metrics import _prefix
from .metrics import Log, Sizes
from .stats import summary
from .systems.base import System

POOLS = ("threads", "processes")
CPU_CONCURRENCY = (2, 4)
NOOP_CONCURRENCY = (4, 8, 16)  # 2 was the slowest for both pools in every probe
PRIORITY = 0  # every job of the drain (client_drain_check counts them by priority)

_iterations: dict[float, int] = {}  # calibrated once per run: the same jobs on both databases


def _calibrated(system: System, milliseconds: float, log: Log) -> int:
    if milliseconds not in _iterations:
        _iterations[milliseconds] = int(system.client("calibrate_cpu", milliseconds=milliseconds))
        log(f"pools: {_iterations[milliseconds]:,} iterations of bench.cpu's loop take "
            f"about {milliseconds:g} ms here")  # fmt: skip
    return _iterations[milliseconds]


def _drain(system: System, setting: dict[str, Any], jobs: int, fill: dict[str, Any]) -> float:
    """One drain of ``jobs`` fresh jobs; jobs/s from the first claim to the last completion."""
    system.reset()
    if "iterations" in fill:
        system.client("enqueue_cpu_jobs", n=jobs, iterations=fill["iterations"])
    else:
        system.client("enqueue_jobs", n=jobs, priority=PRIORITY)
    system.after_fill()
    system.run_workers(setting)
    return float(system.client("drain_check", due=jobs, due_priority=PRIORITY)["rate"])


def _compare(
    system: System, kind: str, jobs: int, concurrencies: list[int], fill: dict[str, Any],
    reps: int, log: Log,
) -> dict[str, Any]:  # fmt: skip
    settings = [{"pool": pool, "concurrency": c, "queues": None}
                for c in concurrencies for pool in POOLS]  # fmt: skip
    samples: dict[tuple[str, int], list[float]] = {
        (s["pool"], s["concurrency"]): [] for s in settings
    }
    for _ in range(reps):
        for setting in settings:
            rate = _drain(system, setting, jobs, fill)
            samples[(setting["pool"], setting["concurrency"])].append(rate)
            log(f"{system.name}: pools {kind}: {jobs:,} jobs, --pool {setting['pool']} "
                f"--concurrency {setting['concurrency']}: {rate:,.1f} jobs/s")  # fmt: skip
    best = {
        pool: max(concurrencies, key=lambda c, pool=pool: statistics.median(samples[(pool, c)]))
        for pool in POOLS
    }
    per_setting = {f"{pool} {c}": summary(values) for (pool, c), values in samples.items()}
    prefix = _prefix(system)
    detail = {"n": jobs, **fill, "per_setting": per_setting}
    out = {
        f"{prefix}pools_{kind}_{pool}": summary(
            samples[(pool, best[pool])],
            **detail,
            setting=f"runworker --burst --pool {pool} --concurrency {best[pool]}",
        )
        for pool in POOLS
    }
    ratios = [
        p / t
        for p, t in zip(
            samples[("processes", best["processes"])],
            samples[("threads", best["threads"])],
            strict=True,
        )
    ]
    out[f"{prefix}pools_{kind}_ratio"] = summary(
        ratios, **detail, setting=f"processes {best['processes']} / threads {best['threads']}"
    )
    log(f"{system.name}: pools {kind}: best threads ({best['threads']}) "
        f"{statistics.median(samples[('threads', best['threads'])]):,.1f} jobs/s, best processes "
        f"({best['processes']}) {statistics.median(samples[('processes', best['processes'])]):,.1f}"
        f" jobs/s: processes / threads {statistics.median(ratios):.2f}x")  # fmt: skip
    return out


def pools(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    cap = int(sizes.pools_concurrency)
    cpu_levels = [c for c in CPU_CONCURRENCY if c <= cap] or [CPU_CONCURRENCY[0]]
    noop_levels = [c for c in NOOP_CONCURRENCY if c <= cap] or [NOOP_CONCURRENCY[0]]
    milliseconds = float(sizes.pools_cpu_ms)
    iterations = _calibrated(system, milliseconds, log)
    fill = {"iterations": iterations, "job_ms": milliseconds}
    out = _compare(system, "cpu", int(sizes.pools_cpu), cpu_levels, fill, reps, log)
    out.update(_compare(system, "noop", int(sizes.pools_noop), noop_levels, {}, reps, log))
    return out


# metric name on the command line (bench/run.py ENGINE_METRICS) -> measurement
MEASUREMENTS = {"pools": pools}
