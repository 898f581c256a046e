"""The engine's per-job budget (issue 32 item 3): a drain through a null driver, in-process.

``python bench/null_engine.py [--jobs 20000] [--concurrency 8] [--repeat 3] [--profile]``, or
``python bench/run.py --metrics engine`` (the harness runs it through ``client_engine_budget``).
``python bench/null_engine.py --instructions [--jobs 2000,10000]`` counts instructions per job
instead (``valgrind --tool=callgrind``): see ``instructions``.

A real ``Worker(burst=True)`` drains ``jobs`` no-op jobs, but its driver answers the hot path
from memory: ``claim`` hands out jobs from a list, ``record_many`` fences each outcome against
the leases it handed out and says what a write would have said (written, ended, timings),
``count_stats``, ``renew_leases``, ``write_progress`` and ``notify`` touch nothing. Everything
else of the worker runs as it does in ``runworker``: dispatch to a slot, the job's context,
middlewares, signals, the outcome, the stats' counters, progress, the per-job log line, the
transaction around the pass's writes (an empty one on a local SQLite file: its BEGIN and
COMMIT are in the figure) and the per-pass bookkeeping (registration, heartbeat, maintenance:
those few ORM statements per pass go to the real database underneath).

So the figure is the engine's own cost per job, apart from the database's: wall time of the
drain / jobs, and the process's CPU time / jobs (on a busy machine the CPU figure is the steadier
one). The default configuration is measured (``WORKQUEUE`` as the bench's settings with
``REALTIME`` off, no signal receivers, no middlewares, the per-job log line off: the
``django_workqueue.jobs`` logger at WARNING) and again with the line on (INFO, runworker's
format, to a null stream). ``--profile`` adds a cProfile of the default run, every thread's
profile merged (the slots' and the control thread's).
"""

from __future__ import annotations

import collections
import cProfile
import io
import logging
import os
import pstats
import resource
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

PAYLOAD = "[[1], {}]"
TASK = "bench.noop"


def null_driver(
    base: Any, jobs: int, queue: str = "default", *, task: str = TASK, payload: str = PAYLOAD
) -> Any:
    """A driver of ``base``'s class whose hot path is answered from memory (``jobs`` jobs of
    ``task``, no-ops unless told)."""
    from django_workqueue.db import ClaimedJob, Ended, Recorded, Timing
    from django_workqueue.outcomes import OutcomeKind

    # The no-op jobs succeed; a retry's or a discard's status would be the row's to decide.
    ending = {OutcomeKind.SUCCEEDED: "succeeded", OutcomeKind.CANCELLED: "cancelled"}

    class NullDriver(type(base)):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(base.alias)
            self.ready: collections.deque[int] = collections.deque(range(1, jobs + 1))
            self.leased: dict[int, int] = {}
            self.finished = 0
            self.claims = 0
            self.writes = 0
            self.began_writes = 0

        def claim(  # type: ignore[override]
            self,
            queues: Sequence[str],
            limit: int,
            owner: str,
            now: Any = None,
            *,
            ahead: bool = False,
        ) -> list[Any]:
            self.claims += 1
            taken = []
            while self.ready and len(taken) < limit:
                job_id = self.ready.popleft()
                self.leased[job_id] = 1
                taken.append(ClaimedJob(job_id, task, queue, 0, 1, 3, 0, 300, None, False,
                                        payload))  # fmt: skip
            return taken

        def began(self, owner: str, leases: Sequence[tuple[int, int]]) -> set[int]:
            self.began_writes += 1
            return {job_id for job_id, attempt in leases if self.leased.get(job_id) == attempt}

        def batch_backlog(self, groups: Sequence[Any], now: Any = None) -> dict[Any, Any]:
            return {}  # the bench's settings register the test project's batch tasks

        def flow_keys(
            self, queues: Sequence[str], after: str, limit: int, *, count: int = 0
        ) -> list[Any]:
            return []

        def record_many(self, owner: str, outcomes: Sequence[Any], *, skip_locked: bool = False):  # type: ignore[no-untyped-def]
            self.writes += 1
            written, ended, timings = set(), [], []
            for outcome in outcomes:
                if self.leased.get(outcome.job_id) != outcome.attempt:
                    continue
                del self.leased[outcome.job_id]
                outcome.encoded()  # what the real write sends (the slot encoded it already)
                written.add((outcome.job_id, outcome.attempt))
                status = ending.get(outcome.kind)
                if status is not None:
                    ended.append(Ended(outcome.job_id, status, None))
                    self.finished += 1
                timings.append(Timing(outcome.job_id, outcome.attempt, outcome.queue or queue,
                                      outcome.task_name or task, status or "scheduled",
                                      outcome.duration, 0.001))  # fmt: skip
            return Recorded(written=written, busy=set(), ended=ended, timings=timings)

        def count_stats(self, counters: Sequence[Any]) -> None:
            pass

        def renew_leases(self, owner: str, leases: Sequence[tuple[int, int]]):  # type: ignore[no-untyped-def]
            held = {job_id: False for job_id, attempt in leases
                    if self.leased.get(job_id) == attempt}  # fmt: skip
            return held, set()

        def write_progress(self, owner: str, reports: Sequence[Any], *, skip_locked: bool = False):  # type: ignore[no-untyped-def]
            return Recorded(written={(r.job_id, r.attempt) for r in reports}, busy=set())

        def lease_states(self, ids: Iterable[int]) -> dict[int, tuple[str, str | None]]:
            return {job_id: ("running", None) for job_id in ids if job_id in self.leased}

        def notify(self, queues: Iterable[str]) -> None:
            pass

    return NullDriver()


def _job_line(on: bool) -> None:
    """The per-job line on (INFO, runworker's format, to a null stream) or off (WARNING)."""
    from django_workqueue.attempt.ending import job_logger

    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package = logging.getLogger("django_workqueue")
    package.handlers = [handler]
    package.propagate = False
    package.setLevel(logging.WARNING)
    job_logger.setLevel(logging.INFO if on else logging.WARNING)


_WAITS = ("<method 'get' of '_queue.SimpleQueue' objects>",
          "<method 'acquire' of '_thread.lock' objects>")  # fmt: skip


class _ThreadProfiles:
    """cProfile in every thread started while active (a Profile per thread, merged after)."""

    def __init__(self) -> None:
        self.profiles: list[cProfile.Profile] = []

    def _start(self, *args: Any) -> None:
        profile = cProfile.Profile()
        self.profiles.append(profile)
        profile.enable()  # replaces this hook for the thread

    def __enter__(self) -> _ThreadProfiles:
        threading.setprofile(self._start)
        main = cProfile.Profile()
        self.profiles.append(main)
        main.enable()
        return self

    def __exit__(self, *exc: object) -> None:
        threading.setprofile(None)  # type: ignore[arg-type]
        self.profiles[0].disable()

    def summary(self, top: int = 30) -> str:
        """The functions that spend the most time of their own, threads' waits left out (a
        slot blocked on its inbox, the control thread asleep on its Event: that is idling)."""
        stats = pstats.Stats(self.profiles[0], stream=io.StringIO())
        for profile in self.profiles[1:]:
            stats.add(profile)
        table = stats.stats  # type: ignore[attr-defined]
        for key in [key for key in table if key[2] in _WAITS]:
            del table[key]
        stats.sort_stats("tottime").print_stats(top)
        return stats.stream.getvalue()  # type: ignore[attr-defined]


def _switches() -> int:
    """The process's context switches so far, voluntary (a thread that waits: a slot for its
    inbox, the control thread for its wake-up, any thread for the interpreter lock) and not."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nvcsw + usage.ru_nivcsw


def drain(
    jobs: int, concurrency: int, *, line: bool, profile: bool = False, io_ms: float = 0
) -> dict[str, Any]:
    """One in-process drain of ``jobs`` no-ops (or jobs that sleep ``io_ms``, ``bench.io``)
    through the null driver; µs per job."""
    from django_workqueue import db
    from django_workqueue.conf import workqueue_settings
    from django_workqueue.worker.runner import Worker

    alias = workqueue_settings.DATABASE
    real = db.driver_for(alias)
    if io_ms:
        driver = null_driver(real, jobs, task="bench.io", payload=f"[[{io_ms / 1000}], {{}}]")
    else:
        driver = null_driver(real, jobs)
    _job_line(line)
    db._drivers[alias] = driver
    profiles = _ThreadProfiles() if profile else None
    try:
        worker = Worker(queues=["default"], concurrency=concurrency, burst=True)
        switches = _switches()
        cpu, wall = time.process_time(), time.perf_counter()
        if profiles is not None:
            with profiles:
                worker.run()
        else:
            worker.run()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        switches = _switches() - switches
    finally:
        db._drivers[alias] = real
    if driver.finished != jobs:
        raise RuntimeError(f"null drain: {driver.finished} of {jobs} jobs finished")
    out = {"wall_us": wall / jobs * 1e6, "cpu_us": cpu / jobs * 1e6,
           "claims": driver.claims, "writes": driver.writes,
           "jobs_per_pass": jobs / max(driver.writes, 1),
           "switches_per_job": switches / jobs, "began_writes": driver.began_writes}  # fmt: skip
    if profiles is not None:
        out["profile"] = profiles.summary()
    return out


def budget(
    jobs: int, concurrency: int, repeat: int, profile: bool, io_ms: float = 0
) -> dict[str, Any]:
    """``repeat`` drains with the line off and on, interleaved; the best of each (µs/job)."""
    drain(min(jobs, 500), concurrency, line=False)  # warm up: imports, first statements
    runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
    for _ in range(repeat):
        for key in runs:
            runs[key].append(drain(jobs, concurrency, line=key == "on", io_ms=io_ms))
    out: dict[str, Any] = {"jobs": jobs, "concurrency": concurrency, "runs": runs}
    if profile:
        out["profile"] = drain(jobs, concurrency, line=False, profile=True)["profile"]
    return out


def instructions(small: int, large: int, concurrency: int) -> float:
    """Instructions per job of the engine alone: two drains (line off), of ``small`` and of
    ``large`` jobs, each in a process of its own run by ``valgrind --tool=callgrind``; their
    difference over ``large - small`` jobs, so that what a process does once (Django's setup,
    the migration check, the warm-up drain) cancels out. Unlike the times, which move by
    ±20 % on a loaded two-core machine, the count repeats to within about 1 % (the slots'
    and the control thread's interleaving still varies a little): the measure for an A/B of
    a change to the engine (docs/explanation/performance.md)."""
    import re
    import subprocess
    import tempfile

    if not 0 < small < large:
        raise ValueError(f"--jobs SMALL,LARGE with 0 < SMALL < LARGE, got {small},{large}")
    # Migrated first, here: a run that applies the migrations does more than one that checks.
    migrate = [sys.executable, __file__, "--jobs", "1", "--concurrency", "1", "--once"]
    subprocess.run(migrate, check=True, env=os.environ.copy())
    counts = []
    with tempfile.TemporaryDirectory() as directory:
        for jobs in (small, large):
            out = Path(directory) / f"cg.{jobs}"
            command = [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable,
                __file__, "--jobs", str(jobs), "--concurrency", str(concurrency), "--once",
            ]  # fmt: skip
            done = subprocess.run(command, capture_output=True, text=True, env=os.environ.copy())
            if done.returncode:
                raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
            found = re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.MULTILINE)
            if found is None:
                raise RuntimeError(f"no callgrind totals in {out}")
            counts.append(int(found.group(1)))
    return (counts[1] - counts[0]) / (large - small)


def main() -> None:
    import argparse

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    os.environ["WORKQUEUE_REALTIME"] = "off"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", default=None, help="jobs per drain (default 20000)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--io-ms", type=float, default=0,
        help="jobs that sleep this long (bench.io) instead of no-ops: the wake-ups and passes "
        "per job of jobs that take time",
    )  # fmt: skip
    parser.add_argument(
        "--claim-ahead", type=float, default=None,
        help='WORKQUEUE["CLAIM_AHEAD"] for the drains (default: the settings\' own, 0)',
    )  # fmt: skip
    parser.add_argument(
        "--instructions", action="store_true",
        help="instructions per job under callgrind instead of times (--jobs SMALL,LARGE, "
        "default 2000,10000)",
    )  # fmt: skip
    parser.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.instructions:
        pair = (options.jobs or "2000,10000").split(",")
        if len(pair) != 2 or not all(n.strip().isdigit() for n in pair):
            parser.error(f"--instructions takes --jobs SMALL,LARGE (e.g. 2000,10000), got "
                         f"{options.jobs!r}")  # fmt: skip
        small, large = (int(n) for n in pair)
        if not 0 < small < large:
            parser.error(f"--jobs SMALL,LARGE: 0 < SMALL < LARGE, got {small},{large}")
        per_job = instructions(small, large, options.concurrency)
        print(f"engine alone, concurrency {options.concurrency}, line off: "
              f"{per_job:,.0f} instructions/job")  # fmt: skip
        return
    options.jobs = int(options.jobs or 20_000)
    import django

    django.setup()
    if options.claim_ahead is not None:
        from django.conf import settings

        from django_workqueue.conf import workqueue_settings

        settings.WORKQUEUE = {**settings.WORKQUEUE, "CLAIM_AHEAD": options.claim_ahead}
        workqueue_settings.reload()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if options.once:  # one drain, line off, after a warm-up: a run of ``instructions``
        drain(min(options.jobs, 200), options.concurrency, line=False)
        drain(options.jobs, options.concurrency, line=False)
        return
    result = budget(
        options.jobs, options.concurrency, options.repeat, options.profile, options.io_ms
    )
    for key, runs in result["runs"].items():
        best = min(runs, key=lambda run: run["cpu_us"])
        print(f"line {key}: {best['wall_us']:.1f} µs/job wall, {best['cpu_us']:.1f} µs/job CPU "
              f"({best['jobs_per_pass']:.1f} jobs per pass, {best['switches_per_job']:.2f} "
              f"context switches per job, {best['began_writes']} began writes; best of "
              f"{len(runs)})")  # fmt: skip
    if options.profile:
        print(result["profile"])


if __name__ == "__main__":
    main()
