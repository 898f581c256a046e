"""Cron expressions and time zones: their validation and their ticks (pure rules, no database).

Parsing and the computation of ticks are croniter's (5 fields, or 6 with seconds last); ticks
are computed in the schedule's time zone and returned in UTC. ``@task(cron=...)`` validates
with these at definition (``registry.py``); ``schedules.py`` and the scheduler tick with them.
croniter (and dateutil with it) is imported at the first cron expression, not at start-up: a
project without cron schedules does not load it.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


def cron_problem(cron: Any) -> str | None:
    """Why croniter cannot use ``cron``, or None. Five fields, or six (seconds last)."""
    if not isinstance(cron, str) or len(cron.split()) not in (5, 6):
        return (
            f"cron must be a string of 5 fields (minute hour day month weekday) or 6 (seconds "
            f"last), got {cron!r}"
        )
    from croniter import croniter  # imported at the first cron expression: not at start-up

    if not croniter.is_valid(cron):
        return f"cron {cron!r} is not a valid cron expression"
    return None


def timezone_problem(name: Any) -> str | None:
    """Why ``name`` is not an IANA time zone, or None."""
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        return f"timezone {name!r} is not an IANA time zone name (e.g. 'Europe/Paris', 'UTC')"
    return None


def next_tick(cron: str, timezone: str, after: datetime) -> datetime:
    """The first tick of ``cron`` in ``timezone`` strictly after ``after``, in UTC."""
    from croniter import croniter  # imported at the first cron expression: not at start-up

    local = after.astimezone(ZoneInfo(timezone))
    return croniter(cron, local).get_next(datetime).astimezone(UTC)


def latest_tick(cron: str, timezone: str, first: datetime, now: datetime) -> datetime:
    """The last tick at or before ``now``, ``first`` (a due tick) at the earliest. croniter's
    ``get_prev`` is strictly before its start, so a tick at exactly ``now`` is looked for too."""
    from croniter import croniter  # imported at the first cron expression: not at start-up

    local = now.astimezone(ZoneInfo(timezone))
    before = croniter(cron, local).get_prev(datetime).astimezone(UTC)
    at = next_tick(cron, timezone, before)
    latest = at if at <= now else before
    return max(latest, first)
