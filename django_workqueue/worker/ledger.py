"""The worker's ledger: the jobs this worker holds a lease on, and what it did with them.

A job is in the ledger from its claim until its outcome is written (or its lease is lost, or
it is released): running in a slot, waiting in the claim-ahead buffer (``ahead.py``), or
finished with its outcome not yet recorded. ``executing`` counts the bodies handed to slots
that have not returned (a batch counts once: it takes one slot). The heartbeat renews the
leases of the ledger's jobs, and the reaper of this worker spares them.

One lock guards it all; the slots and the control thread take it. Methods marked "under the
lock" are called with ``lock`` held, so that a caller can do more in the same step (a slot
hands its outcome to the completer under it: ``Shutdown.release_remaining``'s snapshot then
sees every finish).
"""

from __future__ import annotations

import threading
from collections.abc import Collection

from ..attempt.lease import RunningJob
from ..context import AbortReason
from ..db import Outcome


class Ledger:
    """The jobs this worker holds (thread-safe through ``lock``) and its counts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[int, RunningJob] = {}
        """Leased by this worker: executing, buffered, or being recorded."""
        self.executing = 0
        """Jobs (a batch counts once) handed to slots whose body has not returned yet."""
        self.claimed_count = 0
        self.finished_count = 0

    # --- under the lock -----------------------------------------------------------------------

    def lease(self, job_id: int, item: RunningJob) -> RunningJob:
        """Hold ``item`` as job ``job_id``'s entry (under the lock). A stale entry (reaped,
        then claimed again while its body runs here) is told its lease was lost."""
        stale = self.running.get(job_id)
        if stale is not None:
            stale.context.abort(AbortReason.LEASE_LOST)
        self.running[job_id] = item
        return item

    def forget(self, job_id: int, item: RunningJob) -> None:
        """Drop ``item`` (under the lock), unless a later attempt's entry replaced it."""
        if self.running.get(job_id) is item:
            del self.running[job_id]

    def end(self, job_id: int, item: RunningJob) -> None:
        """``item`` is done with nothing left to record (under the lock): forget it, count it."""
        self.forget(job_id, item)
        self.finished_count += 1

    def still_running(self, finishing: Collection[tuple[int, int]]) -> int:
        """Jobs held, less those whose ``(id, attempt)`` is in ``finishing`` (under the lock)."""
        if not finishing:
            return len(self.running)
        return sum(
            1
            for job_id, item in self.running.items()
            if (job_id, item.context.attempt) not in finishing
        )

    # --- taking the lock ----------------------------------------------------------------------

    def forget_done(self, done: list[Outcome]) -> None:
        """The outcomes ``done`` were dealt with: forget their jobs' entries (not those of a
        later attempt) and count each as finished."""
        with self.lock:
            for outcome in done:
                item = self.running.get(outcome.job_id)
                if item is not None and item.context.attempt == outcome.attempt:
                    del self.running[outcome.job_id]
                self.finished_count += 1

    def snapshot(self) -> dict[int, RunningJob]:
        """A copy of the jobs held now."""
        with self.lock:
            return dict(self.running)

    def ids(self) -> set[int]:
        """The ids of the jobs held now."""
        with self.lock:
            return set(self.running)

    def get(self, job_id: int) -> RunningJob | None:
        with self.lock:
            return self.running.get(job_id)

    def __len__(self) -> int:
        with self.lock:
            return len(self.running)

    def busy(self) -> int:
        """How many slots run a body now."""
        with self.lock:
            return self.executing
