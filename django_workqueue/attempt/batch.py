"""Running a batch task's claimed jobs: one call of its function, one outcome per job.

A claimed batch (``flow.batches``) is run in one slot as ``func([item0, item1, ...])``, the
items in claim order, each job keeping its own lease, heartbeat, cancellation and timeout
clock. Each job then gets its own outcome, classified exactly as a single job's
(``ending.py``): job ``i`` succeeds with ``results[i]``; whatever the call raised is each job's
failed attempt under its own retry policy (``Retry``, ``Snooze``, ``Discard`` apply to every
item; a ``SystemExit`` too); a return value that is not one result per item fails every item
at once.

A member whose cancellation was requested while the call ran ends ``cancelled``, its result
dropped; the others keep theirs. A member this worker lost (reaped, finished elsewhere) is
fenced out when its outcome is written, like any job's late outcome.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, cast

from .. import signalling, signals
from ..context import AbortReason, JobContext
from ..db import ClaimedJob, Driver
from ..exceptions import JobCancelled, JobTimeout, MalformedArguments, ResultNotJSON, WorkqueueError
from ..outcomes import Outcome, OutcomeKind
from ..payload import describe
from ..registry import TaskSpec
from ..workflow.store import first_argument
from . import ending, interrupts
from .asyncloop import AsyncLoop
from .lease import RunningJob

if TYPE_CHECKING:
    from ..decorator import Task


class BatchResultMismatch(WorkqueueError):
    """A batch task returned something other than one result per item."""


# The name recorded in a failed job's errors, which dashboards and alerts match on: kept as it
# was first published (``worker.batch`` re-exports the class under it).
BatchResultMismatch.__module__ = "django_workqueue.worker.batch"


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """A claimed batch as the slot inbox carries it: its task and its leased jobs."""

    task: Task[..., Any]
    members: list[tuple[ClaimedJob, RunningJob]]


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
            outcomes[job.id] = ending.classified(task, job, item.context, exc)
            continue
        calls.append((job, item.context, value))
    if not calls:
        return outcomes
    contexts = [context for _, context, _ in calls]
    spec = task.spec
    started = time.monotonic()
    try:
        items = [value for _, _, value in calls]
        with interrupts.watched():
            results = _call(spec, items, contexts, loop)
        if not spec.is_async and spec.timeout and time.monotonic() - started > spec.timeout:
            # The function takes no context, so it cannot stop at its timeout: it is
            # enforced when it returns, and its late results are dropped.
            raise JobTimeout(f"{spec.name} ran past its timeout of {spec.timeout}s")
    except BaseException as exc:  # one failure of the call is every item's failed attempt
        if not interrupts.of_the_body(exc):
            raise  # a Ctrl-C of this process (see interrupts.py)
        for job, context, _ in calls:
            outcomes[job.id] = ending.classified(task, job, context, exc)
        return outcomes
    mismatch = _mismatch(spec.name, results, len(calls))
    for index, (job, context, _) in enumerate(calls):
        if mismatch is not None:  # a programming error: no retry returns another count
            outcomes[job.id] = ending.not_run(job, task, mismatch, OutcomeKind.DISCARD)
        elif context.cancel_requested:
            cancelled = JobCancelled("cancelled", reason=context.abort_reason)
            outcomes[job.id] = ending.classified(task, job, context, cancelled)
        else:
            try:
                outcomes[job.id] = ending.success(job, results[index])
            except ResultNotJSON as exc:
                outcomes[job.id] = ending.classified(task, job, context, exc)
    return outcomes


def _refused(task: Task[..., Any], job: ClaimedJob) -> Outcome | None:
    """The outcome of a member that cannot join the call (as a single job would be refused,
    and a row that does not carry one item)."""
    refused = ending.refused(job, task)
    if refused is not None or job.input_shape is not None:
        return refused
    if len(job.args) != 1 or job.kwargs:
        malformed = (
            f"a batch task's job carries one item (one positional argument), but the row holds "
            f"{len(job.args)} positional and {len(job.kwargs)} keyword argument(s) (it was not "
            f"written by enqueue); fix the row or cancel the job"
        )
        return ending.not_run(job, task, MalformedArguments(malformed), OutcomeKind.DISCARD)
    return None


def _call(
    spec: TaskSpec, items: list[Any], contexts: list[JobContext], loop: AsyncLoop | None
) -> Any:
    """The one call of the batch task with its items (an async one on the event loop, which
    cancels it once every member must stop)."""
    if not spec.is_async:
        return spec.func(items)
    if loop is None:
        raise RuntimeError("no event loop for async tasks")  # the slot always has one
    signal = cast(JobContext, _StopSignal(contexts))
    return loop.run(spec.func(items), signal, spec.timeout)


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
