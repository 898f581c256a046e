"""When a job's progress report may be written: at most once per
``WORKQUEUE["PROGRESS_INTERVAL"]`` seconds per job.

One decision for every place that runs jobs (the worker's completer, the skip-queue): a job
never written yet may be written at once; after a write, the next waits out the interval. The
caller keeps the latest report and writes it when its turn comes, or with the outcome. Not
thread-safe: the caller holds its own lock where it needs one.
"""

from __future__ import annotations

import math
import time
from collections.abc import Container, Iterable

from ..conf import workqueue_settings as conf


class ProgressThrottle:
    def __init__(self) -> None:
        self._written_at: dict[int, float] = {}  # job id -> monotonic time of the last write

    def __bool__(self) -> bool:
        """Whether any job's report is throttled (written, its job not ended or expired)."""
        return bool(self._written_at)

    def due(self, job_id: int, now: float | None = None) -> bool:
        """Whether a report of ``job_id`` may be written at ``now`` (monotonic)."""
        written_at = self._written_at.get(job_id)
        if written_at is None:
            return True
        return (time.monotonic() if now is None else now) - written_at >= interval()

    def due_at(self, job_ids: Iterable[int]) -> float:
        """When (monotonic) the first report of ``job_ids`` may be written, or inf if none."""
        waiting = [self._written_at.get(job_id, -math.inf) for job_id in job_ids]
        return min(waiting) + interval() if waiting else math.inf

    def written(self, job_ids: Iterable[int], now: float) -> None:
        """Reports of ``job_ids`` were written (or tried) at ``now``: their interval starts."""
        for job_id in job_ids:
            self._written_at[job_id] = now

    def forget(self, job_id: int) -> None:
        """The job ended: nothing of it is throttled any more."""
        self._written_at.pop(job_id, None)

    def expire(self, now: float, waiting: Container[int]) -> None:
        """Drop the jobs whose interval is over and that have no report ``waiting``."""
        limit = interval()
        for job_id, at in list(self._written_at.items()):
            if now - at >= limit and job_id not in waiting:
                del self._written_at[job_id]


def interval() -> float:
    """``WORKQUEUE["PROGRESS_INTERVAL"]``, in seconds."""
    return float(conf.PROGRESS_INTERVAL)
