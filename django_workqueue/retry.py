"""Backoff policies: pure functions from an attempt number to a delay in seconds."""

from __future__ import annotations

import random
from collections.abc import Callable

from .conf import workqueue_settings as conf


def exponential(
    attempt: int,
    *,
    base: float,
    cap: float,
    jitter: float,
    rand: Callable[[], float] = random.random,
) -> float:
    """``base * 2 ** (attempt - 1)`` capped at ``cap``, spread by ±``jitter`` (a fraction).

    Jitter keeps jobs that failed together (an outage) from all coming back at the same instant.

    >>> exponential(3, base=2, cap=3600, jitter=0)
    8.0
    """
    # 2.0 ** 1024 overflows a float; the cap is reached long before, so clamp the exponent.
    delay = min(cap, base * 2.0 ** min(max(attempt - 1, 0), 1023))
    return max(0.0, delay * (1 + jitter * (2 * rand() - 1)))


def delay_for(backoff: float | Callable[[int], float] | None, attempt: int) -> float:
    """The delay before retrying after ``attempt`` failed, by a task's ``backoff`` option."""
    if callable(backoff):
        return max(0.0, float(backoff(attempt)))
    base = conf.RETRY_BACKOFF_BASE if backoff is None else float(backoff)
    return exponential(
        attempt, base=base, cap=float(conf.RETRY_BACKOFF_MAX), jitter=float(conf.RETRY_JITTER)
    )
