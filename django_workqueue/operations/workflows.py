"""Operations that end jobs from outside any worker, and on whole workflows."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F, QuerySet
from django.db.models.functions import Coalesce, Now

from .. import payload
from ..conf import workqueue_settings as conf
from ..context import AbortReason
from ..db import Ended, driver_for, locking
from ..exceptions import FailedExternally
from ..models import Job, Workflow
from ..payload import describe, storable_text
from ..states import ACTIVE, Status, transition
from ..workflow import release
from ..workflow.locks import lock_jobs, lock_workflows
from .jobs import WAITING, OperationResult, _jobs

_FINISHABLE = (*WAITING, Status.RUNNING)


def complete_job(
    job: Job | int, result: Any = None, *, alias: str | None = None
) -> OperationResult:
    """End a waiting or running job as succeeded with ``result``, from outside any worker (an
    approval, a webhook), in the caller's transaction; its dependents are released exactly as
    when a worker finishes it.

    A worker running the job sees ``context.abort_reason == "completed_elsewhere"``, and
    nothing its attempt writes afterwards is recorded.

    >>> complete_job(approval, {"approved_by": request.user.pk})
    """
    encoded = payload.encode(result, "result", "complete_job(): the result")
    payload.check_size(
        len(encoded.encode()), conf.MAX_RESULT_BYTES, "complete_job(): the result is",
        "MAX_RESULT_BYTES",
    )  # fmt: skip
    return _finish(job, Status.SUCCEEDED, alias, {"result": result})


def fail_job(job: Job | int, reason: str, *, alias: str | None = None) -> OperationResult:
    """End a waiting or running job as failed (the dead-letter queue) with ``reason``, from
    outside any worker, in the caller's transaction; dependents follow their run conditions.

    >>> fail_job(approval, "rejected by the manager")
    """
    if not isinstance(reason, str) or not reason.strip():
        raise ValueError(f"fail_job(): reason must be a non-empty string, got {describe(reason)}")
    return _finish(job, Status.FAILED, alias, {"reason": storable_text(reason)[:2000]})


def _finish(
    job: Job | int, target: Status, alias: str | None, values: dict[str, Any]
) -> OperationResult:
    job_id = job.pk if isinstance(job, Job) else job
    jobs = _jobs(alias).filter(pk=job_id)
    return locking.operation(
        jobs.db, f"ending job {job_id}", lambda: _finish_once(jobs, job_id, target, values)
    )


def _finish_once(
    jobs: QuerySet[Job], job_id: int, target: Status, values: dict[str, Any]
) -> OperationResult:
    verb = "completed" if target == Status.SUCCEEDED else "failed"
    with transaction.atomic(using=jobs.db):
        _, rows = lock_jobs(jobs, "status", "errors", "attempt")  # its workflow's row first
        if not rows:
            raise Job.DoesNotExist(f"there is no job {job_id}")
        [(_, workflow_id, status, errors, attempt)] = rows
        if status not in _FINISHABLE:
            return OperationResult(
                action="unchanged", count=0, message=f"job {job_id} already finished ({status})"
            )
        (to,) = transition(Status(status), target)
        changes: dict[str, Any] = {
            "status": to, "finished_at": Now(), "lease_owner": None, "lease_expires_at": None,
        }  # fmt: skip
        if target == Status.SUCCEEDED:
            changes["result"] = values["result"]
        else:
            entry = {
                "attempt": attempt, "at": release.error_time(), "type": FAILED_EXTERNALLY,
                "message": values["reason"], "traceback": None,
            }  # fmt: skip
            changes["errors"] = [*errors, entry]
        jobs.filter(status=status).update(**changes)
        if status == Status.RUNNING:  # its worker stops it; its late writes are fenced out
            driver_for(jobs.db).notify_abort(job_id, AbortReason.COMPLETED_ELSEWHERE)
        release.settle(jobs.db, [Ended(job_id, to, workflow_id)])
    return OperationResult(action=verb, count=1, message=f"job {job_id} {verb} (was {status})")


FAILED_EXTERNALLY = f"{FailedExternally.__module__}.{FailedExternally.__qualname__}"


def cancel_workflow(workflow: Workflow | int, *, alias: str | None = None) -> OperationResult:
    """Cancel a workflow: its waiting jobs end cancelled and never run, its running jobs are
    asked to stop (as ``cancel_job`` asks), and steps they add at run time are not written.

    One transaction, in the lock order (workflow/locks.py): the workflow's row first, marked
    cancelled under its lock (from then on no step is added to it and none is brought back),
    then its jobs in id order, their dependents, and its counters. The mark needs no
    transaction of its own: every writer of the workflow's jobs takes its row first too, so
    none holds a job row while it waits for the workflow's, and a step added before the mark
    was committed before this transaction got the row (the jobs read after it include it).
    Nothing is kept if a row stays locked past the operations' bounded wait (``RowLocked``).
    Called inside a transaction, it is part of it, and the workflow's row stays locked until
    it commits: a worker finishing one of its steps keeps that outcome for later meanwhile.

    >>> cancel_workflow(wf)
    """
    workflow_id = workflow.pk if isinstance(workflow, Workflow) else workflow
    jobs = _jobs(alias).filter(workflow_id=workflow_id)
    db = jobs.db
    waiting = list(WAITING)
    for source in waiting:
        transition(source, Status.CANCELLED)
    stopping, running = locking.operation(
        db, f"cancel_workflow({workflow_id})",
        lambda: _cancel_workflow(db, jobs, workflow_id, waiting),
    )  # fmt: skip
    count = len(stopping) + len(running)
    return OperationResult(
        action="cancelled" if count else "unchanged", count=count,
        message=f"workflow {workflow_id}: {len(stopping)} waiting job(s) cancelled, "
        f"{len(running)} running job(s) asked to stop",
    )  # fmt: skip


def _cancel_workflow(
    db: str, jobs: QuerySet[Job], workflow_id: int, waiting: list[Status]
) -> tuple[list[int], list[int]]:
    with transaction.atomic(using=db):
        # The workflow's row first, marked under its lock; then its jobs (workflow/locks.py).
        lock_workflows(db, [workflow_id])
        if (
            not Workflow.objects.using(db)
            .filter(pk=workflow_id)
            .update(cancel_requested_at=Coalesce(F("cancel_requested_at"), Now()))
        ):
            raise Workflow.DoesNotExist(f"there is no workflow {workflow_id}")
        active = list(
            jobs.select_for_update()
            .filter(status__in=ACTIVE)
            .order_by("id")
            .values_list("id", "status", "cancel_requested_at")
        )
        stopping = [pk for pk, status, _ in active if status in waiting]
        running = [pk for pk, status, asked in active if status == Status.RUNNING and not asked]
        jobs.filter(id__in=stopping, status__in=waiting).update(
            status=Status.CANCELLED, cancel_requested_at=Now(), finished_at=Now()
        )
        jobs.filter(id__in=running).update(cancel_requested_at=Now())
        driver = driver_for(db)
        for job_id in running:
            driver.notify_abort(job_id, AbortReason.CANCEL_REQUESTED)
        release.settle(db, [Ended(pk, Status.CANCELLED, workflow_id) for pk in stopping])
    return stopping, running
