"""Ticks as croniter computes them (``schedules.py``): pure, no database."""

from __future__ import annotations

import datetime as dt

import pytest

from django_workqueue.schedules import cron_problem, latest_tick, next_tick, timezone_problem

UTC = dt.UTC


def utc(*parts: int) -> dt.datetime:
    return dt.datetime(*parts, tzinfo=UTC)


def test_the_next_tick_is_strictly_after_the_moment():
    assert next_tick("*/5 * * * *", "UTC", utc(2025, 1, 6, 10, 0)) == utc(2025, 1, 6, 10, 5)
    assert next_tick("*/5 * * * *", "UTC", utc(2025, 1, 6, 10, 4, 59)) == utc(2025, 1, 6, 10, 5)


def test_the_next_tick_is_computed_in_the_schedules_zone_and_given_in_utc():
    # 09:00 in Paris is 08:00 UTC in winter, 07:00 UTC in summer.
    assert next_tick("0 9 * * *", "Europe/Paris", utc(2025, 1, 6)) == utc(2025, 1, 6, 8)
    assert next_tick("0 9 * * *", "Europe/Paris", utc(2025, 7, 7)) == utc(2025, 7, 7, 7)


@pytest.mark.parametrize(
    ("now", "latest"),
    [
        (utc(2025, 1, 6, 13, 0), utc(2025, 1, 6, 13, 0)),  # a tick at exactly now counts
        (utc(2025, 1, 6, 13, 4, 59), utc(2025, 1, 6, 13, 0)),
        (utc(2025, 1, 6, 10, 0), utc(2025, 1, 6, 10, 0)),  # never before the first due tick
    ],
)
def test_the_latest_tick_is_the_last_at_or_before_now(now, latest):
    assert latest_tick("*/5 * * * *", "UTC", utc(2025, 1, 6, 10, 0), now) == latest


def test_a_seconds_field_is_the_sixth():
    assert next_tick("* * * * * */10", "UTC", utc(2025, 1, 6, 10, 0, 1)) == utc(
        2025, 1, 6, 10, 0, 10
    )


@pytest.mark.parametrize("cron", ["*/5 * * * *", "0 7 * * mon-fri", "* * * * * */10"])
def test_five_or_six_field_expressions_are_accepted(cron):
    assert cron_problem(cron) is None


@pytest.mark.parametrize("cron", ["* * * *", "* * * * * * *", "61 * * * *", 5, "@hourly"])
def test_other_expressions_are_refused_with_the_reason(cron):
    assert "cron" in cron_problem(cron)


def test_only_iana_time_zones_are_accepted():
    assert timezone_problem("Europe/Paris") is None
    assert "not an IANA time zone" in timezone_problem("CEST")
