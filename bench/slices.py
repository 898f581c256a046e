"""Pure helpers of the long drain (``bench/long_drain.py``): the rate of each slice of a drain
from sampled progress, and the jobs table's growth over its steady-state size. Standard
library only (tests/unit/test_bench_slices.py imports them without a database driver)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence


def slice_rates(samples: Sequence[tuple[float, int]], size: int) -> list[float]:
    """Jobs/s of each run of ``size`` completions, from ``(seconds, completed)`` samples.

    The clock starts at the sample before the first completion (the last one with none, or the
    first sample); slice k ends at the first sample that has reached k * ``size`` completions
    (counted from there), and its rate is the completions between the sample that began it and
    that one over their time (the samples' own counts, so a coarse sampling skews no rate; the
    next slice begins at that sample). A last partial slice is left out; a drain of a whole
    number of slices ends on its last boundary, so none is.
    """
    if not samples or size <= 0:
        return []
    counts = [completed for _, completed in samples]
    start = max(0, bisect.bisect_right(counts, 0) - 1)
    begin_at, begin_count = samples[start]
    rates = []
    boundary = begin_count + size
    for at, completed in samples[start + 1 :]:
        if completed >= boundary:
            rates.append((completed - begin_count) / max(at - begin_at, 1e-9))
            begin_at, begin_count = at, completed
            while boundary <= completed:
                boundary += size
    return rates


def growth(sizes: Sequence[tuple[int, int]], total: int, end: int) -> dict[str, float]:
    """The steady-state size and the later sizes over it.

    ``sizes`` are ``(completed, bytes)`` samples over a drain of ``total`` jobs, ``end`` the
    size once retention has run. Steady state: the largest size of the first half (completed
    ≤ total / 2); ``later``: the largest of the second half, over it; ``end``: ``end`` over it.
    """
    first = [size for completed, size in sizes if completed <= total / 2]
    second = [size for completed, size in sizes if completed > total / 2]
    steady = max(first or [end])
    return {
        "steady": float(steady),
        "later_ratio": max(second or [steady]) / steady if steady else 0.0,
        "end_ratio": end / steady if steady else 0.0,
    }
