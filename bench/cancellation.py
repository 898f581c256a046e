"""Cancellation latency: from the call to ``cancel_job`` to ``context.cancelled`` set in the task.

A worker is already running. Each job of ``bench.wait_for_cancel`` notes when it starts and when
its ``context.cancelled`` event fires, as ``"<event> <key> <time.time()>"`` lines in the file
named by ``BENCH_CANCEL_FILE``; the enqueuing process, on the same machine (one clock), waits
for the start, waits a random moment (so requests do not lock in phase with the worker's
heartbeat), notes the time and calls ``cancel_job``. One warm-up cancellation goes first.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

CANCEL_FILE = os.environ.get("BENCH_CANCEL_FILE") or None
WARM_UP = -1


def note(event: str, key: int) -> None:
    """Task side: append one event line (appends of one short line never interleave)."""
    if CANCEL_FILE is not None:
        at = time.time()
        with open(CANCEL_FILE, "a") as file:
            file.write(f"{event} {key} {at:.6f}\n")


def read_notes(path: Path) -> dict[tuple[str, int], float]:
    notes: dict[tuple[str, int], float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            event, key, at = line.split()
            notes.setdefault((event, int(key)), float(at))
    return notes


def _wait_for(path: Path, event: str, key: int, timeout: float) -> float:
    deadline = time.monotonic() + timeout
    while (at := read_notes(path).get((event, key))) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"job {key}: no {event!r} note within {timeout}s ({path})")
        time.sleep(0.005)
    return at


def measure(
    enqueue: Callable[[int], Any],
    cancel: Callable[[Any], object],
    n: int,
    jitter: float,
    path: Path,
    timeout: float = 60.0,
) -> list[float]:
    """Milliseconds from ``cancel(job)`` to the task's event, for ``n`` jobs one at a time."""
    latencies = []
    for key in (WARM_UP, *range(n)):
        job = enqueue(key)
        _wait_for(path, "started", key, timeout)
        time.sleep(random.uniform(0, jitter))
        requested = time.time()
        cancel(job)
        seen = _wait_for(path, "cancelled", key, timeout)
        if key != WARM_UP:
            latencies.append((seen - requested) * 1000)
    return latencies
