"""The worker's batch step: a claimed batch takes one slot and is run there as one call.

``flow.batches`` claims a batch task's jobs together; here the batch is leased into the
worker like any job (each job its own lease, heartbeat, cancellation and timeout clock, so the
heartbeat renews every member) and handed to a slot, which runs it with the attempt runner
(``attempt.batch.run_batch``: one call, one outcome per job).
"""

from __future__ import annotations

import functools
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..attempt.batch import Batch, BatchResultMismatch, run_batch
from ..attempt.connections import close_unusable_connections, tidy_connections
from ..attempt.lease import LeaseKeeper, RunningJob
from ..context import JobContext
from ..db import ClaimedJob, Driver, Outcome
from ..flow.batches import batch_groups, claim_batches

if TYPE_CHECKING:
    from ..attempt.asyncloop import AsyncLoop
    from .completer import Completer
    from .ledger import Ledger

__all__ = ["Batch", "BatchResultMismatch", "Batches"]

logger = logging.getLogger("django_workqueue.worker")


class Batches:
    """The worker's batch step: claims whole batches into free slots and runs them there.

    It leases their jobs into the worker's ``ledger`` (renewed by ``leases``), hands each
    batch to the slots through ``inbox`` once its claim is kept (``when_committed``), and,
    in a slot, hands the outcomes to the ``completer`` and sets ``wake``. ``generation``
    reads the control connection's generation, ``event_loop`` gives the async tasks' loop.
    """

    def __init__(
        self,
        driver: Driver,
        owner: str,
        queues: Sequence[str],
        *,
        ledger: Ledger,
        inbox: queue.SimpleQueue[Any],
        leases: LeaseKeeper,
        completer: Completer,
        wake: threading.Event,
        when_committed: Callable[[Callable[[], None]], None],
        generation: Callable[[], int],
        event_loop: Callable[[], AsyncLoop],
    ) -> None:
        self.driver, self.owner, self.queues = driver, owner, queues
        self.ledger, self.inbox, self.leases = ledger, inbox, leases
        self.completer, self.wake = completer, wake
        self.when_committed, self.generation, self.event_loop = (
            when_committed, generation, event_loop,
        )  # fmt: skip
        self.claimed = 0
        """Batches claimed by the last ``fill``."""
        self.due_at = math.inf
        """When (monotonic) a filling batch becomes due, as the last ``fill`` found."""

    # --- the control thread -------------------------------------------------------------------

    def fill(self, slots: int) -> int:
        """Claim up to ``slots`` batches and hand each to the slots as one item; return how
        many (each takes one slot)."""
        self.claimed = 0
        found = claim_batches(self.driver, self.queues, slots, self.owner)
        now = time.monotonic()
        self.due_at = math.inf if found.due_in is None else now + found.due_in
        if not found.batches:
            return 0
        self.claimed = len(found.batches)
        # Inside a pass's transaction, the batches start once it is over; otherwise at once.
        self.when_committed(functools.partial(self._start, found.batches, now))
        return self.claimed

    def _start(self, found: list[tuple[Any, list[ClaimedJob]]], now: float) -> None:
        ledger = self.ledger
        batches = []
        with ledger.lock:
            for task, jobs in found:
                members = []
                for job in jobs:
                    context = JobContext(job, owner=self.owner, driver=self.driver)
                    item = RunningJob(
                        context, started=now, timeout=task.spec.timeout,
                        is_async=task.spec.is_async,
                    )  # fmt: skip
                    members.append((job, ledger.lease(job.id, item)))
                ledger.executing += 1  # one slot per batch
                ledger.claimed_count += len(jobs)
                batches.append(Batch(task, members))
            self.leases.schedule(ledger.running, now)
        for batch in batches:
            self.inbox.put(batch)

    @property
    def served(self) -> bool:
        """Whether this worker claims batches: a batch task of its queues is registered."""
        return bool(batch_groups(self.queues))

    @property
    def idle(self) -> bool:
        """Whether the last ``fill`` claimed nothing and left no batch filling (burst: done)."""
        return self.claimed == 0 and self.due_at == math.inf

    def wake_at(self) -> float:
        """When the control loop must wake to claim a filling batch (monotonic). A time that
        has passed without a claim means the slots were full: a slot coming free wakes it."""
        return self.due_at if self.due_at > time.monotonic() else math.inf

    # --- a slot -------------------------------------------------------------------------------

    def serve(self, batch: Batch, generation: int) -> int:
        """Run ``batch`` in this slot and hand its outcomes over; return the slot's connection
        generation (as ``Worker._slot`` keeps it)."""
        outcomes: dict[int, Outcome] = {}
        try:
            if generation != self.generation():  # the database restarted or dropped us
                generation = self.generation()
                close_unusable_connections()
            loop = self.event_loop() if batch.task.spec.is_async else None
            outcomes = run_batch(batch, self.driver, loop)
            for written in outcomes.values():
                written.encoded()  # here, not on the control thread that batches them
        except Exception:
            ids = [job.id for job, _ in batch.members]
            logger.exception("jobs %s: the worker failed to run their batch", ids)
        finally:
            try:
                tidy_connections(self.driver.alias)
            except Exception:
                logger.exception("batch of %s: could not tidy the slot's connections",
                                 batch.task.spec.name)  # fmt: skip
            with self.ledger.lock:
                self.ledger.executing -= 1
                for job, item in batch.members:
                    ended = outcomes.get(job.id)
                    if ended is not None:
                        item.context.finished = True
                        self.completer.hand_over(ended, item.started)
                    else:  # nothing to write: the lease runs out and the reaper retries it
                        self.ledger.end(job.id, item)
            self.wake.set()
        return generation
