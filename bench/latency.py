"""Pickup latency: from the moment an enqueue has committed to the moment its task starts.

An idle worker is already running. Jobs are enqueued one at a time, each in its own
transaction, spaced by a jittered gap (so enqueues do not phase-lock with a poll interval);
each task stamps its start into a file (``bench/stamp.py``). Three warm-up jobs go first and
are waited for, so the worker is known to be up and listening before the clock starts.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

WARM_UP = (-1, -2, -3)


def read_stamps(path: Path) -> dict[int, float]:
    stamps: dict[int, float] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            key, _, at = line.partition(" ")
            if at:
                stamps.setdefault(int(key), float(at))
    return stamps


def _missing(path: Path, keys: set[int]) -> set[int]:
    return keys - read_stamps(path).keys()


def _latencies_ms(path: Path, committed: dict[int, float], timeout: float) -> list[float]:
    deadline = time.monotonic() + timeout
    while _missing(path, set(committed)) and time.monotonic() < deadline:
        time.sleep(0.02)
    stamps = read_stamps(path)
    missing = set(committed) - stamps.keys()
    if missing:
        raise RuntimeError(f"{len(missing)} of {len(committed)} jobs never started in {timeout}s")
    return [(stamps[key] - at) * 1000 for key, at in committed.items()]


def _wait_warm(path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while _missing(path, set(WARM_UP)):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker ran no warm-up job within {timeout}s")
        time.sleep(0.02)


def measure(
    enqueue: Callable[[int], object], n: int, gap: float, path: Path, timeout: float = 60.0
) -> list[float]:
    """Latencies in milliseconds of ``n`` jobs, enqueued by ``enqueue(key)`` (synchronous)."""
    for key in WARM_UP:
        enqueue(key)
    _wait_warm(path, timeout)
    committed: dict[int, float] = {}
    for key in range(n):
        enqueue(key)
        committed[key] = time.time()
        time.sleep(gap * random.uniform(0.5, 1.5))
    return _latencies_ms(path, committed, timeout)


async def measure_async(
    enqueue: Callable[[int], Awaitable[object]],
    n: int,
    gap: float,
    path: Path,
    timeout: float = 60.0,
) -> list[float]:
    """``measure`` for systems whose enqueue API is a coroutine."""
    for key in WARM_UP:
        await enqueue(key)
    await asyncio.to_thread(_wait_warm, path, timeout)
    committed: dict[int, float] = {}
    for key in range(n):
        await enqueue(key)
        committed[key] = time.time()
        await asyncio.sleep(gap * random.uniform(0.5, 1.5))
    return await asyncio.to_thread(_latencies_ms, path, committed, timeout)
