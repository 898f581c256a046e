"""Summaries of repeated measurements: median with min and max, and percentiles."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any


def summary(samples: Sequence[float], **extra: Any) -> dict[str, Any]:
    """``{"median", "min", "max", "samples"}`` of one metric's repetitions (plus ``extra``)."""
    values = [float(v) for v in samples]
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "samples": values,
        **extra,
    }


def percentile(values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100), linearly interpolated between the closest ranks."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
