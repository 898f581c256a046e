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
import time
from typing import TYPE_CHECKING, Any

from ..attempt.batch import Batch, BatchResultMismatch, run_batch
from ..attempt.connections import close_unusable_connections, tidy_connections
from ..attempt.lease import RunningJob
from ..context import AbortReason, JobContext
from ..db import ClaimedJob, Outcome
from ..flow.batches import claim_batches

if TYPE_CHECKING:
    from .runner import Worker

__all__ = ["Batch", "BatchResultMismatch", "Batches"]

logger = logging.getLogger("django_workqueue.worker")


class Batches:
    """The worker's batch step: claims whole batches into free slots and runs them there."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.claimed = 0
        """Batches claimed by the last ``fill``."""
        self.due_at = math.inf
        """When (monotonic) a filling batch becomes due, as the last ``fill`` found."""

    # --- the control thread -------------------------------------------------------------------

    def fill(self, slots: int) -> int:
        """Claim up to ``slots`` batches and hand each to the slots as one item; return how
        many (each takes one slot)."""
        worker = self.worker
        self.claimed = 0
        found = claim_batches(worker.driver, worker.queues, slots, worker.id)
        now = time.monotonic()
        self.due_at = math.inf if found.due_in is None else now + found.due_in
        if not found.batches:
            return 0
        self.claimed = len(found.batches)
        # Inside a pass's transaction, the batches start once it is over; otherwise at once.
        worker._when_committed(functools.partial(self._start, found.batches, now))
        return self.claimed

    def _start(self, found: list[tuple[Any, list[ClaimedJob]]], now: float) -> None:
        worker = self.worker
        batches = []
        with worker._lock:
            for task, jobs in found:
                members = []
                for job in jobs:
                    context = JobContext(
                        job, owner=worker.id, driver=worker.driver, on_progress=None
                    )
                    stale = worker._running.get(job.id)
                    if stale is not None:  # reaped, then claimed again while its body runs
                        stale.context.abort(AbortReason.LEASE_LOST)
                    item = RunningJob(
                        context, started=now, timeout=task.spec.timeout,
                        is_async=task.spec.is_async,
                    )  # fmt: skip
                    worker._running[job.id] = item
                    members.append((job, item))
                worker._executing += 1  # one slot per batch
                worker.ledger.claimed_count += len(jobs)
                batches.append(Batch(task, members))
            worker.leases.schedule(worker._running, now)
        for batch in batches:
            worker._inbox.put(batch)

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
        worker = self.worker
        outcomes: dict[int, Outcome] = {}
        try:
            if generation != worker._db_generation:  # the database restarted or dropped us
                generation = worker._db_generation
                close_unusable_connections()
            if batch.task.spec.is_async:
                worker._ensure_loop()
            outcomes = run_batch(batch, worker.driver, worker._loop)
            for written in outcomes.values():
                written.encoded()  # here, not on the control thread that batches them
        except Exception:
            ids = [job.id for job, _ in batch.members]
            logger.exception("jobs %s: the worker failed to run their batch", ids)
        finally:
            try:
                tidy_connections()
            except Exception:
                logger.exception("batch of %s: could not tidy the slot's connections",
                                 batch.task.spec.name)  # fmt: skip
            with worker._lock:
                worker._executing -= 1
                for job, item in batch.members:
                    ended = outcomes.get(job.id)
                    if ended is not None:
                        item.context.finished = True
                        worker.completer.hand_over(ended, item.started)
                    else:  # nothing to write: the lease runs out and the reaper retries it
                        if worker._running.get(job.id) is item:
                            del worker._running[job.id]
                        worker.ledger.finished_count += 1
            worker.wake.set()
        return generation
