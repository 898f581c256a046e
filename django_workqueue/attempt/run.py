"""Running one job's body: a linear pipeline — resolve the task, the attempt middlewares
(``middleware.py``), call it, hand its ending to ``ending.py`` to become an ``Outcome``.

Every runner calls ``run``: the worker's slot threads (sync tasks, and async ones on the
worker's event loop), the process pool's child, skip-queue and ``drain`` (``inprocess.py``).
Batch tasks run through ``batch.py``, which applies the same refusals and classification.

The caller writes the outcome (the worker batches them). ``atomic=True`` tasks are the
exception: the body and the fenced write of its success share one transaction, so the body's
writes commit if and only if this runner, still the lease owner, records the success (or the
durable sleep that parks the job: ``attempt/checkpoints.py``). A row another session holds
never fails that ending: the write alone is tried again in a savepoint until the row is free
(``db/locking.py``), and a transaction that cannot begin (SQLite: another writer past the busy
timeout) gives the attempt back uncharged, the body never run.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, transaction

from .. import middleware, signalling, signals
from ..context import JobContext
from ..db import ClaimedJob, Driver, locking
from ..exceptions import Sleeping
from ..outcomes import Outcome
from ..registry import find_task
from ..workflow import release
from ..workflow.store import first_argument
from . import checkpoints, ending, interrupts
from .asyncloop import AsyncLoop

if TYPE_CHECKING:
    from ..decorator import Task

logger = logging.getLogger("django_workqueue.worker")


class _LostLease(Exception):
    pass


class _NotBegun(Exception):
    """An ``atomic=True`` body's transaction could not begin: another session holds the
    database's write lock (SQLite) past the busy timeout. The body never ran."""


def run(
    job: ClaimedJob, context: JobContext, driver: Driver, loop: AsyncLoop | None
) -> tuple[Outcome | None, bool]:
    """Run ``job``; return (outcome, whether it still has to be written).

    ``atomic=True`` tasks record their success inside their own transaction, so theirs comes
    back already written (or None when the lease was lost and the body rolled back); the
    worker batches every other outcome into one write with those of other jobs.
    """
    if signals.job_started.receivers:
        signalling.started(job.id, job.task_name, job.queue, job.attempt, context.owner)
    task = find_task(job.task_name)
    if task is None:  # retried: a worker running newer code may know it
        return ending.not_run(job, None, ending.not_registered(job.task_name)), True
    refused = ending.refused(job, task)
    if refused is not None:
        return refused, True

    try:
        with interrupts.watched():  # a Ctrl-C meanwhile is not the body's
            args = list(job.args)
            if job.input_shape is not None:  # a workflow step: the previous step's value first
                args.insert(0, first_argument(driver.alias, job.id, job.input_shape))
            if task.spec.takes_context:
                if job.attempt > 1:  # a resume: checkpoints of an earlier run may be stored
                    checkpoints.check_version(driver, job.id, task.spec)
                args.insert(0, context)
                if task.spec.is_async and job.workflow_id is not None:
                    _ = context.dependencies  # read now: the event loop must not query the database
            if task.spec.atomic:
                return _run_atomic(task, job, context, driver, args), False
            value = _attempt(task, job, context, args, loop)
            outcome = ending.success(job, value)
            outcome.spawn = context.spawn
    except _LostLease:
        logger.warning(
            "job %s attempt %s: lease lost; the result was rolled back", job.id, job.attempt
        )
        return None, False
    except _NotBegun as exc:
        logger.warning(
            "job %s attempt %s: its transaction could not begin (%s); given back uncharged",
            job.id, job.attempt, exc.__cause__,
        )  # fmt: skip
        return ending.released(job), True  # a lock is not the body's doing (db/locking.py)
    except BaseException as exc:  # the body's failure, whatever it raised (see ending.py)
        if not interrupts.of_the_body(exc):
            raise  # a Ctrl-C of this process: not the body's ending, and not ours to swallow
        outcome = ending.classified(task, job, context, exc)
    return outcome, True


# The body of each attempt running through the middlewares, by its context's id: the chain is
# built once, and a middleware may call on in another thread than the slot's.
_bodies: dict[int, Callable[[], Any]] = {}


def _call_body(context: JobContext) -> Any:
    """The innermost call of the middleware chain: the attempt's body."""
    return _bodies[id(context)]()


def load_middlewares() -> None:
    """Build the attempt middlewares now (at worker start): a setting that names something
    that cannot be imported fails the start, not the first job."""
    middleware.chain(_call_body)


def _attempt(
    task: Task, job: ClaimedJob, context: JobContext, args: list[Any], loop: AsyncLoop | None
) -> Any:
    """Call the task's body through the attempt middlewares (``WORKQUEUE["MIDDLEWARE"]``)."""
    spec = task.spec
    body: Callable[[], Any]
    if spec.is_async:
        if loop is None:
            raise RuntimeError("no event loop for async tasks")  # runner always passes one
        body = lambda: loop.run(spec.func(*args, **job.kwargs), context, spec.timeout)  # noqa: E731
    else:
        body = lambda: spec.func(*args, **job.kwargs)  # noqa: E731
    chain = middleware.chain(_call_body)
    if chain is None:
        return body()
    _bodies[id(context)] = body
    try:
        return chain(context)
    finally:
        del _bodies[id(context)]


def _run_atomic(
    task: Task, job: ClaimedJob, context: JobContext, driver: Driver, args: list[Any]
) -> Outcome:
    begun = False
    try:
        with transaction.atomic(using=driver.alias):
            begun = True
            try:
                value = _attempt(task, job, context, args, None)
            except Sleeping as sleeping:
                # A durable sleep ends the attempt (uncharged, as a snooze) by committing the
                # body's writes so far with their checkpoints: the next run goes on from there.
                outcome = ending.classified(task, job, context, sleeping)
            else:
                outcome = ending.success(job, value)
                outcome.spawn = context.spawn
            outcome.progress = context.progress  # the last report commits with the result
            context.finished = True
            # The ending, the steps the body added and the release of the job's dependents
            # commit with the body's writes, or none of them does. A row another session
            # holds (the job's, its workflow's, a dependent's) stops only the write, in its
            # savepoint: it is tried again, the body is not run again (db/locking.py).
            record = functools.partial(release.record, driver, context.owner, skip_locked=True)
            recorded = locking.retry_in_place(
                driver, [outcome], record, f"job {job.id} attempt {job.attempt}"
            )
            if (job.id, job.attempt) not in recorded.written:
                raise _LostLease
    except DatabaseError as exc:
        if begun or not locking.is_locked(driver, exc):
            raise
        raise _NotBegun from exc
    return outcome
