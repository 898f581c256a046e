"""``JobContext``: what a task that declares ``context`` as its first parameter receives."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from .exceptions import JobCancelled
from .payload import storable_text

if TYPE_CHECKING:
    from .db import ClaimedJob, Driver


_event_lock = threading.Lock()


class JobContext:
    """The running job, its attempt, progress reporting and cooperative cancellation.

    >>> @task
    ... def import_rows(context, path):
    ...     rows = load(path)
    ...     for n, row in enumerate(rows, 1):
    ...         context.raise_if_cancelled()
    ...         save(row)
    ...         context.set_progress(n, len(rows), "importing")
    """

    def __init__(
        self,
        job: ClaimedJob,
        *,
        owner: str,
        driver: Driver,
        on_progress: Callable[[JobContext], None] | None = None,
    ) -> None:
        self.job = job
        self.owner = owner
        self._driver = driver
        self._on_progress = on_progress
        self.progress: tuple[int, int | None, str] | None = None
        self._cancelled: threading.Event | None = None
        self.cancel_requested = False
        self.lease_lost = False
        self.timed_out = False
        self.finished = False

    @property
    def cancelled(self) -> threading.Event:
        """Set when cancellation was requested, the timeout passed, the lease was lost or the
        worker is shutting down past its grace period."""
        # Made on first use: most jobs never look at it, and an Event is not free per job.
        if self._cancelled is None:
            with _event_lock:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
        return self._cancelled

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def job_id(self) -> int:
        return self.job.id

    def set_progress(self, current: int, total: int | None = None, message: str = "") -> bool:
        """Report progress; returns False once this worker has lost the job's lease.

        Inside a worker the value is handed to the worker's control thread, which writes the
        latest value of every job at its next pass (promptly: the call wakes it). The task's
        own connection and transaction are never used, so an ``atomic=True`` body may report
        progress too, and a burst of calls costs one write.
        """
        self.progress = (
            int(current),
            None if total is None else int(total),
            storable_text(str(message)[:500]),
        )
        if self._on_progress is None:  # run outside a worker (tests, tools): write now
            return self.write_progress()
        self._on_progress(self)
        return not self.lease_lost

    def write_progress(self) -> bool:
        """Write the latest reported progress (fenced by lease owner and attempt)."""
        if self.progress is None:
            return True
        current, total, message = self.progress
        return self._driver.set_progress(
            self.owner, self.job.id, self.job.attempt, current, total, message
        )

    def raise_if_cancelled(self) -> None:
        """Raise ``JobCancelled`` if the job should stop now."""
        if self.cancelled.is_set():
            raise JobCancelled(self._why())

    def _why(self) -> str:
        if self.lease_lost:
            return "this worker lost the job's lease"
        if self.timed_out:
            return "the task ran past its timeout"
        if self.cancel_requested:
            return "cancellation was requested"
        return "the worker is shutting down"
