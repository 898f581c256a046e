"""Backpressure: a hook that tells a worker to wait before its next claim.

``WORKQUEUE["BACKPRESSURE"]`` names a callable (a dotted path) that takes the worker's live
``WorkerStats`` and returns how many seconds to wait before the next claim (0: claim now). The
worker asks it before each claim it would make (a pass with free slots); a pause it returns is
waited out, then the claim goes ahead and the next claim asks again. So a hook that always
returns 1 lets a worker claim one batch a second.

A pause holds back claims only: running jobs go on, and so do the heartbeat, the writing of
outcomes and the maintenance services. A hook that raises, or returns something that is not a
number of seconds, is logged and taken as a pause of ``ERROR_PAUSE`` seconds: a broken hook
slows a worker down, it never stops it.

``adaptive_delay()`` builds such a hook: an AIMD controller on the recent failure rate.
"""

from __future__ import annotations

import builtins
import collections
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.utils.module_loading import import_string

from ..conf import workqueue_settings as conf
from ..outcomes import OutcomeKind

logger = logging.getLogger("django_workqueue.worker")

ERROR_PAUSE = 1.0
"""Seconds a worker waits before its next claim when the backpressure hook failed."""

#: The endings that count as failures in ``WorkerStats`` (a retry to come counts: the attempt
#: failed). Cancellations, snoozes and releases are neither successes nor failures.
FAILURES = frozenset({OutcomeKind.RETRY, OutcomeKind.DISCARD, OutcomeKind.LEASE_EXPIRED})

Hook = Callable[["WorkerStats"], float]


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStats:
    """What a worker has been doing lately, as its backpressure hook sees it.

    ``claimed``, ``succeeded`` and ``failed`` count the last ``window_seconds``
    (``WORKQUEUE["BACKPRESSURE_WINDOW"]``); a job counts when its body returns.
    """

    worker_id: str
    slots: int
    """Slots the worker has now."""
    busy: int
    """Slots running a job now."""
    claimed: int
    succeeded: int
    failed: int
    """Attempts that raised (to be retried or not) or were discarded."""
    window_seconds: float
    uptime_seconds: float
    """Seconds since the worker started."""

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed

    @property
    def fail_rate(self) -> float:
        """Failed / finished in the window; 0.0 when nothing finished."""
        return self.failed / self.finished if self.finished else 0.0


class RecentCounts:
    """Claimed, succeeded and failed counts over the last ``window`` seconds, kept in buckets of
    one second so that the cost stays flat at any throughput. Safe to call from any thread."""

    def __init__(self, window: float) -> None:
        self.window = window
        self._buckets: collections.deque[list[int]] = collections.deque()
        self._lock = threading.Lock()

    def add(self, now: float, *, claimed: int = 0, succeeded: int = 0, failed: int = 0) -> None:
        second = int(now)
        with self._lock:
            if not self._buckets or self._buckets[-1][0] != second:
                self._buckets.append([second, 0, 0, 0])
                self._prune(now)
            bucket = self._buckets[-1]
            bucket[1] += claimed
            bucket[2] += succeeded
            bucket[3] += failed

    def add_outcome(self, now: float, kind: OutcomeKind) -> None:
        if kind == OutcomeKind.SUCCEEDED:
            self.add(now, succeeded=1)
        elif kind in FAILURES:
            self.add(now, failed=1)

    def totals(self, now: float) -> tuple[int, int, int]:
        """(claimed, succeeded, failed) in the window ending ``now``."""
        with self._lock:
            self._prune(now)
            buckets = list(self._buckets)
        return (sum(b[1] for b in buckets), sum(b[2] for b in buckets), sum(b[3] for b in buckets))

    def _prune(self, now: float) -> None:
        while self._buckets and self._buckets[0][0] + 1 <= now - self.window:
            self._buckets.popleft()


class Backpressure:
    """One worker's claim gate: counts what the worker does, asks the hook before each claim
    and keeps the pause it returns."""

    def __init__(self, worker_id: str, hook: Hook | None, window: float) -> None:
        self.worker_id = worker_id
        self.hook = hook
        self.recent = RecentCounts(window)
        self.started_at = time.monotonic()
        self.resume_at: float | None = None
        """While paused: when claims may start again (``time.monotonic()``)."""

    @classmethod
    def from_settings(cls, worker_id: str) -> Backpressure:
        """The gate of ``WORKQUEUE["BACKPRESSURE"]`` (None, a dotted path or a callable)."""
        value = conf.BACKPRESSURE
        hook = import_string(value) if isinstance(value, str) else value
        if hook is not None and not callable(hook):
            raise TypeError(f"WORKQUEUE['BACKPRESSURE'] {value!r} is not callable")
        return cls(worker_id, hook, float(conf.BACKPRESSURE_WINDOW))

    def count_claimed(self, now: float, claimed: int) -> None:
        """The worker claimed ``claimed`` jobs (counted only for a hook: nothing else reads
        the counts, and the hook is the setting's at the worker's start)."""
        if self.hook is not None:
            self.recent.add(now, claimed=claimed)

    def count_outcome(self, kind: OutcomeKind) -> None:
        """An attempt ended as ``kind`` (counted only for a hook, as ``count_claimed``)."""
        if self.hook is not None:
            self.recent.add_outcome(time.monotonic(), kind)

    def stats(self, now: float, *, slots: int, busy: int) -> WorkerStats:
        claimed, succeeded, failed = self.recent.totals(now)
        return WorkerStats(
            worker_id=self.worker_id, slots=slots, busy=busy, claimed=claimed,
            succeeded=succeeded, failed=failed, window_seconds=self.recent.window,
            uptime_seconds=now - self.started_at,
        )  # fmt: skip

    def may_claim(self, *, slots: int, busy: int, now: float | None = None) -> bool:
        """Whether to claim now. A pause that has run out lets this claim through unasked."""
        if self.hook is None:
            return True
        now = time.monotonic() if now is None else now
        if self.resume_at is not None:
            if now < self.resume_at:
                return False
            self.resume_at = None
            return True
        pause = self._ask(self.stats(now, slots=slots, busy=busy))
        if pause <= 0:
            return True
        self.resume_at = now + pause
        return False

    def paused_until(self, now: float) -> float:
        """When the running pause ends; ``inf`` when none is running (one that has run out but
        whose claim has not come yet, because every slot is busy, is over too: a worker must
        not wake for it again and again)."""
        if self.resume_at is None or self.resume_at <= now:
            return math.inf
        return self.resume_at

    def _ask(self, stats: WorkerStats) -> float:
        assert self.hook is not None
        try:
            pause = self.hook(stats)
            if isinstance(pause, bool) or not isinstance(pause, int | float):
                raise TypeError(f"it returned {pause!r}, not a number of seconds")
            if not math.isfinite(pause) or pause < 0:
                raise ValueError(f"it returned {pause!r}; return seconds >= 0")
        except Exception:
            logger.exception(
                "worker %s: the backpressure hook WORKQUEUE['BACKPRESSURE'] failed; pausing "
                "claims for %.1fs",
                stats.worker_id, ERROR_PAUSE,
            )  # fmt: skip
            return ERROR_PAUSE
        return float(pause)


def adaptive_delay(
    max: float = 10.0, max_fail_rate: float = 0.2, *, step: float = 1.0, min_finished: int = 5
) -> Hook:
    """A backpressure hook that backs off while too many jobs fail (AIMD).

    Each time it is asked: if at least ``min_finished`` jobs finished in the stats' window and
    more than ``max_fail_rate`` of them failed, the pause doubles (from ``step``, up to ``max``
    seconds); otherwise it shrinks by ``step`` seconds, down to 0.

    >>> WORKQUEUE = {"BACKPRESSURE": "myproject.workers.backpressure"}
    >>> backpressure = adaptive_delay(max=10, max_fail_rate=0.2)   # in myproject/workers.py
    """
    if isinstance(max, bool) or not isinstance(max, int | float) or not max > 0:
        raise ValueError(f"adaptive_delay: max must be seconds > 0, got {max!r}")
    if not (isinstance(max_fail_rate, int | float) and 0 <= max_fail_rate < 1):
        raise ValueError(
            f"adaptive_delay: max_fail_rate must be a fraction from 0 up to 1, got "
            f"{max_fail_rate!r}"
        )
    if isinstance(step, bool) or not isinstance(step, int | float) or not step > 0:
        raise ValueError(f"adaptive_delay: step must be seconds > 0, got {step!r}")
    if isinstance(min_finished, bool) or not isinstance(min_finished, int) or min_finished < 1:
        raise ValueError(f"adaptive_delay: min_finished must be 1 or more, got {min_finished!r}")
    ceiling, rate, increment, enough = float(max), float(max_fail_rate), float(step), min_finished
    delay = 0.0

    def backpressure(stats: WorkerStats) -> float:
        nonlocal delay
        if stats.finished >= enough and stats.fail_rate > rate:
            delay = builtins.min(ceiling, builtins.max(increment, delay * 2))
        else:
            delay = builtins.max(0.0, delay - increment)
        return delay

    return backpressure
