"""The rolling counters: what each completion batch adds to ``StatsCounter``.

Called inside the transaction that records a batch of outcomes, after the write: one more
statement per batch (an upsert of a few rows per queue and task), never one per job. The
counters are therefore exact — an attempt is counted iff its outcome was written — and cost
the hot path a statement a batch. A worker's one-statement pass (``Driver.record_and_claim``)
counts in its statement the rows ``counted_write`` decides here, in the shape ``count`` uses.
"""

from __future__ import annotations

import functools
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models.functions import Now

from ..db import CountedWrite, Driver, Outcome, OutcomeKind, Recorded, Timing
from ..models import StatsCounter
from ..states import Status
from .histogram import bucket, lower_bounds

SHARDS = 8
"""Writers are spread over this many rows per counter (by lease owner), so that workers
completing the same task at once do not queue for one row's lock."""
KEEP = timedelta(hours=1)
"""Counter rows older than this are deleted (the stats look 15 minutes back)."""
_FORGET_EVERY = 60.0  # seconds between two deletions of old rows by one process

ENDINGS = ("succeeded", "failed", "cancelled", "retried")
_RETRIED_KINDS = frozenset({OutcomeKind.RETRY, OutcomeKind.LEASE_EXPIRED})
# The statuses counted as their own ending, by name (a dict: the look-up of every job's count).
_ENDED = {
    str(status): str(status) for status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)
}
_last_forget: dict[str, float] = {}
_listeners: list[Callable[[Sequence[Outcome], Recorded], None]] = []
logger = logging.getLogger("django_workqueue.stats")


def add_listener(listener: Callable[[Sequence[Outcome], Recorded], None]) -> None:
    """Call ``listener(outcomes, recorded)`` in this process once each recorded batch commits
    (a worker's own Prometheus metrics)."""
    _listeners.append(listener)


def remove_listener(listener: Callable[[Sequence[Outcome], Recorded], None]) -> None:
    _listeners.remove(listener)


def ending(kind: OutcomeKind | None, status: str) -> str | None:
    """The counter an attempt's written outcome adds to, or None (a snooze or a release at
    shutdown ends no attempt's work: nothing is counted)."""
    counted = _ENDED.get(status)
    if counted is not None:
        return counted
    if kind in _RETRIED_KINDS:
        return "retried"
    return None


COUNTERS: tuple[tuple[str | None, str | None], ...] = (
    (None, None),
    ("run", "run"),
    ("wait", "wait"),
)
"""The counters one attempt adds to once its outcome is written, each with the duration that
classes it (None: class 0): its ending (None: the ending's own name), its run, its wait. The one
shape of ``count`` and of the one-statement pass's (``counted_write``)."""

# Where each measure of ``COUNTERS`` is in a ``Timing`` (its index: a tuple's look-up per job).
_SECONDS = {
    "run": Timing._fields.index("run_seconds"),
    "wait": Timing._fields.index("wait_seconds"),
}


def counted_write(owner: str, outcomes: Sequence[Outcome]) -> CountedWrite:
    """``outcomes`` with the counter each would add to, whichever status its row takes, for a
    driver that counts them in the statement that writes them (``Driver.record_and_claim``):
    one row per outcome that counts, (job id, attempt, the ending of the decided status, the
    ending of the status a requested cancellation picks). The statement joins them to the rows
    it wrote, picks the ending the row took, adds the ``COUNTERS`` of it and classes their
    durations (``duration_class``)."""
    counted = []
    for o in outcomes:
        name = ending(o.kind, o.status)
        if_cancelled = ending(o.kind, o.status_if_cancel_requested)
        if name is not None or if_cancelled is not None:
            counted.append((o.job_id, o.attempt, name, if_cancelled))
    return CountedWrite(
        outcomes=outcomes, counted=counted, shard=_shard(owner), bounds=lower_bounds(),
        counters=COUNTERS,
    )  # fmt: skip


def duration_class(seconds: float | None) -> int | None:
    """The class a measured duration is counted in (``histogram.bucket``), or None: not
    counted. Negative when the write moved run_after on (a retry's delay): the wait is
    unknown. ``Driver.record_and_claim`` classes its rows alike (``width_bucket`` over
    ``histogram.lower_bounds()`` where the duration is ≥ 0)."""
    if seconds is None or seconds < 0:
        return None
    return bucket(seconds)


def _shard(owner: str) -> int:
    return zlib.crc32(owner.encode()) % SHARDS


def count(driver: Driver, owner: str, outcomes: Sequence[Outcome], recorded: Recorded) -> None:
    """Add the written ``outcomes`` to the counters of the current minute (one statement)."""
    if not recorded.timings:
        return
    kinds = {(o.job_id, o.attempt): o.kind for o in outcomes}
    shard = _shard(owner)
    totals: dict[tuple[str, str, str, int], int] = {}
    for timing in recorded.timings:
        name = ending(kinds.get((timing.id, timing.attempt)), timing.status)
        if name is None:
            continue
        for counter, measure in COUNTERS:  # the counters it adds to, each in its class
            klass = 0 if measure is None else duration_class(timing[_SECONDS[measure]])  # type: ignore[arg-type]
            if klass is None:
                continue
            key = (timing.queue, timing.task_name, counter or name, klass)
            totals[key] = totals.get(key, 0) + 1
    driver.count_stats(
        sorted(
            (queue, task, name, klass, shard, n) for (queue, task, name, klass), n in totals.items()
        )
    )


def tell(alias: str, outcomes: Sequence[Outcome], recorded: Recorded) -> None:
    """Tell the listeners (``add_listener``) of a batch that wrote something, once the
    current transaction of ``alias`` commits: at once outside a transaction, as after the
    worker's autocommitted pass (``Driver.record_and_claim``); never if it rolls back."""
    if _listeners and recorded.timings:
        transaction.on_commit(functools.partial(_tell, outcomes, recorded), using=alias)


def _tell(outcomes: Sequence[Outcome], recorded: Recorded) -> None:
    for listener in list(_listeners):
        try:
            listener(outcomes, recorded)
        except Exception:
            logger.exception("stats listener %r failed", listener)


def forget_old(alias: str, now: datetime | None = None) -> int:
    """Delete counter rows older than ``KEEP`` (at most once a minute per process); return how
    many were deleted."""
    at = time.monotonic()
    if now is None and at - _last_forget.get(alias, -_FORGET_EVERY) < _FORGET_EVERY:
        return 0
    _last_forget[alias] = at
    cutoff = (now - KEEP) if now is not None else Now() - KEEP
    deleted, _ = StatsCounter.objects.using(alias).filter(minute__lt=cutoff).delete()
    return deleted
