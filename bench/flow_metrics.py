"""The cost of flow control on a claim, for django-workqueue on PostgreSQL and on SQLite.

* ``flow_claim``: a claim of 8 ready jobs, timed, with flow control off (plain jobs, the plain
  claim) and on: a task with ``concurrency=`` (one key), with ``concurrency=`` and a
  ``limit_key`` spread over many keys, with ``rate=``, and with ``fair_key=`` over many tenants.
  The limits are set so high that they never hold a job back: what is measured is what they
  cost. Median and p95 per repetition (the medians' median is reported), statements per claim,
  and each case's median over the plain claim's.
"""

from __future__ import annotations

import statistics
from typing import Any

from .engine_metrics import CLAIM_LIMIT, _prefix
from .metrics import Log, Sizes
from .stats import summary
from .systems.base import System

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


# metric name on the command line (bench/run.py ENGINE_METRICS) -> measurement
MEASUREMENTS = {"flow_claim": flow_claim}
