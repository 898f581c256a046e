"""The measurements. Each returns ``{metric: summary}`` for one system (see ``stats.summary``).

Every repetition starts from an empty job table (``System.reset``), and every fill is followed
by VACUUM ANALYZE (``System.after_fill``), for every system alike.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from .stats import percentile, summary
from .systems.base import LOG_DIR, System

Log = Callable[[str], None]


class Sizes:
    def __init__(self, values: dict[str, float]) -> None:
        self.__dict__.update(values)

    def __getattr__(self, name: str) -> Any:  # for type checkers; values come from __dict__
        raise AttributeError(name)


def _repeat(reps: int, one: Callable[[], float]) -> list[float]:
    return [one() for _ in range(reps)]


# The session setting of the fast-commit pair: libpq (and so psycopg, under Django and bare)
# reads PGOPTIONS when it connects, so the client and the reference run alike.
FAST_COMMIT = {"PGOPTIONS": "-c synchronous_commit=off"}


def enqueue(system: System, sizes: Sizes, reps: int, log: Log, *, reference: bool = False) -> dict:
    """Single and bulk enqueue; with ``reference``, the raw INSERT too, interleaved with single.

    The raw INSERT and the single enqueue are both bound by one commit (one WAL flush) per job,
    so each repetition measures them back to back: a slow spell of the disk hits both alike.
    With ``reference`` the pair is measured twice: with the server's commit (a WAL flush per
    transaction) and with ``synchronous_commit=off`` for the sessions of both, so that a slow
    disk cannot hide what the statement itself costs.
    """
    out: dict[str, Any] = {}
    single, raw, fast_single, fast_raw = [], [], [], []
    n = int(sizes.enqueue)
    for _ in range(reps):
        system.reset()
        single.append(system.client("enqueue_single", n=n))
        if reference:
            system.reset()
            raw.append(system.client("raw_insert", n=n))
            system.reset()
            fast_single.append(system.client("enqueue_single", env=FAST_COMMIT, n=n))
            system.reset()
            fast_raw.append(system.client("raw_insert", env=FAST_COMMIT, n=n))
    out["enqueue_single"] = summary(single, n=n, api=system.single_api)
    log(f"{system.name}: enqueue single {out['enqueue_single']['median']:,.0f} jobs/s")
    if reference:
        out["raw_insert"] = summary(raw, n=n)
        out["enqueue_single_vs_raw"] = summary([s / r for s, r in zip(single, raw, strict=True)])
        log(f"{system.name}: raw psycopg INSERT {out['raw_insert']['median']:,.0f} rows/s")
        out["enqueue_single_fast"] = summary(fast_single, n=n, api=system.single_api,
                                             session=FAST_COMMIT["PGOPTIONS"])  # fmt: skip
        out["raw_insert_fast"] = summary(fast_raw, n=n, session=FAST_COMMIT["PGOPTIONS"])
        out["enqueue_single_vs_raw_fast"] = summary(
            [s / r for s, r in zip(fast_single, fast_raw, strict=True)]
        )
        log(
            f"{system.name}: synchronous_commit=off: enqueue single "
            f"{out['enqueue_single_fast']['median']:,.0f} jobs/s, raw INSERT "
            f"{out['raw_insert_fast']['median']:,.0f} rows/s"
        )
    if system.has_bulk:

        def bulk() -> float:
            system.reset()
            return system.client("enqueue_bulk", n=int(sizes.bulk), batch=int(sizes.batch))

        out["enqueue_bulk"] = summary(
            _repeat(reps, bulk), n=int(sizes.bulk), batch=int(sizes.batch), api=system.bulk_api
        )
        log(f"{system.name}: enqueue bulk {out['enqueue_bulk']['median']:,.0f} jobs/s")
    return out


def _drain_once(system: System, setting: dict[str, Any], jobs: int, processes: int = 1) -> float:
    system.reset()
    system.client("fill", n=jobs)
    system.after_fill()
    elapsed = system.run_workers(setting, processes=processes)
    left = system.unfinished()
    if left:
        raise RuntimeError(f"{system.name} {setting}: {left} of {jobs} jobs not succeeded")
    return jobs / elapsed


def drain(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    jobs = int(sizes.drain)
    per_setting = {}
    for setting in system.drain_settings():
        samples = _repeat(reps, lambda setting=setting: _drain_once(system, setting, jobs))
        per_setting[system.describe(setting)] = {"setting": setting, **summary(samples)}
        log(f"{system.name}: drain [{system.describe(setting)}] "
            f"{statistics.median(samples):,.0f} jobs/s {[round(s) for s in samples]}")  # fmt: skip
    best = max(per_setting, key=lambda label: per_setting[label]["median"])
    return {
        "drain": {
            **per_setting[best],
            "best": best,
            "per_setting": per_setting,
            "n": jobs,
        }
    }


def latency(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    out: dict[str, Any] = {}
    stamp_file = LOG_DIR / f"stamps-{system.name}.txt"
    for variant, setting, env in system.latency_variants():
        p50s, p95s, everything = [], [], []
        for _ in range(reps):
            system.reset()
            stamp_file.parent.mkdir(parents=True, exist_ok=True)
            stamp_file.unlink(missing_ok=True)
            worker = system.start_worker(
                setting, burst=False, tag=f"latency{variant}",
                BENCH_STAMP_FILE=str(stamp_file), **env,
            )  # fmt: skip
            try:
                values = system.client(
                    "latency", n=int(sizes.latency), gap=float(sizes.gap),
                    stamp_file=str(stamp_file),
                )  # fmt: skip
            finally:
                worker.stop()
            p50s.append(percentile(values, 50))
            p95s.append(percentile(values, 95))
            everything.extend(values)
        prefix = f"latency_{variant}_" if variant else "latency_"
        detail = {"n": int(sizes.latency), "setting": system.describe(setting), **env}
        out[prefix + "p50"] = summary(p50s, **detail)
        out[prefix + "p95"] = summary(p95s, **detail)
        out[prefix + "p99_all"] = percentile(everything, 99)
        p50, p95 = statistics.median(p50s), statistics.median(p95s)
        log(
            f"{system.name}: pickup latency {variant or 'default'}: "
            f"p50 {p50:.1f} ms, p95 {p95:.1f} ms"
        )
    return out


def backlog(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    small, large = int(sizes.backlog_small), int(sizes.backlog_large)
    system.reset()
    result = system.client(
        "claim_latency", sizes=[small, large], batch=int(sizes.claim_batch),
        claims=int(sizes.claims), reps=reps,
    )  # fmt: skip
    detail = {"batch": int(sizes.claim_batch), "claims_per_rep": int(sizes.claims)}
    out = {
        "claim_small": summary(result[str(small)], ready=small, **detail),
        "claim_large": summary(result[str(large)], ready=large, **detail),
    }
    log(f"{system.name}: claim of {int(sizes.claim_batch)}: {out['claim_small']['median']:.2f} ms "
        f"at {small:,} ready, {out['claim_large']['median']:.2f} ms at {large:,}")  # fmt: skip
    return out


def sustained(system: System, sizes: Sizes, reps: int, log: Log, setting: dict[str, Any]) -> dict:
    jobs, size = int(sizes.sustained), int(sizes.slice)
    firsts, lasts, ratios, all_rates = [], [], [], []
    for _ in range(reps):
        _drain_once(system, setting, jobs)
        rates = system.client("slices", size=size)["rates"]
        firsts.append(rates[0])
        lasts.append(rates[-1])
        ratios.append(rates[-1] / rates[0])
        all_rates.append(rates)
        log(f"{system.name}: sustained slices of {size:,}: {[round(r) for r in rates]}")
    detail = {"n": jobs, "slice": size, "setting": system.describe(setting)}
    return {
        "sustained_first": summary(firsts, **detail),
        "sustained_last": summary(lasts, **detail),
        "sustained_ratio": summary(ratios, **detail, slices=all_rates),
    }


def scaling(system: System, sizes: Sizes, reps: int, log: Log, setting: dict[str, Any]) -> dict:
    jobs = int(sizes.scaling)
    out = {}
    for processes in (1, 2, 4):
        samples = _repeat(reps, lambda p=processes: _drain_once(system, setting, jobs, p))
        out[f"scaling_{processes}"] = summary(samples, n=jobs, setting=system.describe(setting))
        log(f"{system.name}: {processes} process(es) {statistics.median(samples):,.0f} jobs/s")
    return out


def sqlite(system: System, sizes: Sizes, reps: int, log: Log) -> dict[str, Any]:
    system.create()
    scaled = Sizes({**sizes.__dict__, "enqueue": sizes.sqlite_enqueue, "bulk": sizes.sqlite_bulk,
                    "drain": sizes.sqlite_drain})  # fmt: skip
    out = {f"sqlite_{key}": value for key, value in enqueue(system, scaled, reps, log).items()}
    out["sqlite_drain"] = drain(system, scaled, reps, log)["drain"]
    return out
