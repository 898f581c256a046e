"""Backoff policies: ``exponential`` and ``delay_for`` are pure functions of the attempt."""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_workqueue import retry


def no_jitter(attempt, *, base=2.0, cap=3600.0):
    return retry.exponential(attempt, base=base, cap=cap, jitter=0.0)


def test_exponential_doubles_from_the_base():
    assert [no_jitter(n) for n in range(1, 7)] == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    assert [no_jitter(n, base=0.5) for n in range(1, 4)] == [0.5, 1.0, 2.0]


@pytest.mark.parametrize("attempt", [0, -3])
def test_exponential_treats_attempts_below_one_as_the_first(attempt):
    assert no_jitter(attempt, base=3.0) == 3.0


def test_exponential_is_capped():
    assert no_jitter(10, base=2.0, cap=100.0) == 100.0
    assert no_jitter(7, base=2.0, cap=100.0) == 100.0  # 128 > 100
    assert no_jitter(6, base=2.0, cap=100.0) == 64.0


def test_exponential_cap_holds_for_huge_attempt_numbers():
    assert no_jitter(5000, base=2.0, cap=3600.0) == 3600.0


def test_zero_base_means_no_delay():
    assert no_jitter(8, base=0.0) == 0.0


@pytest.mark.parametrize(
    ("rand", "expected"),
    [
        (lambda: 0.0, 8.0 * 0.75),  # lowest draw: -jitter
        (lambda: 0.5, 8.0),  # middle draw: no change
        (lambda: 1.0, 8.0 * 1.25),  # highest draw: +jitter
        (lambda: 0.75, 8.0 * 1.125),
    ],
)
def test_jitter_spreads_the_delay_by_the_fraction_either_way(rand, expected):
    assert retry.exponential(3, base=2.0, cap=3600.0, jitter=0.25, rand=rand) == pytest.approx(
        expected
    )


def test_jitter_applies_after_the_cap():
    low = retry.exponential(20, base=2.0, cap=100.0, jitter=0.1, rand=lambda: 0.0)
    high = retry.exponential(20, base=2.0, cap=100.0, jitter=0.1, rand=lambda: 1.0)
    assert (low, high) == (pytest.approx(90.0), pytest.approx(110.0))


def test_full_jitter_never_goes_negative():
    assert retry.exponential(4, base=2.0, cap=3600.0, jitter=1.0, rand=lambda: 0.0) == 0.0


def test_default_random_jitter_stays_within_bounds():
    delays = {retry.exponential(5, base=2.0, cap=3600.0, jitter=0.1) for _ in range(500)}
    assert all(32.0 * 0.9 <= d <= 32.0 * 1.1 for d in delays)
    assert len(delays) > 1  # it really varies


@override_settings(WORKQUEUE={"RETRY_JITTER": 0, "RETRY_BACKOFF_BASE": 3.0})
def test_delay_for_none_uses_the_configured_base():
    assert [retry.delay_for(None, n) for n in (1, 2, 3)] == [3.0, 6.0, 12.0]


@override_settings(WORKQUEUE={"RETRY_JITTER": 0})
def test_delay_for_none_defaults_to_a_two_second_base():
    assert retry.delay_for(None, 4) == 16.0


@override_settings(WORKQUEUE={"RETRY_JITTER": 0})
def test_delay_for_a_number_uses_it_as_the_base():
    assert [retry.delay_for(5, n) for n in (1, 2, 3)] == [5.0, 10.0, 20.0]
    assert retry.delay_for(0, 9) == 0.0


@override_settings(WORKQUEUE={"RETRY_JITTER": 0, "RETRY_BACKOFF_MAX": 50.0})
def test_delay_for_a_number_is_capped_by_the_setting():
    assert retry.delay_for(10, 2) == 20.0
    assert retry.delay_for(10, 4) == 50.0


@override_settings(WORKQUEUE={"RETRY_JITTER": 0.5})
def test_delay_for_applies_the_configured_jitter():
    delays = [retry.delay_for(10, 1) for _ in range(300)]
    assert all(5.0 <= d <= 15.0 for d in delays)
    assert max(delays) - min(delays) > 1.0


@override_settings(WORKQUEUE={"RETRY_JITTER": 0.5})
def test_delay_for_a_callable_returns_its_value_without_jitter():
    seen = []

    def backoff(attempt):
        seen.append(attempt)
        return attempt * 7

    assert retry.delay_for(backoff, 3) == 21.0
    assert isinstance(retry.delay_for(backoff, 2), float)
    assert seen == [3, 2]


def test_delay_for_a_callable_never_returns_a_negative_delay():
    assert retry.delay_for(lambda attempt: -30, 1) == 0.0
