"""The claim-ahead buffer: jobs claimed beyond a worker's free slots, so that a slot that
frees takes its next job at once instead of waiting for the control thread's next pass.

Which jobs, and how the database tells them apart (``Driver.claim(ahead=True)``): only plain
jobs (no flow control, no batch task) that were never claimed before, marked
``claimed_ahead``. Buffered jobs are leased like running ones (they are in the worker's
``_running``, renewed by the heartbeat). If the worker dies, the reaper gives a job still
marked back to ready uncharged (``budgets.py``: a claimed job that never began spends
nothing); any other job of the worker is a crash.

The window: a slot takes a buffered job and begins its body at once; the database learns
it began on the control thread's next pass (``Driver.began``, one statement for every job
taken since the last pass; a row another session holds is skipped and written on a later
pass). That pass comes soon, but a slot does not always wake the control thread for it: while
the buffer holds more than half its bound and the control thread sleeps at most
``planner.DEFERRED_PASS_SECONDS`` (it does so while slots take from the buffer), a slot
that ran a job and takes its next one from the buffer leaves the write to that pass; a take
that leaves the buffer at half its bound or less wakes it, to refill the buffer. Each wake-up
costs the woken thread and the one that wakes it CPU time (the interpreter lock changing
hands, often across cores), so a pass writes many takes and outcomes instead of one or two.
A worker that dies in between hands such a job back
uncharged although its body began. That happens to a job at most once: it is then no longer
a never-claimed job, so it is never claimed ahead again, and its next crash is charged — a
poison pill still ends in the dead-letter queue, one death later. Jobs the control thread
moves from the buffer to free slots are written as begun before a slot gets them.

The bound: at most ``ceil(CLAIM_AHEAD * slots)`` jobs wait here, and a pass claims ahead only
when there is more work than slots: its claim for the free slots came back full, or, with
every slot busy, its last claim ahead did. So a job enqueued into a quiet queue goes to a
worker with a free slot, not into the buffer of a busy one, and a slow worker holds at most
its bound of jobs the others could have run. At shutdown the buffer closes at once and its
jobs go back uncharged (``shutdown.py``).
"""

from __future__ import annotations

import collections
import math
import threading
from typing import TYPE_CHECKING

from ..conf import workqueue_settings as conf

if TYPE_CHECKING:
    from ..attempt.lease import RunningJob
    from ..db import ClaimedJob

    Handed = tuple[ClaimedJob, RunningJob]

#: The largest ``CLAIM_AHEAD``: more buffered jobs per slot would only hoard work.
MAX_PER_SLOT = 4


def claim_ahead_problem(value: object) -> str | None:
    """Why ``value`` is not a valid ``WORKQUEUE["CLAIM_AHEAD"]``, or None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        return f"must be a number of jobs per slot from 0 to {MAX_PER_SLOT}, got {value!r}"
    if not 0 <= value <= MAX_PER_SLOT:
        return f"must be from 0 (off) to {MAX_PER_SLOT} jobs per slot, got {value!r}"
    return None


class AheadBuffer:
    """Claimed jobs waiting for a slot (thread-safe). ``per_slot`` 0 turns it off."""

    def __init__(self, per_slot: float | None = None) -> None:
        value = conf.CLAIM_AHEAD if per_slot is None else per_slot
        problem = claim_ahead_problem(value)
        if problem:
            raise ValueError(f'WORKQUEUE["CLAIM_AHEAD"] {problem}')
        self.per_slot = float(value)
        self._jobs: collections.deque[Handed] = collections.deque()
        self._taken: list[tuple[int, int]] = []  # (id, attempt): began, not yet written
        self._lock = threading.Lock()
        self.closed = False
        self.total = 0
        """How many jobs were claimed ahead since the worker started."""

    @property
    def enabled(self) -> bool:
        return self.per_slot > 0

    def __len__(self) -> int:
        return len(self._jobs)

    def room(self, slots: int) -> int:
        """How many more jobs may be claimed ahead for a worker of ``slots`` slots."""
        return max(0, math.ceil(self.per_slot * slots) - len(self._jobs))

    def running_low(self, slots: int) -> bool:
        """Whether the buffer of a worker of ``slots`` slots is down to half its bound or
        less: time for a pass to refill it."""
        return len(self._jobs) <= math.ceil(self.per_slot * slots) // 2

    def put(self, handed: list[Handed]) -> None:
        with self._lock:
            self._jobs.extend(handed)
            self.total += len(handed)

    def take(self) -> Handed | None:
        """The next buffered job, for a slot that is free now; it counts as begun."""
        with self._lock:
            if self.closed or not self._jobs:
                return None
            handed = self._jobs.popleft()
            self._taken.append((handed[0].id, handed[0].attempt))
            return handed

    def has_taken(self) -> bool:
        """Whether slots took jobs not yet written as begun."""
        return bool(self._taken)

    def taken(self) -> list[tuple[int, int]]:
        """The jobs taken since the last call, for ``Driver.began``; ``put_back`` if that
        write fails."""
        with self._lock:
            taken, self._taken = self._taken, []
        return taken

    def put_back(self, handed: list[Handed], taken: list[tuple[int, int]]) -> None:
        """``taken`` was not written (the write failed, or skipped a row another session
        holds): ``handed`` wait in the buffer again, first, and the others (slots took them)
        are written by a later pass."""
        again = {(job.id, job.attempt) for job, _ in handed}
        with self._lock:
            self._jobs.extendleft(reversed(handed))
            self._taken[:0] = [lease for lease in taken if lease not in again]

    def close(self) -> list[Handed]:
        """No more takes (shutdown): return the jobs no slot took."""
        with self._lock:
            self.closed = True
            left = list(self._jobs)
            self._jobs.clear()
        return left
