"""Skip-queue: ``task.using(skip_queue=True).enqueue(...)`` runs the job's first attempt in the
enqueuing process, right after the commit, without waiting for a worker.

The job row is written as every job is (durable, joining the caller's transaction). When the
jobs database's transaction commits (at once outside one), this process claims *that* job by id
with one guarded UPDATE (``Driver.claim_job``: still ready, so a worker that claimed it first
keeps it, and nothing runs here) and runs the attempt with the attempt runner on the calling
thread (``attempt.inprocess.run_job``, which registers itself here with ``set_runner`` when the
app is ready: this layer decides when, the attempt layer above runs it). A failure leaves the
job to the retry policy, for any worker; an outcome whose row another session holds is written
once the row is free, the lease renewed meanwhile (``db/locking.py``); a crash of this process
leaves it ``running`` until its lease expires and a reaper makes it retryable.

The caller waits for the attempt: ``transaction.on_commit`` callbacks run synchronously in the
committing thread, so ``enqueue()`` outside a transaction (or the end of the outermost
``atomic()`` block inside one) returns once the attempt has ended. Nothing the job raises
reaches the caller: failures are recorded and logged on ``django_workqueue.skipqueue``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import DEFAULT_DB_ALIAS, transaction

from ..conf import workqueue_settings as conf

if TYPE_CHECKING:
    from ..decorator import Task
    from ..models import Job

logger = logging.getLogger("django_workqueue.skipqueue")

_runner: Callable[[int], bool] | None = None
"""What runs a claimed job's attempt here (``attempt.inprocess.run_job``), once registered."""


def set_runner(runner: Callable[[int], bool]) -> None:
    """Name the function that claims a job by id and runs its attempt in this process
    (called by ``attempt.inprocess`` when it is imported, at the app's ``ready()``)."""
    global _runner
    _runner = runner


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
    if _runner is None:  # the app is not ready: nothing of the attempt layer is imported
        logger.error(
            "job %s: skip-queue has no runner (django_workqueue's AppConfig.ready() did not "
            "run: add django_workqueue to INSTALLED_APPS); the workers will run it",
            job_id,
        )
        return False
    return _runner(job_id)
