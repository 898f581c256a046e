"""The engine measurements of issue 8, for django-workqueue on PostgreSQL and on SQLite.

* ``future_backlog`` (item 9): due jobs drained by ``runworker --burst --concurrency 8`` alone,
  then beside many higher-priority jobs scheduled an hour ahead; both rates and their ratio.
* ``idle_poll`` (item 9): one claim on every queue when nothing is due, with nothing at all and
  then beside a million jobs scheduled an hour ahead.
* ``queue_claim`` (item 10): one claim from one queue and from two, ready jobs in both.
* ``cancel_latency`` (item 7): ``cancel_job`` to ``context.cancelled`` in a running task.
* ``engine`` (issue 32 item 3): µs per job of the engine alone, a drain through a null driver
  (``bench/null_engine.py``), the per-job line off and on; measured once, beside the SQLite
  file (the per-pass bookkeeping's few statements go there; the database is not what is
  measured).

Each returns ``{metric: summary}``; metric names get the system's ``metric_prefix`` (``sqlite_``
on SQLite), and all are recorded under ``workqueue`` beside the comparison's figures.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

from .metrics import Log, Sizes
from .stats import percentile, summary
from .systems.base import LOG_DIR, System

# `runworker --burst --concurrency 8`, every queue of the settings: as a user would run it.
DRAIN = {"concurrency": 8, "queues": None}
CLAIM_LIMIT = 8  # a claim of an idle worker with --concurrency 8
HOUR = 3600.0
DUE_PRIORITY, FUTURE_PRIORITY = 0, 10  # the future jobs outrank the due ones: the worst case


def _prefix(system: System) -> str:
    return str(getattr(system, "metric_prefix", ""))


def _timed(step: Any) -> float:
    started = time.perf_counter()
    step()
    return time.perf_counter() - started


def future_backlog(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    """Drain ``future_due`` due jobs alone, then beside ``future_waiting`` future jobs.

    Paired per repetition (alone, then beside), so a slow spell of the machine hits both.
    The rates come from the database (first claim to last completion, start-up left out);
    the wall-clock rates (process start to exit) are kept in the JSON too.
    """
    due, waiting = int(sizes.future_due), int(sizes.future_waiting)
    alone, beside, ratios, walls, seeds = [], [], [], [], []
    status = None
    for _ in range(reps):
        system.reset()
        system.client("enqueue_jobs", n=due, priority=DUE_PRIORITY)
        system.after_fill()
        wall_alone = system.run_workers(DRAIN)
        alone.append(system.client("drain_check", due=due, due_priority=DUE_PRIORITY)["rate"])

        system.reset()
        seed = system.client("enqueue_jobs", n=waiting, delay=HOUR, priority=FUTURE_PRIORITY)
        status = seed["status"]
        system.client("enqueue_jobs", n=due, priority=DUE_PRIORITY)
        seeds.append(seed["seconds"] + _timed(system.after_fill))
        wall_beside = system.run_workers(DRAIN)
        beside.append(system.client("drain_check", due=due, due_priority=DUE_PRIORITY)["rate"])
        ratios.append(beside[-1] / alone[-1])
        walls.append({"alone": due / wall_alone, "beside": due / wall_beside})
        log(f"{system.name}: {due:,} due jobs drained at {alone[-1]:,.0f} jobs/s alone, "
            f"{beside[-1]:,.0f} beside {waiting:,} future jobs ({ratios[-1]:.2f}x)")  # fmt: skip
    setting = {"n": due, "setting": "runworker --burst --concurrency 8"}
    detail = {**setting, "future": waiting, "future_status": status}
    prefix = _prefix(system)
    return {
        f"{prefix}future_backlog_alone": summary(alone, **setting),
        f"{prefix}future_backlog_beside": summary(beside, **detail, wall_rates=walls),
        f"{prefix}future_backlog_ratio": summary(ratios, **detail, seed_seconds=seeds),
    }


def idle_poll(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    """Claims on every queue with no job at all, then beside ``idle_waiting`` future jobs."""
    claims, waiting = int(sizes.idle_claims), int(sizes.idle_waiting)
    system.reset()
    empty = system.client("idle_claims", claims=claims, limit=CLAIM_LIMIT)
    seed = system.client("copy_jobs", n=waiting, delay=HOUR, priority=FUTURE_PRIORITY)
    vacuum = _timed(system.after_fill)
    log(f"{system.name}: {waiting:,} future jobs ({seed['status']}) made in "
        f"{seed['seconds']:.1f} s, then VACUUM ANALYZE {vacuum:.1f} s")  # fmt: skip
    p50s, p95s, everything = [], [], []
    for _ in range(reps):  # each repetition in a fresh client process
        timings = system.client("idle_claims", claims=claims, limit=CLAIM_LIMIT)
        p50s.append(percentile(timings, 50))
        p95s.append(percentile(timings, 95))
        everything.extend(timings)
    detail = {"claims_per_rep": claims, "limit": CLAIM_LIMIT, "future": waiting,
              "future_status": seed["status"], "seed_seconds": seed["seconds"],
              "vacuum_seconds": vacuum}  # fmt: skip
    prefix = _prefix(system)
    out = {
        f"{prefix}idle_poll_empty_p50": summary([percentile(empty, 50)], claims=claims),
        f"{prefix}idle_poll_p50": summary(p50s, **detail),
        f"{prefix}idle_poll_p95": summary(p95s, **detail),
        f"{prefix}idle_poll_max_all": max(everything),
    }
    log(f"{system.name}: idle poll {statistics.median(p50s):.2f} ms median, "
        f"{statistics.median(p95s):.2f} ms p95 beside {waiting:,} future jobs "
        f"({percentile(empty, 50):.2f} ms with none)")  # fmt: skip
    return out


def queue_claim(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    """Claims from ``default`` alone and from ``default`` and ``mail``, half the jobs in each."""
    ready, claims = int(sizes.queue_ready), int(sizes.queue_claims)
    one, two = ["default"], ["default", "mail"]
    system.reset()
    for queue in ("default", "mail"):
        system.client("copy_jobs", n=ready // 2, queue=queue)
    system.after_fill()
    p50s: dict[str, list[float]] = {"one": [], "two": []}
    p95s: dict[str, list[float]] = {"one": [], "two": []}
    for _ in range(reps):
        timings = system.client(
            "queue_claims", claims=claims, limit=CLAIM_LIMIT, queue_sets=[one, two]
        )
        for key, queues in (("one", one), ("two", two)):
            p50s[key].append(percentile(timings[",".join(queues)], 50))
            p95s[key].append(percentile(timings[",".join(queues)], 95))
    detail = {"ready": ready, "claims_per_rep": claims, "limit": CLAIM_LIMIT}
    prefix = _prefix(system)
    out = {f"{prefix}queue_claim_{key}_{p}": summary(values[key], **detail)
           for p, values in (("p50", p50s), ("p95", p95s)) for key in ("one", "two")}  # fmt: skip
    out[f"{prefix}queue_claim_ratio"] = summary(
        [b / a for a, b in zip(p50s["one"], p50s["two"], strict=True)], **detail
    )
    log(f"{system.name}: claim of {CLAIM_LIMIT} at {ready:,} ready in two queues: "
        f"{statistics.median(p50s['one']):.2f} ms from one queue, "
        f"{statistics.median(p50s['two']):.2f} ms from both")  # fmt: skip
    return out


def cancel_latency(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    """``cancels`` cancellations of running jobs, one at a time, against one idle worker."""
    n, jitter = int(sizes.cancels), float(sizes.cancel_jitter)
    cancel_file = LOG_DIR / f"cancel-{system.name}.txt"
    p50s, p95s, maxes, calls = [], [], [], []
    for _ in range(reps):
        system.reset()
        cancel_file.parent.mkdir(parents=True, exist_ok=True)
        cancel_file.unlink(missing_ok=True)
        worker = system.start_worker(
            {"concurrency": 8}, burst=False, tag="cancel", BENCH_CANCEL_FILE=str(cancel_file)
        )
        try:
            result = system.client("cancel_latency", n=n, jitter=jitter,
                                   cancel_file=str(cancel_file))  # fmt: skip
        finally:
            worker.stop()
        values = result["latencies"]
        p50s.append(percentile(values, 50))
        p95s.append(percentile(values, 95))
        maxes.append(max(values))
        calls.extend(result["cancel_call_ms"])
        log(f"{system.name}: cancellation p50 {p50s[-1]:.1f} ms, p95 {p95s[-1]:.1f} ms, "
            f"max {maxes[-1]:.1f} ms over {n}")  # fmt: skip
    detail = {"n": n, "jitter": jitter, "lease_seconds": 3,
              "cancel_job_call_p50_ms": percentile(calls, 50)}  # fmt: skip
    prefix = _prefix(system)
    return {
        f"{prefix}cancel_p50": summary(p50s, **detail),
        f"{prefix}cancel_p95": summary(p95s, **detail),
        f"{prefix}cancel_max": summary(maxes, **detail),
    }


ENGINE_PROFILE = Path(__file__).resolve().parent / "results" / "engine-profile.txt"
ENGINE_CONCURRENCY = (8, 32)  # jobs per pass: the per-pass part shrinks as it grows


def engine(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    """µs per job of the engine alone (``bench/null_engine.py``): wall and CPU, line off/on."""
    prefix = _prefix(system)
    if not prefix:
        return {}  # once, on SQLite: the null driver leaves the database out of the figure
    # A fresh file, as every other metric starts from: the few real statements of a pass
    # (registration, heartbeat, maintenance) must not read what the metric before left there
    # (a file holding 20,000 jobs read 41 µs a job against 31 for a fresh one, medians of
    # three interleaved runs on a loaded machine, ranges overlapping; 2026-11-29).
    system.reset()
    jobs = int(sizes.engine_jobs)
    out: dict[str, Any] = {}
    for concurrency in ENGINE_CONCURRENCY:
        result = system.client("engine_budget", jobs=jobs, concurrency=concurrency, repeat=reps,
                               profile=concurrency == ENGINE_CONCURRENCY[0])  # fmt: skip
        detail = {"n": jobs, "concurrency": concurrency,
                  "jobs_per_pass": result["runs"]["off"][0]["jobs_per_pass"]}  # fmt: skip
        for line, runs in result["runs"].items():
            for clock in ("cpu_us", "wall_us"):
                out[f"{prefix}engine_{clock}_c{concurrency}_line_{line}"] = summary(
                    [run[clock] for run in runs], **detail
                )
        if "profile" in result:
            ENGINE_PROFILE.parent.mkdir(parents=True, exist_ok=True)
            ENGINE_PROFILE.write_text(result["profile"])
            log(f"engine profile (cProfile, every thread, waits left out): {ENGINE_PROFILE}")
        cpu = {line: statistics.median(r["cpu_us"] for r in runs)
               for line, runs in result["runs"].items()}  # fmt: skip
        log(f"engine alone (null driver), concurrency {concurrency}: {cpu['off']:.1f} µs CPU "
            f"per job, line off; {cpu['on']:.1f} line on")  # fmt: skip
    return out


# metric name on the command line (bench/run.py ENGINE_METRICS) -> measurement
MEASUREMENTS = {
    "engine": engine,
    "future_backlog": future_backlog,
    "idle_poll": idle_poll,
    "queue_claim": queue_claim,
    "cancel_latency": cancel_latency,
}
