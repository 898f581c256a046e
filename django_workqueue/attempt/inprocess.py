"""Running one claimed job's attempt on the calling thread, and recording its outcome: what
skip-queue (``flow.skipqueue``: right after an enqueue commits) and ``django_workqueue.testing``
(``drain()``, ``run_job()``, eager mode) run, with the same pipeline as a worker's slot
(``run.py``) and the outcome written as the worker's completer writes it
(``workflow.release.record``: the fenced write and its workflow effects in one transaction).

A small heartbeat thread renews the lease while the body runs and its outcome is written
(skip-queue: a row another session holds is waited out in place, ``db/locking.py``), unless the
caller says not to (``testing``: the test's own connection and transaction, no other thread). So a
failure leaves the job to the retry policy, for any worker, and a crash of this process leaves
it ``running`` until its lease expires and a reaper makes it retryable.

Importing this module makes it skip-queue's runner (``flow.skipqueue.set_runner``): the app's
``ready()`` imports it.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import uuid

from django.db import connections

from ..conf import workqueue_settings as conf
from ..context import AbortReason, JobContext
from ..db import ClaimedJob, Driver, Outcome, driver_for, locking
from ..flow import skipqueue
from ..registry import find_task
from ..states import Status
from ..wakeup import wake
from ..workflow import release
from . import ending
from .asyncloop import AsyncLoop
from .connections import is_transient
from .lease import LeaseKeeper, RunningJob
from .run import run
from .throttle import ProgressThrottle

logger = logging.getLogger("django_workqueue.skipqueue")


def run_job(job_id: int) -> bool:
    """Claim job ``job_id`` if it is still ready and run one attempt of it here; return whether
    it ran. Never raises: a failure of the job is its recorded outcome, anything else is
    logged (the job is then left to the workers, if need be after its lease expires)."""
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
    task = find_task(job.task_name)
    progress = ProgressWriter()
    context = JobContext(job, owner=owner, driver=driver, on_progress=progress.report)
    keeper = Heartbeat(driver, context, task.spec.timeout if task else None)
    loop = AsyncLoop() if task is not None and task.spec.is_async else None
    interrupted: KeyboardInterrupt | None = None
    if heartbeat:
        keeper.start()
    try:
        outcome, pending = run(job, context, driver, loop)
    except KeyboardInterrupt as exc:
        # A Ctrl-C of this process while the body ran (a body's own is its ending, which
        # run() returns): the job goes back to ready uncharged, as a worker's shutdown gives
        # back its jobs, and the interrupt goes on to the caller.
        interrupted = exc
        outcome, pending = ending.released(job), True
    except BaseException:
        if heartbeat:
            keeper.stop()
        raise
    finally:
        context.finished = True  # the heartbeat must not take the outcome's write for a loss
        if loop is not None:
            loop.close()
    try:
        if outcome is not None and pending:
            if context.progress is not None:  # the last report lands with the outcome, always
                outcome.progress = context.progress
                outcome._encoded = None
            _record(driver, owner, outcome, job.queue)
    finally:
        if heartbeat:  # it renewed the lease while a locked row held the outcome up
            keeper.stop()
        if interrupted is not None:
            raise interrupted


def _record(driver: Driver, owner: str, outcome: Outcome, queue: str) -> None:
    """Write the outcome as the worker's completer does: with its workflow effects, and a
    value the database refuses replaced by a failure that says why. A row another session
    holds is waited out in place, the lease renewed meanwhile (``db/locking.py``): the
    caller waits for the attempt's ending anyway."""
    record = functools.partial(release.record, driver, owner, skip_locked=True)
    try:
        what = f"job {outcome.job_id} attempt {outcome.attempt}"
        recorded = locking.retry_in_place(driver, [outcome], record, what)
    except Exception as exc:
        if is_transient(exc):
            raise  # the lease expires and the reaper makes the job retryable
        recorded = release.record(driver, owner, [ending.unstorable(outcome, exc)])
    if (outcome.job_id, outcome.attempt) not in recorded.written:
        gone = outcome.job_id not in driver.lease_states([outcome.job_id])
        ending.log_not_written(outcome, gone=gone)
        return
    ending.log_endings([outcome], {ended.id: ended.status for ended in recorded.ended})
    if outcome.status == Status.READY:  # retried at once: wake the workers
        driver.notify([queue])
        wake([queue])


class ProgressWriter:
    """The skip-queue's ``on_progress``: writes a report on the calling thread when the
    worker's throttle (``throttle.py``) says it is its turn, at most once per
    ``WORKQUEUE["PROGRESS_INTERVAL"]``; a report within the interval waits in the context for
    the next one past it, or for the outcome, which always carries the last report."""

    def __init__(self) -> None:
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
        self.driver = driver
        self.keeper = LeaseKeeper(driver, context.owner)
        self.running = {context.job_id: RunningJob(context, timeout=timeout)}
        self.keeper.next_renewal = time.monotonic() + self.keeper.interval(self.running)
        self.stopping = threading.Event()

    def run(self) -> None:
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
                if timeout_at is not None and now > timeout_at and not item.context.finished:
                    item.context.abort(AbortReason.TIMEOUT)
                    timeout_at = None
                if self.keeper.due(now):  # until stopped: its outcome's write may wait for a row
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


skipqueue.set_runner(run_job)
