"""Workflow measurements, for django-workqueue on PostgreSQL and on SQLite.

* ``workflow_fanin``: ``group(noop.s(i) for i in range(N)).then(callback.s())`` (N = 1,000)
  enqueued to one running ``runworker --concurrency 8`` (every queue: the engine measurements'
  setting); the time from the enqueue (the workflow's ``created_at``) to the callback's start
  (its ``started_at``), both on the database's clock; median of the repetitions. As a
  yardstick, the same worker first drains N plain no-op jobs (enqueue to last end).
* ``release_cost``: SQL statements per completed step, counted around the worker's completion
  (``workflow.release.record``) for successes of plain jobs, of chain steps (each releases its
  next step) and of a fan-in's members (the last releases the callback), in one batch and one
  by one. Counting is exact, so it runs once.

Each returns ``{metric: summary}``, with the system's ``metric_prefix`` (``sqlite_`` on SQLite).
"""

from __future__ import annotations

from typing import Any

from .engine_metrics import DRAIN, _prefix
from .metrics import Log, Sizes
from .stats import summary
from .systems.base import System

RELEASE_CASES = ("plain", "chain", "fanin", "plain_singly", "chain_singly", "fanin_singly")


def workflow_fanin(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    n = int(sizes.fanin)
    runs: list[dict[str, float]] = []
    for _ in range(reps):
        system.reset()
        worker = system.start_worker(DRAIN, burst=False, tag="fanin")
        try:
            runs.append(system.client("workflow_fanin", n=n))
        finally:
            worker.stop()
        run = runs[-1]
        log(f"{system.name}: fan-out of {n:,} + fan-in: callback started "
            f"{run['to_callback_ms']:,.0f} ms after the enqueue (enqueue {run['enqueue_ms']:,.0f} "
            f"ms, members {run['members_ms']:,.0f} ms, last member to callback "
            f"{run['release_ms']:,.1f} ms); {n:,} plain jobs: {run['plain_ms']:,.0f} ms from "
            f"enqueue to the last end, the members {run['to_last_member_ms']:,.0f} ms")  # fmt: skip
    detail = {"n": n, "setting": "runworker --concurrency 8, started before the enqueue"}
    prefix = _prefix(system)

    def each(key: str) -> list[float]:
        return [run[key] for run in runs]

    return {
        f"{prefix}workflow_fanin": summary(each("to_callback_ms"), **detail),
        f"{prefix}workflow_fanin_enqueue": summary(each("enqueue_ms"), **detail),
        f"{prefix}workflow_fanin_plain": summary(each("plain_ms"), **detail),
        f"{prefix}workflow_fanin_to_last_member": summary(each("to_last_member_ms"), **detail),
        f"{prefix}workflow_fanin_members": summary(each("members_ms"), **detail),
        f"{prefix}workflow_fanin_release": summary(each("release_ms"), **detail),
    }


def release_cost(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    batch = int(sizes.release_batch)
    system.reset()
    cases = system.client("release_cost", batch=batch)
    prefix = _prefix(system)
    out = {}
    for case in RELEASE_CASES:
        entry = cases[case]
        out[f"{prefix}release_cost_{case}"] = summary([entry["per_step"]], **entry)
    each = [f"{case} {cases[case]['per_step']:.2f} / {cases[case + '_singly']['per_step']:.2f}"
            for case in ("plain", "chain", "fanin")]  # fmt: skip
    log(
        f"{system.name}: statements per completed step, batches of {batch} / of 1: "
        + ", ".join(each)
    )
    return out


# metric name on the command line (bench/run.py ENGINE_METRICS) -> measurement
MEASUREMENTS = {"workflow_fanin": workflow_fanin, "release_cost": release_cost}
