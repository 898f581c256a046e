#!/usr/bin/env python
"""Benchmark django-workqueue side by side with PgQueuer, Procrastinate and django-tasks-db.

    python bench/run.py                 # everything, full sizes (about an hour on 2 cores)
    python bench/run.py --quick         # smoke run, tiny sizes, one repetition (~75 s)
    python bench/run.py --systems workqueue,pgqueuer --metrics enqueue,drain
    python bench/run.py --sizes drain=50000,latency=500 --reps 5
    python bench/run.py --systems workqueue --metrics profile
    python bench/run.py --metrics future_backlog,idle_poll,queue_claim,cancel_latency  # issue 8
    python bench/run.py --metrics workflow_fanin,release_cost  # workflows
    python bench/run.py --metrics flow_claim  # what flow control costs a claim
    python bench/run.py --metrics skip_queue_latency  # enqueue to start, with/without skip_queue
    python bench/run.py --metrics signals_cost  # a drain with and without signal receivers
    python bench/run.py --metrics engine  # µs per job of the engine alone (null driver)
    python bench/run.py --systems workqueue,pgqueuer --metrics drain,db_cost  # WAL, statements
    python bench/run.py --metrics pools  # thread pool against process pool (issue 15)
    python bench/run.py --metrics scaling_curve  # 1-8 processes, PostgreSQL vs Python CPU
    python bench/run.py --metrics idle_fleet  # what 50 idle workers cost PostgreSQL (issue 17)
    python bench/run.py --metrics long_drain --reps 1  # 1,000,000 jobs with retention on (issue 32)

The first run creates bench/.venv and installs the peers (pinned in bench/requirements.txt)
and this project (editable) into it; later runs reuse it. Each system gets its own database
``bench_<system>`` on the PostgreSQL server at BENCH_PG_URL (default
postgresql://postgres@127.0.0.1:5432), dropped at the end; the engine measurements of issue 8
use ``bench_wq_engine`` and a SQLite file. BENCH_DB_PREFIX replaces ``bench_`` (two runs on
one server need two prefixes). The table goes to stdout, progress to stderr,
everything to bench/results/latest.json. See docs/explanation/performance.md.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
if sys.path and Path(sys.path[0] or ".").resolve() == BENCH:
    sys.path.pop(0)  # keep bench/'s module names from shadowing top-level ones
sys.path.insert(0, str(BENCH.parent))

from bench import bootstrap  # noqa: E402

ALL_SYSTEMS = ("workqueue", "pgqueuer", "procrastinate", "django_tasks_db")
# The engine measurements of issue 8 (bench/engine_metrics.py) and the workflows'
# (bench/workflow_metrics.py), on PostgreSQL and SQLite.
ENGINE_METRICS = ("future_backlog", "idle_poll", "queue_claim", "cancel_latency",
                  "workflow_fanin", "release_cost", "flow_claim",
                  "skip_queue_latency", "signals_cost", "pools", "scaling_curve",
                  "idle_fleet", "engine", "long_drain")  # fmt: skip
ALL_METRICS = ("enqueue", "drain", "latency", "db_cost", "backlog", "sustained", "scaling",
               "sqlite", *ENGINE_METRICS)  # fmt: skip
OPTIONAL_METRICS = ("profile",)
# Left out of --quick unless named: at smoke sizes they still take tens of seconds (the pools'
# eight drains start a worker and its children each; the idle fleet waits out its windows).
NOT_QUICK = ("pools", "idle_fleet")

SIZES = {
    "enqueue": 5_000,  # jobs per repetition of single enqueue (and of the raw INSERT)
    "bulk": 100_000,  # jobs per repetition of bulk enqueue ...
    "batch": 1_000,  # ... in calls of this many jobs
    "drain": 20_000,  # queued no-op jobs drained by one worker process
    "latency": 200,  # jobs enqueued one at a time to an idle worker
    "gap": 0.02,  # seconds between those enqueues (jittered ±50%)
    "backlog_small": 10_000,  # ready jobs behind the claim ...
    "backlog_large": 1_000_000,  # ... and the large backlog
    "claim_batch": 10,  # jobs per timed claim
    "claims": 50,  # timed claims per repetition
    "sustained": 100_000,  # jobs of the long drain ...
    "slice": 10_000,  # ... reported in slices of this many
    "scaling": 20_000,  # jobs drained by 1, 2 and 4 processes
    "sqlite_enqueue": 2_000,
    "sqlite_bulk": 20_000,
    "sqlite_drain": 10_000,
    "profile": 250_000,  # jobs queued for the profiled drain (long enough for both recordings)...
    "profile_seconds": 10,  # ... sampled this long
    "future_due": 10_000,  # due jobs drained alone, then beside ...
    "future_waiting": 200_000,  # ... this many jobs scheduled an hour ahead
    "idle_waiting": 1_000_000,  # jobs scheduled an hour ahead behind the idle polls ...
    "idle_claims": 200,  # ... timed per repetition
    "queue_ready": 200_000,  # ready jobs, half in each of two queues ...
    "queue_claims": 200,  # ... timed claims from one queue and from both, per repetition
    "cancels": 50,  # cancellations of running jobs per repetition ...
    "cancel_jitter": 1.0,  # ... each after a random wait of up to this many seconds
    "fanin": 1_000,  # members of the fan-out whose fan-in callback's start is timed
    "release_batch": 100,  # completions per batch whose statements are counted
    "flow_jobs": 20_000,  # ready jobs per case of the flow claim measurement ...
    "flow_keys": 2_000,  # ... spread over this many keys (per-key limits, tenants) ...
    "flow_claims": 200,  # ... and timed claims per case
    "skip_queue": 200,  # jobs enqueued with skip_queue, and as many without, one at a time
    "signals_jobs": 5_000,  # no-op jobs per drain, without and with signal receivers
    "pools_cpu": 400,  # CPU-bound jobs per drain, thread pool against process pool ...
    "pools_cpu_ms": 20,  # ... each about this many ms of pure-Python work (calibrated) ...
    "pools_noop": 20_000,  # ... and no-op jobs per drain ...
    "pools_concurrency": 16,  # ... at concurrencies up to this (CPU: 2, 4; no-op: 4, 8, 16)
    "curve_noop": 20_000,  # no-op jobs per drain of the scaling curve ...
    "curve_io": 10_000,  # ... 5 ms I/O-bound jobs per drain ...
    "curve_processes": 8,  # ... by 1, 2, 4 and 8 processes (below 8: 1 and 2 only)
    "idle_workers": 50,  # idle runworker processes whose database cost is counted ...
    "idle_settle": 90,  # ... once all listen and a poll cycle (60-90 s) has passed ...
    "idle_seconds": 120,  # ... over this many seconds (two cycles: start-up effects averaged out)
    "engine_jobs": 20_000,  # no-op jobs per in-process drain through the null driver
    "long_drain": 1_000_000,  # jobs of the long drain under churn (bench/long_drain.py) ...
    "long_slice": 100_000,  # ... its rate reported per slice of this many ...
    "long_rate": 1_500,  # ... fed at this many jobs/s (0: as fast as drained) ...
    "long_backlog": 20_000,  # ... never more than this many ready ...
    "long_retention": 30,  # ... and retention keeping succeeded jobs this many seconds
}
QUICK_SIZES = {
    **SIZES, "enqueue": 100, "bulk": 1_000, "drain": 300, "latency": 10, "backlog_small": 1_000,
    "backlog_large": 5_000, "claims": 5, "sustained": 2_000, "slice": 500, "scaling": 300,
    "sqlite_enqueue": 100, "sqlite_bulk": 1_000, "sqlite_drain": 300, "profile": 5_000,
    "profile_seconds": 2, "future_due": 200, "future_waiting": 2_000, "idle_waiting": 5_000,
    "idle_claims": 20, "queue_ready": 5_000, "queue_claims": 20, "cancels": 2,
    "cancel_jitter": 0.2, "fanin": 50, "release_batch": 10, "flow_jobs": 400,
    "flow_keys": 50, "flow_claims": 20, "skip_queue": 10, "signals_jobs": 50,
    "pools_cpu": 10, "pools_noop": 100, "pools_concurrency": 2,
    "curve_noop": 100, "curve_io": 50, "curve_processes": 2,
    "idle_workers": 3, "idle_settle": 2, "idle_seconds": 5, "engine_jobs": 300,
    "long_drain": 2_000, "long_slice": 500, "long_backlog": 500, "long_retention": 0,
    "long_rate": 0,
}  # fmt: skip


def _ints(value: str) -> list[int]:
    return [int(part) for part in value.split(",") if part.strip()]


def _names(choices: tuple[str, ...]):  # type: ignore[no-untyped-def]
    def parse(value: str) -> list[str]:
        names = [part.strip() for part in value.split(",") if part.strip()]
        unknown = sorted(set(names) - set(choices))
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(unknown)}; choose from {', '.join(choices)}"
            )
        return names

    return parse


def _sizes(value: str) -> dict[str, float]:
    sizes = {}
    for part in value.split(","):
        key, _, number = part.partition("=")
        if key.strip() not in SIZES or not number:
            raise argparse.ArgumentTypeError(
                f"{part!r}: give key=value with a key among {', '.join(SIZES)}"
            )
        sizes[key.strip()] = float(number)
    return sizes


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="Tiny sizes, one repetition, one setting per system (smoke test).",
    )
    parser.add_argument(
        "--systems",
        type=_names(ALL_SYSTEMS),
        default=list(ALL_SYSTEMS),
        help=f"Comma-separated, from {','.join(ALL_SYSTEMS)} (default: all).",
    )
    parser.add_argument(
        "--metrics",
        type=_names(ALL_METRICS + OPTIONAL_METRICS),
        help=f"Comma-separated, from {','.join(ALL_METRICS + OPTIONAL_METRICS)} "
        f"(default: all but profile; --quick also leaves out {','.join(NOT_QUICK)}).",
    )
    parser.add_argument(
        "--sizes",
        type=_sizes,
        default={},
        help=f"Override sizes, e.g. drain=50000,latency=500 (keys: {', '.join(SIZES)}).",
    )
    parser.add_argument("--reps", type=int, help="Repetitions per metric (default 3; quick 1).")
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.5,
        help="Idle poll interval in seconds for django-workqueue "
        "(WORKQUEUE_POLL_INTERVAL) and django-tasks-db (--interval).",
    )
    parser.add_argument(
        "--wq-concurrency",
        type=_ints,
        help="runworker --concurrency values to try (default 16,32,64,128; the largest is "
        "also run with -v 0, its per-job line off).",
    )
    parser.add_argument(
        "--sqlite-concurrency",
        type=_ints,
        help="runworker --concurrency values on SQLite (default 1,4,16).",
    )
    parser.add_argument(
        "--pgq-batch", type=_ints, help="PgQueuer batch_size values to try (default 10,100,500)."
    )
    parser.add_argument(
        "--procrastinate-concurrency",
        type=_ints,
        help="Procrastinate worker concurrency values to try (default 10,50).",
    )
    parser.add_argument("--keep-dbs", action="store_true", help="Do not drop the databases.")
    parser.add_argument("--output", type=Path, default=BENCH / "results" / "latest.json")
    parser.add_argument("--reinstall", action="store_true", help="Reinstall bench/.venv first.")
    parser.add_argument("--setup-only", action="store_true", help="Make bench/.venv and stop.")
    args = parser.parse_args(argv)  # fmt: skip
    quick = args.quick
    args.metrics = args.metrics or [m for m in ALL_METRICS if not (quick and m in NOT_QUICK)]
    args.size_values = {**(QUICK_SIZES if quick else SIZES), **args.sizes}
    args.reps = args.reps or (1 if quick else 3)
    args.wq_concurrency = args.wq_concurrency or ([32] if quick else [16, 32, 64, 128])
    args.sqlite_concurrency = args.sqlite_concurrency or ([4] if quick else [1, 4, 16])
    args.pgq_batch = args.pgq_batch or ([10] if quick else [10, 100, 500])
    args.procrastinate_concurrency = args.procrastinate_concurrency or ([10] if quick else [10, 50])
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    if not bootstrap.inside_venv():
        bootstrap.ensure_venv(force=args.reinstall)
        if args.setup_only:
            return 0
        bootstrap.reexec_in_venv(argv)
    if args.setup_only:
        return 0
    from bench.harness import run

    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
