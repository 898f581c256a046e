"""Observability measurements, for django-workqueue on PostgreSQL and on SQLite.

* ``signals_cost``: what the signals (``django_workqueue.signals``) cost a drain. An in-process
  burst worker (8 slots) drains N no-op jobs with no receiver connected, and again with a no-op
  receiver connected to every signal; the pair is repeated with its order alternating. Without
  a receiver a send point tests one attribute and builds nothing, so ``signals_cost_off`` is
  the engine as it was; ``signals_cost_ratio`` (off / on, per pair) shows what six receivers'
  calls per job cost when someone listens. The first cannot be compared with an engine without
  send points in one run, so the signal code a job goes through with no receiver is also timed
  on its own (``signals_gate_ns``, ns per job) and set against a job's share of the drain
  (``signals_gate_share``: the percentage of a job's drain time it takes).

Each returns ``{metric: summary}``, with the system's ``metric_prefix`` (``sqlite_`` on SQLite).
"""

from __future__ import annotations

import statistics
from typing import Any

from .engine_metrics import _prefix
from .metrics import Log, Sizes
from .stats import summary
from .systems.base import System


def signals_cost(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    jobs, pairs = int(sizes.signals_jobs), max(2, reps)
    system.reset()
    run = system.client("signals_cost", jobs=jobs, pairs=pairs)
    detail = {"jobs": jobs, "pairs": pairs}
    prefix = _prefix(system)
    ratios = [off / on for off, on in zip(run["off"], run["on"], strict=True)]
    # The share of a job's drain time spent in signal code when nobody listens.
    share = 100 * run["gate_ns"] / (1e9 / statistics.median(run["off"]))
    log(f"{system.name}: drain of {jobs:,} no-ops, jobs/s: no receivers "
        f"{statistics.median(run['off']):,.0f}, a receiver on every signal "
        f"{statistics.median(run['on']):,.0f} (off/on {statistics.median(ratios):.2f}x); "
        f"signal code with no receiver: {run['gate_ns']:.0f} ns/job, "
        f"{share:.4f}% of a job")  # fmt: skip
    return {
        f"{prefix}signals_cost_off": summary(run["off"], **detail),
        f"{prefix}signals_cost_on": summary(run["on"], **detail),
        f"{prefix}signals_cost_ratio": summary(ratios, **detail),
        f"{prefix}signals_gate_ns": summary([run["gate_ns"]], **detail),
        f"{prefix}signals_gate_share": summary([share], **detail),
    }


MEASUREMENTS = {"signals_cost": signals_cost}
