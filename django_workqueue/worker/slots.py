"""Slots: the threads that run jobs, how many there are, and how claims are shared among them.

A worker has one pool of slot threads fed by one inbox. Three ways to size it:

- a fixed number (``--concurrency 8``): every served queue shares the slots;
- a budget per queue (``--queues default:8,mail:2``): the pool has the sum of the
  budgets, and the claims for a queue never exceed that queue's free slots, so a flood of one
  queue cannot take the slots of another;
- a floor and a ceiling (``--concurrency 2-32``): the ``Autoscaler`` moves the pool between them.

Each slot thread holds one database connection, so the pool's size is the worker's connection
budget minus two (the control connection and, on PostgreSQL, the listener).

Shrinking never interrupts a job: the pool puts a ``None`` in the inbox for each slot too many,
and the slot thread that takes one exits after its current job. A ``None`` taken once the pool
has grown again (the slot is wanted after all) is ignored.
"""

from __future__ import annotations

import collections
import logging
import queue as queue_module
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..conf import workqueue_settings as conf

logger = logging.getLogger("django_workqueue.worker")

MAX_SLOTS = 512
"""The most slots one worker may have. Each slot is a thread with a database connection; past a
few dozen, more processes serve better than more threads under one interpreter lock."""


class SlotPool:
    """The slot threads of one worker and what they are busy with (per queue, if budgeted).

    Counts change under the worker's lock; threads are started and retired by the control thread.
    """

    def __init__(
        self,
        target: Callable[[], None],
        inbox: queue_module.SimpleQueue[Any],
        size: int,
        queue_slots: Mapping[str, int] | None = None,
        autoscaler: Autoscaler | None = None,
    ) -> None:
        self._target = target
        self._inbox = inbox
        self.size = size
        self.queue_slots = dict(queue_slots or {})
        self.autoscaler = autoscaler
        self.busy_by_queue: collections.Counter[str] = collections.Counter()
        self.threads: list[threading.Thread] = []  # every slot thread started, for joining
        self._alive = 0
        self._count_lock = threading.Lock()
        self._started = 0

    @classmethod
    def build(
        cls,
        target: Callable[[], None],
        inbox: queue_module.SimpleQueue[Any],
        concurrency: int,
        *,
        max_concurrency: int | None = None,
        queue_slots: Mapping[str, int] | None = None,
    ) -> SlotPool:
        """A fixed pool of ``concurrency`` slots, one autoscaling up to ``max_concurrency``, or
        one with a budget per queue (``queue_slots``)."""
        if queue_slots and max_concurrency:
            raise ValueError("per-queue slots do not autoscale: give one of the two")
        if queue_slots:
            return cls(target, inbox, sum(queue_slots.values()), queue_slots)
        autoscaler = None
        if max_concurrency is not None:
            if not 1 <= concurrency <= max_concurrency:
                raise ValueError(f"slots autoscale from 1 up: {concurrency}-{max_concurrency}")
            idle = float(conf.AUTOSCALE_IDLE_SECONDS)
            autoscaler = Autoscaler(floor=concurrency, ceiling=max_concurrency, idle_seconds=idle)
        return cls(target, inbox, concurrency, autoscaler=autoscaler)

    def start(self) -> None:
        self._spawn(self.size)

    def wanted(
        self, requested: int | None, *, now: float, busy: int, free: int, claimed: int
    ) -> int:
        """The slots to have after a pass: those ``scale_worker`` asked for (within the
        autoscaling range; per-queue budgets ignore requests), or the autoscaler's choice."""
        if requested is not None and not self.queue_slots:
            wanted = self.autoscaler.clamp(requested) if self.autoscaler else requested
            return max(1, min(wanted, MAX_SLOTS))
        if self.autoscaler is not None:
            return self.autoscaler.after_pass(
                now=now, slots=self.size, busy=busy, free=free, claimed=claimed
            )
        return self.size

    def rescale(
        self, requested: int | None, *, busy: int, free: int, claimed: int, owner: str
    ) -> int:
        """After a pass: apply a ``scale_worker`` request or the autoscaler's choice (``wanted``),
        given ``busy`` slots and the pass's claim of ``claimed`` jobs for ``free`` slots; return
        the pool's size."""
        now = time.monotonic()
        slots = self.wanted(requested, now=now, busy=busy, free=free, claimed=claimed)
        if slots != self.size:
            logger.info("worker %s: %s -> %s slots", owner, self.size, slots)
            self.resize(slots, now=now, busy=busy)
        return slots

    def resize(self, size: int, *, now: float, busy: int) -> None:
        """Grow by starting slot threads, shrink by retiring them after their current job."""
        if self.autoscaler is not None:
            self.autoscaler.restart(now, busy)
        with self._count_lock:
            self.size = size
            missing = size - self._alive
        if missing > 0:
            self._spawn(missing)
        else:
            for _ in range(-missing):
                self._inbox.put(None)

    def stop(self) -> None:
        """Retire every slot thread (each after its current job)."""
        with self._count_lock:
            self.size = 0
            alive = self._alive
        for _ in range(alive):
            self._inbox.put(None)

    def retire(self) -> bool:
        """Called by a slot thread that took a ``None``: whether it is to exit (the pool is
        bigger than wanted); if not, the ``None`` was meant for a slot a later grow kept."""
        with self._count_lock:
            if self._alive > self.size:
                self._alive -= 1
                return True
            return False

    def began(self, queue: str) -> None:
        """A job of ``queue`` was handed to a slot (under the worker's lock)."""
        if self.queue_slots:
            self.busy_by_queue[queue] += 1

    def ended(self, queue: str) -> None:
        """A slot finished a job of ``queue`` (under the worker's lock)."""
        if self.queue_slots:
            self.busy_by_queue[queue] -= 1

    def claims(self, queues: Sequence[str], free: int) -> list[tuple[list[str], int]]:
        """(queues, limit) of each claim to make for ``free`` slots (under the worker's lock):
        one claim of every served queue for a shared pool; with per-queue budgets, one claim
        per queue with free slots, never more than its free slots."""
        if not self.queue_slots:
            return [(list(queues), free)] if free > 0 else []
        plan = []
        for queue, slots in self.queue_slots.items():
            limit = min(free, slots - self.busy_by_queue[queue])
            if limit > 0:
                plan.append(([queue], limit))
                free -= limit
        return plan

    def _spawn(self, count: int) -> None:
        self.threads[:] = [thread for thread in self.threads if thread.is_alive()]
        for _ in range(count):
            thread = threading.Thread(
                target=self._target, name=f"workqueue-slot-{self._started}", daemon=True
            )
            self._started += 1
            with self._count_lock:
                self._alive += 1
            thread.start()
            self.threads.append(thread)


@dataclass(slots=True)
class Autoscaler:
    """Moves a worker's slots between ``floor`` and ``ceiling``.

    - **Grow** after a pass whose claim filled every free slot (ready jobs may well be waiting):
      by as many slots as that claim took, so a backlog at most doubles the pool per pass.
    - **Shrink** once ``idle_seconds`` have passed since the last change: down to the most slots
      that were busy at once in that time (never below the floor). A worker that ran nothing
      for ``idle_seconds`` is back at its floor.
    - Never past the ceiling. Jobs held back by a limit or a backpressure pause are not
      claimed, so they never make the pool grow.

    >>> scaler = Autoscaler(floor=2, ceiling=32, idle_seconds=30.0)
    >>> scaler.after_pass(now=0.0, slots=2, busy=2, free=2, claimed=2)
    4
    """

    floor: int
    ceiling: int
    idle_seconds: float
    _window_start: float | None = None
    _peak_busy: int = 0

    def after_pass(self, *, now: float, slots: int, busy: int, free: int, claimed: int) -> int:
        """The slots wanted after a pass that claimed ``claimed`` jobs for ``free`` free slots
        and left ``busy`` of ``slots`` busy."""
        if self._window_start is None:
            self.restart(now, busy)
        # Busy right after the claim, before fast jobs could finish: the peak of this pass.
        busy_after_claim = slots - free + claimed if claimed else 0
        self._peak_busy = max(self._peak_busy, busy, busy_after_claim)
        if claimed and claimed >= free and slots < self.ceiling:
            self.restart(now, busy)
            return min(self.ceiling, slots + claimed)
        assert self._window_start is not None
        if now - self._window_start >= self.idle_seconds:
            wanted = max(self.floor, self._peak_busy)
            self.restart(now, busy)
            return min(slots, wanted)
        return slots

    def restart(self, now: float, busy: int) -> None:
        """Start a new observation window (after any change of size)."""
        self._window_start = now
        self._peak_busy = busy

    def clamp(self, slots: int) -> int:
        return max(self.floor, min(self.ceiling, slots))
