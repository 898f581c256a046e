"""Skip-queue: ``task.using(skip_queue=True).enqueue(...)`` runs the job's first attempt in the
enqueuing process, right after the commit, without waiting for a worker.

The job row is written as every job is (durable, joining the caller's transaction). When the
jobs database's transaction commits (at once outside one), this process claims *that* job by id
with one guarded UPDATE (``Driver.claim_job``: still ready, so a worker that claimed it first
keeps it, and nothing runs here) and runs the attempt through the worker's own pipeline
(``worker.execution.run``), on the calling thread. A small heartbeat thread renews the lease
while it runs; the outcome is recorded as a worker records it (``workflow.release.record``: the
fenced write and its workflow effects in one transaction). So a failure leaves the job to the
retry policy, for any worker, and a crash of this process leaves it ``running`` until its lease
expires and a reaper makes it retryable.

The caller waits for the attempt: ``transaction.on_commit`` callbacks run synchronously in the
committing thread, so ``enqueue()`` outside a transaction (or the end of the outermost
``atomic()`` block inside one) returns once the attempt has ended. Nothing the job raises
reaches the caller: failures are recorded and logged on ``django_workqueue.skipqueue``.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from ..conf import workqueue_settings as conf

if TYPE_CHECKING:
    from ..context import JobContext
    from ..db import ClaimedJob, Driver, Outcome
    from ..decorator import Task
    from ..models import Job

logger = logging.getLogger("django_workqueue.skipqueue")


def run_after_commit(task: Task[..., Any], job: Job) -> None:
    """Run ``job``'s first attempt here once the enqueue has committed (see the module)."""
    if job.pk is None:
        # The insert itself waits for the commit of the caller's `default` transaction (the
        # jobs live in another database): it is the callback before this one.
        transaction.on_commit(functools.partial(_after_insert, job), using=DEFAULT_DB_ALIAS)
        return
    _after_insert(job)


def _after_insert(job: Job) -> None:
    if job.pk is None or getattr(job, "duplicate", False):
        # A duplicate is the job that already holds the unique key: its own enqueue decided
        # how it runs.
        return
    transaction.on_commit(functools.partial(run_job, job.pk), using=conf.DATABASE)


def run_job(job_id: int) -> bool:
    """Claim job ``job_id`` if it is still ready and run one attempt of it here; return whether
    it ran. Never raises: a failure of the job is its recorded outcome, anything else is
    logged (the job is then left to the workers, if need be after its lease expires)."""
    from ..db import driver_for

    try:
        driver = driver_for(conf.DATABASE)
        owner = f"skip-queue:{os.getpid()}:{uuid.uuid4().hex[:16]}"
        claimed = driver.claim_job(job_id, owner)
    except Exception:
        logger.exception("job %s: could not claim it to run here; the workers will run it", job_id)
        return False
    if claimed is None:
        logger.debug("job %s: no longer ready (a worker claimed it first)", job_id)
        return False
    try:
        run_claimed(driver, claimed, owner)
    except Exception:
        logger.exception(
            "job %s attempt %s: running it here failed; a worker retries it once its lease "
            "expires", claimed.id, claimed.attempt,
        )  # fmt: skip
    return True


def run_claimed(driver: Driver, job: ClaimedJob, owner: str, *, heartbeat: bool = True) -> None:
    """Run one attempt of ``job`` (claimed by ``owner``) on this thread and record its
    outcome. Without ``heartbeat`` no thread renews the lease (``django_workqueue.testing``:
    a test's own connection and transaction, no other thread)."""
    from ..context import JobContext
    from ..registry import find_task
    from ..worker.asyncloop import AsyncLoop
    from ..worker.execution import run

    task = find_task(job.task_name)
    progress = ProgressWriter()
    context = JobContext(job, owner=owner, driver=driver, on_progress=progress.report)
    keeper = Heartbeat(driver, context, task.spec.timeout if task else None)
    loop = AsyncLoop() if task is not None and task.spec.is_async else None
    if heartbeat:
        keeper.start()
    try:
        outcome, pending = run(job, context, driver, loop)
    finally:
        context.finished = True  # the heartbeat must not take the outcome's write for a loss
        if heartbeat:
            keeper.stop()
        if loop is not None:
            loop.close()
    if outcome is not None and pending:
        if context.progress is not None:  # the last report lands with the outcome, always
            outcome.progress = context.progress
            outcome._encoded = None
        _record(driver, owner, outcome, job.queue)


def _record(driver: Driver, owner: str, outcome: Outcome, queue: str) -> None:
    """Write the outcome as the worker's completer does: with its workflow effects, and a
    value the database refuses replaced by a failure that says why."""
    from ..states import Status
    from ..wakeup import wake
    from ..worker.connections import is_transient
    from ..worker.execution import log_not_written, unstorable
    from ..workflow import release

    try:
        recorded = release.record(driver, owner, [outcome])
    except Exception as exc:
        if is_transient(exc):
            raise  # the lease expires and the reaper makes the job retryable
        recorded = release.record(driver, owner, [unstorable(outcome, exc)])
    if (outcome.job_id, outcome.attempt) not in recorded.written:
        gone = outcome.job_id not in driver.lease_states([outcome.job_id])
        log_not_written(outcome, gone=gone)
    elif outcome.status == Status.READY:  # retried at once: wake the workers
        driver.notify([queue])
        wake([queue])


class ProgressWriter:
    """The skip-queue's ``on_progress``: writes a report on the calling thread when the
    worker's throttle (``worker.throttle``) says it is its turn, at most once per
    ``WORKQUEUE["PROGRESS_INTERVAL"]``; a report within the interval waits in the context for
    the next one past it, or for the outcome, which always carries the last report."""

    def __init__(self) -> None:
        from ..worker.throttle import ProgressThrottle

        self.throttle = ProgressThrottle()

    def report(self, context: JobContext) -> None:
        now = time.monotonic()
        if not self.throttle.due(context.job_id, now):
            return
        self.throttle.written([context.job_id], now)
        if not context.write_progress():
            logger.debug("job %s: progress not written (lease lost)", context.job_id)


class Heartbeat(threading.Thread):
    """Renews the lease of the one job this process runs, as the worker's heartbeat does
    (``LeaseKeeper``: a lost lease or a requested cancellation aborts the job's context), and
    aborts it past its ``timeout``. Its own connection, closed when it stops."""

    def __init__(self, driver: Driver, context: JobContext, timeout: float | None) -> None:
        super().__init__(name=f"workqueue-skip-queue-{context.job_id}", daemon=True)
        from ..worker.lease import LeaseKeeper, RunningJob

        self.driver = driver
        self.keeper = LeaseKeeper(driver, context.owner)
        self.running = {context.job_id: RunningJob(context, timeout=timeout)}
        self.keeper.next_renewal = time.monotonic() + self.keeper.interval(self.running)
        self.stopping = threading.Event()

    def run(self) -> None:
        from ..context import AbortReason

        (item,) = self.running.values()
        timeout_at = None if not item.timeout else item.started + item.timeout
        try:
            while True:
                now = time.monotonic()
                until = self.keeper.next_renewal - now
                if timeout_at is not None:
                    until = min(until, timeout_at - now)
                if self.stopping.wait(max(0.0, until)):
                    return
                now = time.monotonic()
                if timeout_at is not None and now > timeout_at:
                    item.context.abort(AbortReason.TIMEOUT)
                    timeout_at = None
                if self.keeper.due(now) and not item.context.finished:
                    self._renew()
        finally:
            connections[self.driver.alias].close()  # this thread's connection ends with it

    def _renew(self) -> None:
        try:
            self.keeper.renew(self.running)
        except Exception as exc:  # the renewal stays due: try again shortly
            (job_id,) = self.running
            logger.warning("job %s: lease renewal failed (%s); trying again", job_id, exc)
            connections[self.driver.alias].close()
            self.stopping.wait(min(1.0, self.keeper.interval(self.running)))

    def stop(self) -> None:
        self.stopping.set()
        self.join()
