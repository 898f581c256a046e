"""Client actions of the flow-control measurements (``bench/flow_metrics.py``), on the engine
databases (``bench.systems.workqueue_engine`` re-exports them).

``client_flow_claim`` times claims through ``django_workqueue.flow.claim.FlowClaimer.claim``
for flow-controlled jobs and ``Driver.claim`` for plain ones, each case on its own set of ready
jobs; after each timed claim its jobs are marked succeeded (untimed), so that running jobs
never pile up beyond what a worker would hold.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path
from typing import Any

from bench.latency import WARM_UP, read_stamps

_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK")


def client_flow_claim(jobs: int, keys: int, claims: int, limit: int) -> dict[str, Any]:
    """Per case: median and p95 milliseconds of a claim of ``limit`` jobs, and statements per
    claim, with ``jobs`` ready jobs spread over ``keys`` keys where the case has keys."""
    import django

    django.setup()
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from bench import flow_tasks, workqueue_tasks
    from django_workqueue.conf import workqueue_settings
    from django_workqueue.db import driver_for
    from django_workqueue.flow.claim import FlowClaimer
    from django_workqueue.models import FlowLimit, Job

    alias = workqueue_settings.DATABASE
    driver = driver_for(alias)
    flow = FlowClaimer(driver, "bench-flow")
    cases = {
        "plain": (workqueue_tasks.noop, 1),
        "concurrency": (flow_tasks.limited, 1),
        "concurrency_per_key": (flow_tasks.limited_per_key, keys),
        "rate": (flow_tasks.rated, 1),
        "fair": (flow_tasks.fair, keys),
    }
    out: dict[str, Any] = {}
    for case, (task, spread) in cases.items():
        Job.objects.using(alias).all().delete()
        FlowLimit.objects.using(alias).all().delete()
        task.enqueue_many([((n % spread,), {}) for n in range(jobs)])

        def claim(task=task) -> list[Any]:
            if task is workqueue_tasks.noop:
                return driver.claim(["default"], limit, "bench-flow")
            return flow.claim(["default"], limit)

        timings, statements = [], []
        for n in range(5 + claims):
            # The log is a deque of at most 9,000 entries: full, it no longer grows, and a
            # capture (a slice between two lengths) would come back empty.
            connections[alias].queries_log.clear()
            with CaptureQueriesContext(connections[alias]) as queries:
                started = time.perf_counter()
                claimed = claim()
                elapsed = (time.perf_counter() - started) * 1000
            if len(claimed) != limit:
                raise RuntimeError(f"{case}: claimed {len(claimed)} of {limit}")
            # Untimed, after the capture: the claimed jobs end, so that limits have room again.
            Job.objects.using(alias).filter(pk__in=[j.id for j in claimed]).update(
                status="succeeded"
            )
            # Transaction control sent on its own is not a statement of the claim; a statement
            # that carries it (PostgreSQL's "BEGIN; <walk>", "<claim>; COMMIT") is.
            counted = [
                q for q in queries.captured_queries
                if not q["sql"].startswith(_TRANSACTION_CONTROL) or ";" in q["sql"]
            ]  # fmt: skip
            if n >= 5:  # the first five warm the connection and the plans
                timings.append(elapsed)
                statements.append(len(counted))
        timings.sort()
        out[case] = {
            "p50": statistics.median(timings),
            "p95": timings[int(0.95 * (len(timings) - 1))],
            "statements": statistics.median(statements),
        }
    return out


def client_skip_queue_latency(n: int, gap: float, stamp_file: str) -> dict[str, Any]:
    """Milliseconds from the ``enqueue()`` call to the body's start, for ``n`` jobs enqueued
    with ``skip_queue=True`` and ``n`` without, alternating; and how many of the former the
    worker claimed first (their stamp had not been written when the enqueue returned)."""
    import django

    django.setup()
    from bench import stamp, workqueue_tasks

    stamp.STAMP_FILE = stamp_file  # skip-queue bodies run here and stamp the same file
    path = Path(stamp_file)
    noop, skipping = workqueue_tasks.noop, workqueue_tasks.noop.using(skip_queue=True)
    for key in WARM_UP:  # the worker is up and listening, and this process has connected
        noop.enqueue(key)
    _wait_for(path, set(WARM_UP))
    skipping.enqueue(-4)
    called: dict[str, dict[int, float]] = {"skip_queue": {}, "worker": {}}
    worker_won = 0
    for key in range(2 * n):
        kind = "skip_queue" if key % 2 else "worker"
        called[kind][key] = time.time()
        (skipping if kind == "skip_queue" else noop).enqueue(key)
        if kind == "skip_queue" and key not in read_stamps(path):
            worker_won += 1
        time.sleep(gap * random.uniform(0.5, 1.5))
    _wait_for(path, set(called["skip_queue"]) | set(called["worker"]))
    stamps = read_stamps(path)
    return {
        kind: [(stamps[key] - at) * 1000 for key, at in calls.items()]
        for kind, calls in called.items()
    } | {"worker_won": worker_won}


def _wait_for(path: Path, keys: set[int], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while keys - read_stamps(path).keys():
        if time.monotonic() > deadline:
            missing = keys - read_stamps(path).keys()
            raise RuntimeError(f"{len(missing)} jobs never started in {timeout}s")
        time.sleep(0.02)
