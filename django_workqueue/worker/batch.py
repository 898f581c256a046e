"""Running batch tasks: a claimed batch takes one slot and calls the function once.

``flow.batches`` claims a batch task's jobs together; here the batch is leased into the
worker like any job (each job its own lease, heartbeat, cancellation and timeout clock, so the
heartbeat renews every member) and run in one slot as ``func([item0, item1, ...])``, the
items in claim order. Each job then gets its own outcome, classified exactly as a single job's
(``execution``): job ``i`` succeeds with ``results[i]``; an exception the call raised is each
job's failed attempt under its own retry policy (``Retry``, ``Snooze``, ``Discard`` apply to
every item); a return value that is not one result per item fails every item at once.

A member whose cancellation was requested while the call ran ends ``cancelled``, its result
dropped; the others keep theirs. A member this worker lost (reaped, finished elsewhere) is
fenced out when its outcome is written, like any job's late outcome.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import TYPE_CHECKING, Any, cast

from .. import signalling, signals
from ..context import AbortReason, JobContext
from ..db import ClaimedJob, Driver, Outcome
from ..exceptions import (
    DeadlineExceeded,
    JobCancelled,
    JobTimeout,
    MalformedArguments,
    ResultNotJSON,
    WorkqueueError,
)
from ..flow.batches import claim_batches
from ..outcomes import OutcomeKind
from ..payload import describe
from ..workflow.store import first_argument
from .asyncloop import AsyncLoop
from .connections import close_unusable_connections, tidy_connections
from .execution import _classified, _malformed_arguments, _not_run, _success
from .lease import RunningJob

if TYPE_CHECKING:
    from ..decorator import Task
    from .runner import Worker

logger = logging.getLogger("django_workqueue.worker")


class BatchResultMismatch(WorkqueueError):
    """A batch task returned something other than one result per item."""


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """A claimed batch as the slot inbox carries it: its task and its leased jobs."""

    task: Task[..., Any]
    members: list[tuple[ClaimedJob, RunningJob]]


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
        batches = []
        with worker._lock:
            for task, jobs in found.batches:
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
                worker.claimed_count += len(jobs)
                batches.append(Batch(task, members))
            worker.leases.schedule(worker._running, now)
        for batch in batches:
            worker._inbox.put(batch)
        self.claimed = len(batches)
        return self.claimed

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
                        worker.completer.hand_over(ended)
                    else:  # nothing to write: the lease runs out and the reaper retries it
                        if worker._running.get(job.id) is item:
                            del worker._running[job.id]
                        worker.finished_count += 1
            worker.wake.set()
        return generation


def run_batch(batch: Batch, driver: Driver, loop: AsyncLoop | None) -> dict[int, Outcome]:
    """Call the batch task once with its members' items; return each member's outcome."""
    task = batch.task
    if signals.job_started.receivers:
        for job, item in batch.members:
            signalling.started(job.id, job.task_name, job.queue, job.attempt, item.context.owner)
    outcomes: dict[int, Outcome] = {}
    calls: list[tuple[ClaimedJob, JobContext, Any]] = []
    for job, item in batch.members:
        refused = _refused(task, job)
        if refused is not None:
            outcomes[job.id] = refused
            continue
        try:
            value = _item(job, driver)
        except Exception as exc:
            outcomes[job.id] = _classified(task, job, item.context, exc)
            continue
        calls.append((job, item.context, value))
    if not calls:
        return outcomes
    contexts = [context for _, context, _ in calls]
    spec = task.spec
    started = time.monotonic()
    try:
        items = [value for _, _, value in calls]
        if spec.is_async:
            if loop is None:
                raise RuntimeError("no event loop for async tasks")  # the slot always has one
            signal = cast(JobContext, _StopSignal(contexts))
            results = loop.run(spec.func(items), signal, spec.timeout)
        else:
            results = spec.func(items)
            if spec.timeout and time.monotonic() - started > spec.timeout:
                # The function takes no context, so it cannot stop at its timeout: it is
                # enforced when it returns, and its late results are dropped.
                raise JobTimeout(f"{spec.name} ran past its timeout of {spec.timeout}s")
    except BaseException as exc:  # one failure of the call is every item's failed attempt
        for job, context, _ in calls:
            outcomes[job.id] = _classified(task, job, context, exc)
        return outcomes
    mismatch = _mismatch(spec.name, results, len(calls))
    for index, (job, context, _) in enumerate(calls):
        if mismatch is not None:  # a programming error: no retry returns another count
            outcomes[job.id] = _not_run(job, task, mismatch, OutcomeKind.DISCARD)
        elif context.cancel_requested:
            cancelled = JobCancelled("cancelled", reason=context.abort_reason)
            outcomes[job.id] = _classified(task, job, context, cancelled)
        else:
            try:
                outcomes[job.id] = _success(job, results[index])
            except ResultNotJSON as exc:
                outcomes[job.id] = _classified(task, job, context, exc)
    return outcomes


def _refused(task: Task[..., Any], job: ClaimedJob) -> Outcome | None:
    """The outcome of a member that cannot join the call (as a single job would be refused)."""
    if job.deadline_passed and job.deadline is not None:
        late = DeadlineExceeded(f"the deadline {job.deadline.isoformat()} passed before it ran")
        return _not_run(job, task, late, OutcomeKind.DISCARD)
    malformed = _malformed_arguments(job)
    if malformed is None and job.input_shape is None and (len(job.args) != 1 or job.kwargs):
        malformed = (
            f"a batch task's job carries one item (one positional argument), but the row holds "
            f"{len(job.args)} positional and {len(job.kwargs)} keyword argument(s) (it was not "
            f"written by enqueue); fix the row or cancel the job"
        )
    if malformed is not None:
        return _not_run(job, task, MalformedArguments(malformed), OutcomeKind.DISCARD)
    return None


def _item(job: ClaimedJob, driver: Driver) -> Any:
    """The job's item: its one argument, or as a workflow step the value it receives."""
    if job.input_shape is not None:
        return first_argument(driver.alias, job.id, job.input_shape)
    return job.args[0]


def _mismatch(name: str, results: Any, expected: int) -> BatchResultMismatch | None:
    if isinstance(results, list | tuple) and len(results) == expected:
        return None
    got = (
        f"a {type(results).__name__} of {len(results)}"
        if isinstance(results, list | tuple)
        else describe(results)
    )
    return BatchResultMismatch(
        f"{name} was called with {expected} item(s) and must return a list of {expected} "
        f"result(s), one per item in the same order; it returned {got}. Every item of the "
        f"batch failed without retry (fix the function, then redrive them)"
    )


class _StopSignal:
    """What the event loop watches to cancel a batch's call (the part of ``JobContext`` that
    ``AsyncLoop.run`` reads): set once every member must stop (a shutdown, a timeout, or each
    one cancelled). One member's cancellation alone does not stop the others' call."""

    def __init__(self, contexts: list[JobContext]) -> None:
        self._contexts = contexts

    @property
    def cancelled(self) -> _StopSignal:
        return self

    def is_set(self) -> bool:
        return all(context.abort_reason is not None for context in self._contexts)

    @property
    def abort_reason(self) -> AbortReason | None:
        return self._contexts[0].abort_reason

    def _why(self) -> str:
        return self._contexts[0]._why()
