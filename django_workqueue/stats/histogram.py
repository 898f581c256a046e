"""Durations in classes a quarter of a power of two wide: a histogram the database can add up.

A duration is counted in its class (``bucket``); a percentile is read back as the class's
geometric middle, so it is within 10 % of the true value whatever the scale (1 ms to weeks).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

STEPS_PER_DOUBLING = 4
SMALLEST = 0.001
"""Seconds: durations below this are all counted in class 0."""
LARGEST_BUCKET = 127
"""Class of about 93 days and longer."""


def bucket(seconds: float) -> int:
    """The class of a duration of ``seconds``."""
    if seconds < SMALLEST:
        return 0
    step = math.floor(STEPS_PER_DOUBLING * math.log2(seconds / SMALLEST))
    return min(LARGEST_BUCKET, 1 + step)


def lower_bounds() -> tuple[float, ...]:
    """The smallest duration of each class from 1 to ``LARGEST_BUCKET``, as ``bucket`` decides
    it, to the last bit of a float: a duration ``d`` is in class ``k`` iff
    ``bounds[k - 1] <= d < bounds[k]``, which is what PostgreSQL's ``width_bucket(d, bounds)``
    answers, so that a statement counting durations in SQL classes them as ``bucket`` does."""
    return _LOWER_BOUNDS


def _lowest_of(klass: int) -> float:
    edge = SMALLEST * 2 ** ((klass - 1) / STEPS_PER_DOUBLING)  # within a few bits of the edge
    while bucket(edge) >= klass:
        edge = math.nextafter(edge, 0.0)
    while bucket(edge) < klass:
        edge = math.nextafter(edge, math.inf)
    return edge


_LOWER_BOUNDS = tuple(_lowest_of(klass) for klass in range(1, LARGEST_BUCKET + 1))


def value(bucket: int) -> float:
    """The duration a class stands for: its geometric middle (class 0: half a millisecond)."""
    if bucket <= 0:
        return SMALLEST / 2
    return SMALLEST * 2 ** ((bucket - 0.5) / STEPS_PER_DOUBLING)


def percentile(counts: Mapping[int, int], fraction: float) -> float | None:
    """The ``fraction`` (0.5 for the median) percentile of a histogram {class: count}, or
    None when it is empty."""
    total = sum(counts.values())
    if total <= 0:
        return None
    rank = fraction * total
    seen = 0
    for klass in sorted(counts):
        seen += counts[klass]
        if seen >= rank:
            return value(klass)
    return value(max(counts))
