"""Flow-control measurements, for django-workqueue on PostgreSQL and on SQLite.

* ``flow_claim``: a claim of 8 ready jobs, timed, with flow control off (plain jobs, the plain
  claim) and on: a task with ``concurrency=`` (one key), with ``concurrency=`` and a
  ``limit_key`` spread over many keys, with ``rate=``, and with ``fair_key=`` over many tenants.
  The limits are set so high that they never hold a job back: what is measured is what they
  cost. Median and p95 per repetition (the medians' median is reported), statements per claim,
  and each case's median over the plain claim's.
* ``skip_queue_latency``: enqueue-to-start latency of a no-op job, with and without
  ``skip_queue=True``. One ``runworker --concurrency 8`` (every queue) is already running and
  idle; jobs are enqueued one at a time in autocommit, spaced by a jittered gap, the two kinds
  alternating so that a slow spell of the machine hits both. The clock starts just before the
  ``enqueue()`` call (its INSERT and commit included: a skip-queue enqueue returns only once
  its attempt has ended, so its commit cannot be stamped from outside) and stops when the
  task's body starts (``bench/stamp.py``; one machine, one clock). Without ``skip_queue`` the
  worker picks the job up (NOTIFY on PostgreSQL, its poll interval on SQLite). With it the
  enqueuing process runs the job, unless the worker, woken by the same commit, claimed it
  first: how often that happened is reported (``worker_won``).

Each returns ``{metric: summary}``, with the system's ``metric_prefix`` (``sqlite_`` on SQLite).
"""

from __future__ import annotations

import statistics
from typing import Any

from .engine_metrics import CLAIM_LIMIT, _prefix
from .metrics import Log, Sizes
from .stats import percentile, summary
from .systems.base import LOG_DIR, System

CASES = ("plain", "concurrency", "concurrency_per_key", "rate", "fair")


def flow_claim(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    jobs, keys, claims = int(sizes.flow_jobs), int(sizes.flow_keys), int(sizes.flow_claims)
    runs = []
    for _ in range(reps):
        system.reset()
        runs.append(system.client("flow_claim", jobs=jobs, keys=keys, claims=claims,
                                  limit=CLAIM_LIMIT))  # fmt: skip
    detail = {"jobs": jobs, "keys": keys, "claims_per_rep": claims, "limit": CLAIM_LIMIT}
    prefix = _prefix(system)
    out: dict[str, Any] = {}
    for case in CASES:
        for stat in ("p50", "p95"):
            out[f"{prefix}flow_claim_{case}_{stat}"] = summary(
                [run[case][stat] for run in runs], **detail
            )
        out[f"{prefix}flow_claim_{case}_statements"] = summary(
            [run[case]["statements"] for run in runs], **detail
        )
        if case != "plain":
            out[f"{prefix}flow_claim_{case}_ratio"] = summary(
                [run[case]["p50"] / run["plain"]["p50"] for run in runs], **detail
            )
    medians = {case: statistics.median(run[case]["p50"] for run in runs) for case in CASES}
    log(f"{system.name}: claim of {CLAIM_LIMIT} with {jobs:,} ready jobs ({keys:,} keys): "
        + ", ".join(f"{case} {ms:.2f} ms" for case, ms in medians.items()))  # fmt: skip
    return out


WORKER = {"concurrency": 8, "queues": None}


def skip_queue_latency(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    n, gap = int(sizes.skip_queue), float(sizes.gap)
    stamp_file = LOG_DIR / f"stamps-skip-queue-{system.name}.txt"
    p50s: dict[str, list[float]] = {"skip_queue": [], "worker": []}
    p95s: dict[str, list[float]] = {"skip_queue": [], "worker": []}
    worker_won = []
    for _ in range(reps):
        system.reset()
        stamp_file.parent.mkdir(parents=True, exist_ok=True)
        stamp_file.unlink(missing_ok=True)
        worker = system.start_worker(
            WORKER, burst=False, tag="skip-queue", BENCH_STAMP_FILE=str(stamp_file)
        )
        try:
            run = system.client("skip_queue_latency", n=n, gap=gap, stamp_file=str(stamp_file))
        finally:
            worker.stop()
        for kind in p50s:
            p50s[kind].append(percentile(run[kind], 50))
            p95s[kind].append(percentile(run[kind], 95))
        worker_won.append(run["worker_won"])
        log(f"{system.name}: enqueue to start, {n} jobs each: skip_queue p50 "
            f"{p50s['skip_queue'][-1]:.2f} ms (p95 {p95s['skip_queue'][-1]:.2f}), worker p50 "
            f"{p50s['worker'][-1]:.2f} ms (p95 {p95s['worker'][-1]:.2f}); the worker claimed "
            f"{run['worker_won']} of the {n} skip-queue jobs first")  # fmt: skip
    detail = {"n": n, "setting": "runworker --concurrency 8 running, idle", "gap": gap,
              "worker_won": worker_won}  # fmt: skip
    prefix = _prefix(system)
    out = {}
    for kind in p50s:
        out[f"{prefix}{kind}_start_p50"] = summary(p50s[kind], **detail)
        out[f"{prefix}{kind}_start_p95"] = summary(p95s[kind], **detail)
    ratios = [s / w for s, w in zip(p50s["skip_queue"], p50s["worker"], strict=True)]
    out[f"{prefix}skip_queue_start_ratio"] = summary(ratios, **detail)
    log(f"{system.name}: skip_queue / worker p50: {statistics.median(ratios):.2f}x")
    return out


# metric name on the command line (bench/run.py ENGINE_METRICS) -> measurement
MEASUREMENTS = {"flow_claim": flow_claim, "skip_queue_latency": skip_queue_latency}
