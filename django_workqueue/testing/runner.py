"""``drain()``, ``run_job()`` and eager mode: jobs run on the calling thread, as a worker runs them.

Each job is claimed as a worker claims it (``flow.claimer.Claimer``: the plain claim and the
flow claim, so limits and fairness keys hold) and run by the attempt runner
(``attempt.inprocess.run_claimed``: the worker's pipeline, and its outcome written by
``workflow.release.record``), without a heartbeat thread: everything happens on this thread's
connection, inside the test's transaction if there is one.

Eager mode: importing this module registers ``run_eagerly`` with ``wakeup`` (as a worker
registers its wake-up event), and the app's ``ready()`` imports it when ``WORKQUEUE["EAGER"]``
is on.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .. import wakeup
from ..conf import workqueue_settings as conf
from ..exceptions import WorkqueueError

if TYPE_CHECKING:
    from ..models import Job

# Jobs one drain() runs at most: a task that snoozes without delay would otherwise run forever.
MAX_JOBS = 10_000

_local = threading.local()


def _owner(kind: str) -> str:
    return f"{kind}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def drain(queues: Iterable[str] | None = None, *, max_jobs: int = MAX_JOBS) -> int:
    """Run ready jobs here until none is left; return how many attempts ran.

    Jobs a finished job releases (workflow steps) run in the same call; so do retries that are
    due at once and scheduled jobs whose time has come. A retry with a backoff waits for its
    time as it would with a worker (``drain()`` never sleeps).

    >>> chain(fetch.s(url), parse.s()).enqueue()
    >>> drain()
    2
    """
    # Imported here: ``django_workqueue.testing`` imports before Django is set up (a
    # conftest, the pytest plugin), and these need the app registry.
    from ..attempt.inprocess import run_claimed
    from ..db import driver_for
    from ..flow.claimer import Claimer
    from ..maintenance import promoter

    driver = driver_for(conf.DATABASE)
    owner = _owner("drain")
    claimer = Claimer(driver, owner)
    served = list(conf.QUEUES if queues is None else queues)
    ran = 0
    already = getattr(_local, "draining", False)
    _local.draining = True  # the wake-ups of the jobs run here must not start another drain
    try:
        while ran < max_jobs:
            promoter.run_once(alias=conf.DATABASE)
            claimed = claimer.claim(served, 1)
            if not claimed:
                break
            run_claimed(driver, claimed[0], owner, heartbeat=False)
            ran += 1
    finally:
        _local.draining = already
    if ran >= max_jobs and _still_ready(served):
        raise WorkqueueError(
            f"drain() ran {max_jobs} attempts and jobs are still ready (a task that snoozes or "
            f"retries without delay?); pass max_jobs= to allow more"
        )
    return ran


def _still_ready(queues: list[str]) -> bool:
    """Whether a job of ``queues`` is ready to be claimed (after ``max_jobs`` attempts: only
    then is stopping a failure; exactly ``max_jobs`` jobs and nothing after them is not)."""
    from ..models import Job, Queue  # not at import: see ``drain``

    paused = Queue.objects.using(conf.DATABASE).filter(paused_at__isnull=False).values("name")
    return (
        Job.objects.using(conf.DATABASE)
        .filter(status="ready", queue__in=queues)
        .exclude(queue__in=paused)
        .exists()
    )


def run_job(job: Job | int) -> Job:
    """Run one attempt of ``job`` (ready) here and return it refreshed.

    >>> job = run_job(send_receipt.enqueue(42))
    >>> job.status
    'succeeded'
    """
    # Imported here: they need the app registry (see ``drain``).
    from ..attempt.inprocess import run_claimed
    from ..db import driver_for
    from ..models import Job

    job_id = job if isinstance(job, int) else job.pk
    if job_id is None:
        raise WorkqueueError(
            "run_job(): the job has no id yet (its insert waits for the commit of your "
            "transaction on another database); commit first"
        )
    driver = driver_for(conf.DATABASE)
    owner = _owner("run-job")
    claimed = driver.claim_job(job_id, owner)
    if claimed is None:
        row = Job.objects.using(conf.DATABASE).filter(pk=job_id).first()
        if row is not None and row.status == "ready":
            raise WorkqueueError(
                f"run_job(): job {job_id} is ready but cannot be claimed by itself: its task "
                f"is flow-controlled (concurrency=, rate=, fair_key=, batch_size=) or its "
                f"queue is paused; drain() claims it under its limits"
            )
        state = "does not exist" if row is None else f"is {row.status}"
        raise WorkqueueError(
            f"run_job(): job {job_id} {state}, not ready; run_job runs one attempt of a "
            f"ready job (drain() runs whatever is ready, flow-controlled tasks included)"
        )
    run_claimed(driver, claimed, owner, heartbeat=False)
    return Job.objects.using(conf.DATABASE).get(pk=job_id)


def run_eagerly() -> None:
    """``WORKQUEUE["EAGER"]``: called by every in-process wake-up (an enqueue's commit, a
    release) while the setting is on; runs what is ready, unless this thread is running jobs
    already."""
    if getattr(_local, "draining", False):
        return
    drain()


wakeup.register_eager(run_eagerly)
