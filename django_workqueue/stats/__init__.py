"""Queue and task statistics as data: ``snapshot()``.

What is waiting comes from the jobs table through the ``wq_job_active`` index alone, which holds
unfinished rows only (``Driver.active_counts``: an index-only scan on PostgreSQL, a covering
index on SQLite, however many finished rows the table keeps). What
finished comes from the rolling counters (``StatsCounter``) that each completion batch adds to
in its own transaction. Nothing here scans the jobs table.

>>> from django_workqueue import stats
>>> snap = stats.snapshot()
>>> q = snap.queue("default")
>>> q.backlog, q.oldest_ready_age, q.window(5).throughput, q.window(5).run_p95
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping
from datetime import datetime, timedelta

from django.db.models import Sum

from ..conf import workqueue_settings as conf
from ..db import driver_for
from ..models import StatsCounter
from ..states import ACTIVE
from . import histogram
from .counters import ENDINGS

_ACTIVE = [str(status.value) for status in sorted(ACTIVE)]

WINDOWS = (1, 5, 15)
"""The windows every ``Stats`` holds, in minutes."""

# (queue, task) -> name -> bucket -> count, per minute
_Counts = dict[tuple[str, str], dict[str, collections.Counter[int]]]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    """What finished in the last ``minutes`` minutes (more precisely: since the start of the
    minute ``minutes`` minutes before the database's clock's current one; ``seconds`` says
    how long that is, and rates are per second of it)."""

    minutes: int
    seconds: float
    succeeded: int
    failed: int
    """Dead-lettered: attempts that ended the job ``failed``."""
    cancelled: int
    retried: int
    """Failed attempts that will be tried again (retries and expired leases)."""
    throughput: float
    """Jobs finished (succeeded, failed or cancelled) per second."""
    failure_rate: float | None
    """Failed attempts (retried or dead-lettered) per attempt that ended; None if none did."""
    wait_p50: float | None
    """Seconds from when a job was due (``run_after``) to its attempt's start: median."""
    wait_p95: float | None
    run_p50: float | None
    """Seconds an attempt ran: median."""
    run_p95: float | None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Stats:
    """One queue's statistics (``task_name`` None), or one task's in one queue."""

    queue: str
    task_name: str | None
    counts: Mapping[str, int]
    """Unfinished jobs by status (blocked, scheduled, ready, held, waiting, running; 0 when
    none)."""
    backlog: int
    """Jobs ready and due: what workers would take now."""
    oldest_ready_age: float | None
    """Seconds since the longest-waiting ready job became due; None when none is ready."""
    windows: tuple[Window, ...]
    """One per ``WINDOWS`` entry, shortest first."""

    def window(self, minutes: int) -> Window:
        for window in self.windows:
            if window.minutes == minutes:
                return window
        raise KeyError(f"no {minutes}-minute window; the windows are {WINDOWS}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    taken_at: datetime
    """The database's clock when the snapshot was taken."""
    queues: tuple[Stats, ...]
    tasks: tuple[Stats, ...]

    def queue(self, name: str) -> Stats | None:
        return next((s for s in self.queues if s.queue == name), None)

    def task(self, name: str, queue: str | None = None) -> Stats | None:
        return next(
            (s for s in self.tasks if s.task_name == name and queue in (None, s.queue)), None
        )


def snapshot(*, alias: str | None = None) -> Snapshot:
    """Every queue's and task's statistics now, as data (three queries, none scanning the
    jobs table). Queues in ``WORKQUEUE["QUEUES"]`` are always listed; tasks once they have
    unfinished jobs or finished some within 15 minutes."""
    alias = alias or conf.DATABASE
    now = driver_for(alias).now()
    active = _active(alias, now)
    counters = _counters(alias, now)
    keys = sorted(active.keys() | {key for _, per_key in counters for key in per_key})
    tasks = tuple(_stats(queue, task, active, counters, now) for queue, task in keys)
    queue_names = sorted(set(conf.QUEUES) | {queue for queue, _ in keys})
    queues = tuple(_stats(name, None, active, counters, now) for name in queue_names)
    return Snapshot(taken_at=now, queues=queues, tasks=tasks)


_Active = dict[tuple[str, str], tuple[dict[str, int], int, datetime | None]]


def _active(alias: str, now: datetime) -> _Active:
    """(queue, task) -> (counts by status, ready-and-due count, oldest due run_after)."""
    found: _Active = {}
    for row in driver_for(alias).active_counts(now):
        counts, backlog, first = found.get((row.queue, row.task_name), ({}, 0, None))
        counts[row.status] = row.count
        oldest = row.oldest_due
        if oldest is not None and (first is None or oldest < first):
            first = oldest
        found[(row.queue, row.task_name)] = (counts, backlog + row.due, first)
    return found


def _counters(alias: str, now: datetime) -> list[tuple[datetime, _Counts]]:
    """Per minute of the last ``max(WINDOWS)`` (and the current one), the counters summed
    over their shards."""
    start = _minute(now) - timedelta(minutes=max(WINDOWS))
    rows = (
        StatsCounter.objects.using(alias)
        .filter(minute__gte=start)
        .order_by()
        .values_list("minute", "queue", "task_name", "name", "bucket")
        .annotate(n=Sum("count"))
    )
    minutes: dict[datetime, _Counts] = collections.defaultdict(dict)
    for minute, queue, task, name, klass, n in rows:
        per_name = minutes[minute].setdefault((queue, task), {})
        per_name.setdefault(name, collections.Counter())[klass] += n
    return sorted(minutes.items())


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _stats(
    queue: str,
    task: str | None,
    active: _Active,
    counters: list[tuple[datetime, _Counts]],
    now: datetime,
) -> Stats:
    keys = [k for k in active.keys() | _counter_keys(counters) if k[0] == queue]
    if task is not None:
        keys = [k for k in keys if k[1] == task]
    counts = dict.fromkeys(_ACTIVE, 0)
    backlog, oldest = 0, None
    for key in keys:
        by_status, due, first = active.get(key, ({}, 0, None))
        for status, n in by_status.items():
            counts[status] += n
        backlog += due
        if first is not None and (oldest is None or first < oldest):
            oldest = first
    windows = tuple(_window(minutes, keys, counters, now) for minutes in WINDOWS)
    return Stats(
        queue=queue, task_name=task, counts=counts, backlog=backlog,
        oldest_ready_age=None if oldest is None else max(0.0, (now - oldest).total_seconds()),
        windows=windows,
    )  # fmt: skip


def _counter_keys(counters: list[tuple[datetime, _Counts]]) -> set[tuple[str, str]]:
    return {key for _, per_key in counters for key in per_key}


def _window(
    minutes: int,
    keys: list[tuple[str, str]],
    counters: list[tuple[datetime, _Counts]],
    now: datetime,
) -> Window:
    start = _minute(now) - timedelta(minutes=minutes)
    summed: dict[str, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for minute, per_key in counters:
        if minute < start:
            continue
        for key in keys:
            for name, klasses in per_key.get(key, {}).items():
                summed[name].update(klasses)
    ends = {name: sum(summed[name].values()) for name in ENDINGS}
    seconds = max(1.0, (now - start).total_seconds())
    finished = ends["succeeded"] + ends["failed"] + ends["cancelled"]
    attempts = ends["succeeded"] + ends["failed"] + ends["retried"]
    return Window(
        minutes=minutes, seconds=seconds, **ends, throughput=finished / seconds,
        failure_rate=(ends["failed"] + ends["retried"]) / attempts if attempts else None,
        wait_p50=histogram.percentile(summed["wait"], 0.5),
        wait_p95=histogram.percentile(summed["wait"], 0.95),
        run_p50=histogram.percentile(summed["run"], 0.5),
        run_p95=histogram.percentile(summed["run"], 0.95),
    )  # fmt: skip
