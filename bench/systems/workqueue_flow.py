"""Client actions of the flow-control measurements (``bench/flow_metrics.py``), on the engine
databases (``bench.systems.workqueue_engine`` re-exports them)."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

from bench.latency import WARM_UP, read_stamps


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
