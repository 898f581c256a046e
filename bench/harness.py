"""The run: for each system, its own database, then every selected measurement; then the table.

Partial results are written after each system, so a failure late in a long run loses nothing
measured before it; a system that fails is reported under "errors" and the run goes on.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import (
    db_cost,
    engine_metrics,
    fleet_metrics,
    flow_metrics,
    long_drain,
    metrics,
    observability_metrics,
    pgadmin,
    pool_metrics,
    profiling,
    report,
    scaling_metrics,
    workflow_metrics,
)
from .bootstrap import ROOT
from .systems import PEERS, load
from .systems.base import Options

# What each system is measured on; a system none of the chosen metrics concerns is skipped.
PEER_METRICS = frozenset({"enqueue", "drain", "latency"})
COST_METRICS = frozenset({"db_cost"})  # of the systems in db_cost.SYSTEMS
WORKQUEUE_METRICS = PEER_METRICS | {"backlog", "sustained", "scaling", "profile"}

# Measured on the engine databases (PostgreSQL, then SQLite): issue 8's and the workflows'.
ENGINE_MEASUREMENTS = {
    **engine_metrics.MEASUREMENTS,
    **workflow_metrics.MEASUREMENTS,
    **flow_metrics.MEASUREMENTS,
    **observability_metrics.MEASUREMENTS,
    **pool_metrics.MEASUREMENTS,
    **scaling_metrics.MEASUREMENTS,
    **fleet_metrics.MEASUREMENTS,
    **long_drain.MEASUREMENTS,
}

PACKAGES = ("django-workqueue", "Django", "psycopg", "pgqueuer", "asyncpg", "procrastinate",
            "django-tasks", "django-tasks-db", "py-spy")  # fmt: skip


def _machine() -> dict[str, Any]:
    memory_kib = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo
                       if line.startswith("model name"))  # fmt: skip
    except (OSError, StopIteration):
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(memory_kib / 1024 / 1024, 1),
        "python": platform.python_version(),
        "postgresql": pgadmin.server_version(),
        "postgresql_settings": {
            name: pgadmin.scalar("postgres", f"SHOW {name}")
            for name in ("synchronous_commit", "fsync", "shared_buffers", "max_connections")
        },
        "platform": platform.platform(),
    }


def _git() -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}


def _versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def run(args: argparse.Namespace) -> int:
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {message}", file=sys.stderr, flush=True)

    sizes = metrics.Sizes(args.size_values)
    options = Options(
        poll_interval=args.poll_interval,
        wq_concurrency=args.wq_concurrency,
        sqlite_concurrency=args.sqlite_concurrency,
        pgq_batch=args.pgq_batch,
        procrastinate_concurrency=args.procrastinate_concurrency,
    )
    load_before = os.getloadavg()
    results: dict[str, Any] = {
        "meta": {
            "started_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "command": " ".join(["python bench/run.py", *sys.argv[1:]]),
            "machine": _machine(),
            "versions": _versions(),
            "git": _git(),
            "quick": args.quick,
            "reps": args.reps,
            "sizes": args.size_values,
            "poll_interval": args.poll_interval,
            "load_before": load_before,
        },
        "metrics": {},
        "errors": {},
    }
    if load_before[0] > 0.7:
        log(f"warning: load average {load_before[0]:.2f} before the run; numbers will be noisy")

    def record(system: str, measured: dict[str, Any]) -> None:
        for key, value in measured.items():
            results["metrics"].setdefault(key, {})[system] = value

    def save() -> None:
        results["meta"]["load_after"] = os.getloadavg()
        results["meta"]["duration_seconds"] = round(time.monotonic() - started, 1)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(results, indent=2, default=str))

    chosen = set(args.metrics)
    for name in args.systems:
        concerned = WORKQUEUE_METRICS if name == "workqueue" else PEER_METRICS
        if name in db_cost.SYSTEMS:
            concerned = concerned | COST_METRICS
        if not chosen & concerned:
            continue
        system = load(name, options)
        log(f"{system.label}: creating database {system.database}")
        try:
            system.create()
            if "enqueue" in chosen:
                reference = name == "workqueue"
                record(name, metrics.enqueue(system, sizes, args.reps, log, reference=reference))
            if "drain" in chosen:
                record(name, metrics.drain(system, sizes, args.reps, log))
            if "latency" in chosen:
                record(name, metrics.latency(system, sizes, args.reps, log))
            if "db_cost" in chosen and name in db_cost.SYSTEMS:
                setting = _best_setting(results, system)
                record(name, db_cost.db_cost(system, sizes, args.reps, log, setting))
            if name == "workqueue":
                best = _best_setting(results, system)
                if "backlog" in chosen:
                    record(name, metrics.backlog(system, sizes, args.reps, log))
                if "sustained" in chosen:
                    record(name, metrics.sustained(system, sizes, args.reps, log, best))
                if "scaling" in chosen:
                    scaled = _scaling_setting(best)
                    record(name, metrics.scaling(system, sizes, args.reps, log, scaled))
                if "profile" in chosen:
                    results["profile"] = profiling.profile(
                        system, int(sizes.profile), float(sizes.profile_seconds), best, log
                    )
        except Exception as exc:
            results["errors"][name] = f"{type(exc).__name__}: {exc}"
            log(f"{system.label} FAILED: {exc}\n{traceback.format_exc()}")
        finally:
            if not args.keep_dbs:
                system.drop()
        save()

    if "sqlite" in chosen and "workqueue" in args.systems:
        system = load("workqueue_sqlite", options)
        try:
            record("workqueue", metrics.sqlite(system, sizes, args.reps, log))
        except Exception as exc:
            results["errors"]["workqueue_sqlite"] = f"{type(exc).__name__}: {exc}"
            log(f"{system.label} FAILED: {exc}\n{traceback.format_exc()}")
        finally:
            if not args.keep_dbs:
                system.drop()

    engine = [name for name in args.metrics if name in ENGINE_MEASUREMENTS]
    if engine and "workqueue" in args.systems:
        _measure_engine(engine, options, sizes, args, log, record, results["errors"])
        save()

    results["targets"] = report.targets(results, args.poll_interval)
    save()
    labels = {name: load(name, options).label for name in ("workqueue", *PEERS)}
    peers = [name for name in PEERS if any(name in entry for entry in results["metrics"].values())]
    meta = results["meta"]
    print(f"\ndjango-workqueue benchmark — {meta['started_at']}, {meta['machine']['cpus']} cores, "
          f"{meta['machine']['memory_gib']} GiB, PostgreSQL {meta['machine']['postgresql']}, "
          f"Python {meta['machine']['python']}, reps={args.reps}"
          f"{' (QUICK: smoke sizes, not a measurement)' if args.quick else ''}")  # fmt: skip
    print(f"load average before {load_before[0]:.2f}, after {meta['load_after'][0]:.2f}; "
          f"cells are median (min-max); ratio = django-workqueue / peer\n")  # fmt: skip
    print(report.table(results, "workqueue", peers, labels))
    args.output.with_suffix(".md").write_text(report.markdown(results, "workqueue", peers, labels))
    if "profile" in results:
        print("\n" + profiling.render(results["profile"]))
    quick_note = " (quick run: at these sizes the verdicts mean nothing)" if args.quick else ""
    print(f"\nTargets of issues 3, 8, 15, 16 and 17 measured in this run{quick_note}:")
    print(report.targets_table(results["targets"]))
    for name, error in results["errors"].items():
        print(f"\nERROR in {name}: {error.splitlines()[0]}")
    print(f"\nJSON: {args.output} (Markdown table: {args.output.with_suffix('.md')})")
    return 1 if results["errors"] else 0


def _best_setting(results: dict[str, Any], system: Any) -> dict[str, Any]:
    entry = results["metrics"].get("drain", {}).get(system.name)
    return entry["setting"] if entry else system.drain_settings()[0]


def _scaling_setting(best: dict[str, Any]) -> dict[str, Any]:
    """The best setting, with concurrency capped so 4 processes fit in max_connections.

    Each runworker process holds concurrency + 2 connections; four of them must stay within
    80% of the server's max_connections (other clients share the server).
    """
    budget = int(pgadmin.scalar("postgres", "SHOW max_connections")) * 8 // 10
    cap = max(1, budget // 4 - 2)
    return {**best, "concurrency": min(int(best.get("concurrency", 1)), cap)}


def _measure_engine(
    engine: list[str],
    options: Options,
    sizes: metrics.Sizes,
    args: argparse.Namespace,
    log: metrics.Log,
    record: Callable[[str, dict[str, Any]], None],
    errors: dict[str, str],
) -> None:
    """The engine and workflow measurements, on PostgreSQL (``bench_wq_engine``) and then on
    SQLite.

    Each measurement is guarded on its own: one that fails is reported under "errors" and the
    others still run.
    """
    for name in ("wq_engine", "wq_engine_sqlite"):
        system = load(name, options)
        log(f"{system.label}: engine measurements ({', '.join(engine)})")
        try:
            try:
                system.create()
            except Exception as exc:
                errors[name] = f"{type(exc).__name__}: {exc}"
                log(f"{system.label} FAILED: {exc}\n{traceback.format_exc()}")
                continue
            for metric in engine:
                try:
                    measure = ENGINE_MEASUREMENTS[metric]
                    record("workqueue", measure(system, sizes, args.reps, log))
                except Exception as exc:
                    errors[f"{name}:{metric}"] = f"{type(exc).__name__}: {exc}"
                    log(f"{system.label} {metric} FAILED: {exc}\n{traceback.format_exc()}")
        finally:
            if not args.keep_dbs:
                system.drop()
