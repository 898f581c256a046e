"""The stats' duration classes: a duration read back from its class is within 10 %."""

from __future__ import annotations

import math

import pytest

from django_workqueue.stats import histogram


@pytest.mark.parametrize("seconds", [0.0012, 0.05, 0.3, 1.0, 7.5, 61.0, 3600.0, 86400.0 * 3])
def test_a_duration_read_back_from_its_class_is_within_ten_percent(seconds: float) -> None:
    assert histogram.value(histogram.bucket(seconds)) == pytest.approx(seconds, rel=0.1)


def test_durations_below_a_millisecond_share_class_zero_and_huge_ones_the_last() -> None:
    assert histogram.bucket(0.0) == histogram.bucket(0.0009) == 0
    assert histogram.bucket(10**9) == histogram.LARGEST_BUCKET


def test_percentiles_are_read_from_the_cumulative_counts() -> None:
    fast, slow = histogram.bucket(0.01), histogram.bucket(10.0)
    counts = {fast: 94, slow: 6}
    assert histogram.percentile(counts, 0.5) == histogram.value(fast)
    assert histogram.percentile(counts, 0.95) == histogram.value(slow)
    assert histogram.percentile({}, 0.5) is None


def test_lower_bounds_are_where_bucket_changes_class_to_the_last_bit() -> None:
    """Each class's lower bound is the smallest float ``bucket`` puts in it (the one rule a
    statement classing durations with ``width_bucket`` is handed, never restated in SQL)."""
    bounds = histogram.lower_bounds()

    assert len(bounds) == histogram.LARGEST_BUCKET
    for klass, edge in enumerate(bounds, start=1):
        assert histogram.bucket(edge) == klass
        assert histogram.bucket(math.nextafter(edge, 0.0)) == klass - 1
