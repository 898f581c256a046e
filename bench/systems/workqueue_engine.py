"""django-workqueue for the engine measurements (claims next to future jobs, idle polls, claims
across queues, cancellation latency), on PostgreSQL and on SQLite, each in its own database.

The PostgreSQL database is ``bench_wq_engine`` and the SQLite file ``wq_engine.sqlite3``, apart
from the comparison's, so these measurements can run on their own at any time. Jobs are made
through the public API (``task.using(...).enqueue_many``); the million future jobs of the idle
poll are copies of one such job (``copy_job``). Claims are timed through
``django_workqueue.db.driver_for(alias).claim(queues, limit, owner)``, cancellations through
``django_workqueue.operations.cancel_job``: whichever engine is installed is measured.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import ModuleType
from typing import Any

from .workqueue import (  # noqa: F401 (client_* actions are found by name)
    SQLITE_DIR,
    Workqueue,
    WorkqueueSQLite,
    client_fill,
    client_unfinished,
    copy_job,
)
from .workqueue_churn import client_feed, client_purge  # noqa: F401 (found by name)
from .workqueue_flow import (  # noqa: F401 (client_* actions are found by name)
    client_flow_claim,
    client_skip_queue_latency,
)
from .workqueue_observability import (  # noqa: F401 (client_* actions are found by name)
    client_signals_cost,
)
from .workqueue_workflows import (  # noqa: F401 (client_* actions are found by name)
    client_release_cost,
    client_workflow_fanin,
)


class WorkqueueEngine(Workqueue):
    name = "wq_engine"
    metric_prefix = ""


class WorkqueueEngineSQLite(WorkqueueSQLite):
    name = "wq_engine_sqlite"
    metric_prefix = "sqlite_"

    @property
    def path(self) -> Path:
        return SQLITE_DIR / "wq_engine.sqlite3"

    @property
    def template(self) -> Path:
        return SQLITE_DIR / "wq_engine-template.sqlite3"


# --- client actions (run in ``python -m bench.client``; Django is set up here) -----------------


def _tasks() -> ModuleType:
    import django

    django.setup()
    from bench import workqueue_tasks

    return workqueue_tasks


def _status_of(job_id: int) -> str:
    from django_workqueue.models import Job

    return str(Job.objects.values_list("status", flat=True).get(pk=job_id))


def _noop_using(delay: float, priority: int, queue: str) -> Any:
    options: dict[str, Any] = {"priority": priority, "queue": queue}
    if delay:
        options["delay"] = delay
    return _tasks().noop.using(**options)


def client_enqueue_jobs(
    n: int, delay: float = 0, priority: int = 0, queue: str = "default", chunk: int = 10_000
) -> dict[str, Any]:
    """``n`` no-op jobs through ``enqueue_many`` in calls of ``chunk``; seconds, rows' status."""
    task = _noop_using(delay, priority, queue)
    started = time.perf_counter()
    for start in range(0, n, chunk):
        jobs = task.enqueue_many([((key,), {}) for key in range(start, min(n, start + chunk))])
    return {"seconds": time.perf_counter() - started, "status": _status_of(jobs[-1].pk)}


def client_engine_budget(jobs: int, concurrency: int, repeat: int, profile: bool) -> Any:
    """The engine's µs per job through a null driver (``bench/null_engine.py``)."""
    import os

    os.environ["WORKQUEUE_REALTIME"] = "off"  # before the settings are read
    _tasks()
    from bench import null_engine

    return null_engine.budget(jobs, concurrency, repeat, profile)


def client_calibrate_cpu(milliseconds: float, probe: int = 200_000, tries: int = 7) -> int:
    """The iterations of ``workqueue_tasks.spin`` that take about ``milliseconds`` here: the
    fastest of ``tries`` timed runs of ``probe`` iterations, scaled (so a busy moment of the
    machine during the calibration does not shorten the jobs)."""
    spin = _tasks().spin
    spin(probe)  # warm up
    fastest = min(_timed_spin(spin, probe) for _ in range(tries))
    return max(1, round(probe * milliseconds / 1000 / fastest))


def _timed_spin(spin: Any, iterations: int) -> float:
    started = time.perf_counter()
    spin(iterations)
    return time.perf_counter() - started


def client_enqueue_cpu_jobs(n: int, iterations: int, chunk: int = 10_000) -> dict[str, Any]:
    """``n`` CPU-bound jobs (``bench.cpu``, ``iterations`` turns each) through ``enqueue_many``."""
    return _enqueue_alike(_tasks().cpu, (iterations,), n, chunk)


def client_enqueue_io_jobs(n: int, seconds: float, chunk: int = 10_000) -> dict[str, Any]:
    """``n`` I/O-bound jobs (``bench.io``: a sleep of ``seconds`` each) through ``enqueue_many``."""
    return _enqueue_alike(_tasks().io, (seconds,), n, chunk)


def _enqueue_alike(task: Any, args: tuple[Any, ...], n: int, chunk: int) -> dict[str, Any]:
    """``n`` jobs of ``task`` with the same ``args``, in ``enqueue_many`` calls of ``chunk``."""
    started = time.perf_counter()
    for start in range(0, n, chunk):
        task.enqueue_many([(args, {}) for _ in range(start, min(n, start + chunk))])
    return {"seconds": time.perf_counter() - started}


def client_copy_jobs(
    n: int, delay: float = 0, priority: int = 0, queue: str = "default"
) -> dict[str, Any]:
    """One job through ``enqueue``, then ``n - 1`` copies of it in one statement."""
    task = _noop_using(delay, priority, queue)
    started = time.perf_counter()
    template = task.enqueue(0)
    copy_job(template.pk, n - 1)
    return {"seconds": time.perf_counter() - started, "status": _status_of(template.pk)}


def client_drain_check(due: int, due_priority: int) -> dict[str, Any]:
    """After a drain: every job of ``due_priority`` succeeded, no other job was ever claimed.

    The rate is measured in the database, from the first claim (``started_at``) to the last
    completion (``finished_at``), so the worker's start-up is left out of it.
    """
    _tasks()
    from django.db.models import Max, Min

    from django_workqueue.models import Job

    drained = Job.objects.filter(priority=due_priority)
    left = drained.exclude(status="succeeded").count()
    touched = Job.objects.exclude(priority=due_priority).filter(attempt__gt=0).count()
    if left or touched or drained.count() != due:
        raise RuntimeError(
            f"drain check: {drained.count()} due jobs (expected {due}), {left} not succeeded, "
            f"{touched} jobs claimed that were not due"
        )
    span = drained.aggregate(first=Min("started_at"), last=Max("finished_at"))
    seconds = (span["last"] - span["first"]).total_seconds()
    return {
        "rate": due / max(seconds, 1e-9),
        "seconds": seconds,
        "first": span["first"].timestamp(),
        "last": span["last"].timestamp(),
    }


def _claim_timer(owner: str) -> Any:
    from django_workqueue.conf import workqueue_settings
    from django_workqueue.db import driver_for

    driver = driver_for(workqueue_settings.DATABASE)

    def claim(queues: list[str], limit: int) -> tuple[float, int]:
        started = time.perf_counter()
        jobs = driver.claim(queues, limit, owner)
        return (time.perf_counter() - started) * 1000, len(jobs)

    return claim


def client_idle_claims(claims: int, limit: int, warm_up: int = 5) -> list[float]:
    """Milliseconds of each of ``claims`` claims on every queue, when none may find a job."""
    _tasks()
    from django_workqueue.conf import workqueue_settings

    claim = _claim_timer("bench-idle-poll")
    queues = list(workqueue_settings.QUEUES)
    timings = []
    for n in range(warm_up + claims):
        elapsed, claimed = claim(queues, limit)
        if claimed:
            raise RuntimeError(f"an idle poll claimed {claimed} jobs: the seeded jobs were due")
        if n >= warm_up:
            timings.append(elapsed)
    return timings


def client_queue_claims(
    claims: int, limit: int, queue_sets: list[list[str]], warm_up: int = 5
) -> dict[str, list[float]]:
    """Milliseconds per claim of ``limit`` jobs from each set of queues, the sets interleaved."""
    _tasks()
    claim = _claim_timer("bench-queue-claim")
    timings: dict[str, list[float]] = {",".join(queues): [] for queues in queue_sets}
    for n in range(warm_up + claims):
        for queues in queue_sets:
            elapsed, claimed = claim(queues, limit)
            if claimed != limit:
                raise RuntimeError(f"claimed {claimed} of {limit} jobs from {queues}")
            if n >= warm_up:
                timings[",".join(queues)].append(elapsed)
    return timings


def client_cancel_latency(n: int, jitter: float, cancel_file: str) -> dict[str, Any]:
    """Milliseconds from ``cancel_job`` to ``context.cancelled`` for ``n`` running jobs."""
    from bench.cancellation import measure

    tasks = _tasks()
    from django_workqueue.models import Job
    from django_workqueue.operations import cancel_job

    calls: list[float] = []

    def cancel(job: Job) -> None:
        started = time.perf_counter()
        cancel_job(job)
        calls.append((time.perf_counter() - started) * 1000)

    latencies = measure(tasks.wait_for_cancel.enqueue, cancel, n, jitter, Path(cancel_file))
    # Each event must have fired for the request, not for a lost lease or a shutdown: every
    # job ends `cancelled` once its worker has recorded the outcome.
    jobs = Job.objects.filter(task_name="bench.wait_for_cancel")
    deadline = time.monotonic() + 30
    while jobs.exclude(status="cancelled").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    others = list(jobs.exclude(status="cancelled").values_list("id", "status"))
    if others:
        raise RuntimeError(f"jobs that did not end cancelled: {others}")
    return {"latencies": latencies, "cancel_call_ms": calls[1:]}  # without the warm-up's
