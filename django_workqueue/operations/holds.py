"""Holding a waiting job back, and releasing it: an operator's "disable" of one job.

A held job keeps its own status, ``held``: no claim sees it (claims read ``ready`` rows only),
it stays open (its unique key holds, its workflow's dependents keep waiting for it), and the
promoter leaves it alone. Its prerequisites' endings are counted on it as on a blocked job
(``Driver.count_down``), but nothing is decided while it is held: its release recounts them
(``workflow.prerequisites.standing``, the rule every return to waiting follows) and decides its
run condition then.
"""

from __future__ import annotations

import functools
from typing import Any

from django.db import transaction
from django.db.models import Case, Value, When
from django.db.models.functions import Now

from .. import wakeup
from ..db import driver_for, locking
from ..models import Job
from ..states import Status, transition
from ..workflow.effects import Effects
from ..workflow.locks import lock_jobs
from ..workflow.prerequisites import standing
from .jobs import WAITING, OperationResult, _jobs

_HOLDABLE = tuple(status for status in WAITING if status != Status.HELD)


def hold_job(job: Job | int, *, alias: str | None = None) -> OperationResult:
    """Keep a waiting job (blocked, scheduled or ready) from running until ``release_job``.

    A running or finished job is left as it is (``action == "unchanged"``).

    >>> hold_job(job)
    """
    job_id = job.pk if isinstance(job, Job) else job
    for source in _HOLDABLE:
        transition(source, Status.HELD)
    jobs = _jobs(alias).filter(pk=job_id)
    held = jobs.filter(status__in=_HOLDABLE)
    if locking.operation(jobs.db, f"hold_job({job_id})", lambda: held.update(status=Status.HELD)):
        return OperationResult(action="held", count=1, message=f"job {job_id} held")
    status = jobs.values_list("status", flat=True).first()
    if status is None:
        raise Job.DoesNotExist(f"there is no job {job_id}")
    if status == Status.HELD:
        message = f"job {job_id} is already held"
    elif status == Status.RUNNING:
        message = f"job {job_id} is running; only a job that has not started can be held"
    else:
        message = f"job {job_id} already finished ({status})"
    return OperationResult(action="unchanged", count=0, message=message)


def release_job(job: Job | int, *, alias: str | None = None) -> OperationResult:
    """Let a held job run again: it goes back to waiting for its prerequisites (blocked), or
    to ready (scheduled if its ``run_after`` is later); a workflow step whose run condition
    can no longer be met (a prerequisite failed while it was held) ends cancelled, as it
    would have without the hold.

    >>> release_job(job)
    """
    job_id = job.pk if isinstance(job, Job) else job
    jobs = _jobs(alias).filter(pk=job_id)
    released = locking.operation(jobs.db, f"release_job({job_id})", lambda: _release(jobs, job_id))
    if released is not None:
        return OperationResult(
            action="released", count=1, message=f"job {job_id} released ({released})"
        )
    status = jobs.values_list("status", flat=True).first()
    if status is None:
        raise Job.DoesNotExist(f"there is no job {job_id}")
    return OperationResult(action="unchanged", count=0, message=f"job {job_id} is not held")


def _release(jobs: Any, job_id: int) -> str | None:
    """Release the job if it is held, in one transaction; return its new status."""
    db = jobs.db
    with transaction.atomic(using=db):
        # The workflows' rows, its prerequisites' rows, then its own (workflow/locks.py; a
        # prerequisite ending locks its row, then its dependents').
        now = standing(db, [job_id]).get(job_id)
        _, rows = lock_jobs(jobs.filter(status=Status.HELD), "queue")
        if not rows:
            return None
        [(_, _, queue)] = rows
        if now is not None:
            # Back to blocked on every prerequisite, then the ones that ended are counted
            # as the release engine counts any ending: released, or cancelled with the
            # reason, with its workflow's counters, in this transaction.
            (blocked,) = transition(Status.HELD, Status.BLOCKED)
            jobs.filter(status=Status.HELD).update(
                status=blocked, waiting_on=now.open + len(now.ended), prerequisites_succeeded=0
            )
            effects = Effects(db)
            effects.count([(job_id, p) for p, _ in now.ended], dict(now.ended))
            effects.apply()
        else:
            ready, scheduled = transition(Status.HELD, Status.READY, Status.SCHEDULED)
            jobs.filter(status=Status.HELD).update(
                status=Case(
                    When(run_after__lte=Now(), then=Value(ready.value)),
                    default=Value(scheduled.value),
                )
            )
        status: str = jobs.values_list("status", flat=True).get()
        if status == Status.READY and now is None:  # the release engine notified its own
            driver_for(db).notify([queue])
            transaction.on_commit(functools.partial(wakeup.wake, [queue]), using=db)
    return status
