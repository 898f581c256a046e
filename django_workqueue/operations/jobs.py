"""Operations on single jobs and sets of jobs: cancel, redrive, retry."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

from django.db import IntegrityError, transaction
from django.db.models import Case, Exists, F, IntegerField, OuterRef, QuerySet, Value, When
from django.db.models.functions import Now

from .. import budgets, wakeup
from ..conf import workqueue_settings as conf
from ..context import AbortReason
from ..db import Ended, driver_for, locking
from ..models import Job
from ..payload import describe
from ..registry import MAX_ATTEMPTS
from ..states import ACTIVE, Status, transition
from ..workflow import release
from ..workflow.locks import lock_jobs
from ..workflow.resume import prerequisites_open, resume, revivable

logger = logging.getLogger("django_workqueue.operations")
T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class OperationResult:
    action: str
    """What was done: "cancelled", "cancel_requested", "redriven", "retried", "completed",
    "failed", "held", "released", "paused", "resumed", "purged", "signalled" or
    "unchanged"."""
    count: int
    message: str

    def __bool__(self) -> bool:
        return self.count > 0


def _jobs(alias: str | None) -> QuerySet[Job]:
    return Job.objects.using(alias or conf.DATABASE)


def cancel_job(job: Job | int, *, alias: str | None = None) -> OperationResult:
    """Cancel a job: a waiting job never runs; a running one is asked to stop.

    A running job's ``context.cancelled`` is set with ``abort_reason == "cancel_requested"``
    — on PostgreSQL at once (a NOTIFY delivered when this transaction commits), elsewhere at
    its worker's next heartbeat — and the job ends ``cancelled`` (never retried) however its
    attempt ends, unless it succeeds.
    """
    job_id = job.pk if isinstance(job, Job) else job
    jobs = _jobs(alias).filter(pk=job_id)
    for _ in range(3):  # the job may move between our guarded updates; each try re-reads
        for source in WAITING:
            transition(source, Status.CANCELLED)
        what = f"cancel_job({job_id})"
        if locking.operation(jobs.db, what, functools.partial(_cancel_waiting, jobs, job_id)):
            return OperationResult(action="cancelled", count=1, message=f"job {job_id} cancelled")
        running = jobs.filter(status=Status.RUNNING, cancel_requested_at__isnull=True)
        ask = functools.partial(running.update, cancel_requested_at=Now())
        if locking.operation(jobs.db, f"cancel_job({job_id})", ask):
            driver_for(jobs.db).notify_abort(job_id, AbortReason.CANCEL_REQUESTED)
            return OperationResult(
                action="cancel_requested", count=1,
                message=f"job {job_id} is running; its worker has been asked to stop it",
            )  # fmt: skip
        status = jobs.values_list("status", flat=True).first()
        if status is None:
            raise Job.DoesNotExist(f"there is no job {job_id}")
        if status == Status.RUNNING:
            return OperationResult(
                action="unchanged", count=0, message=f"job {job_id}: cancellation already requested"
            )
        if status in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED):
            return OperationResult(
                action="unchanged", count=0, message=f"job {job_id} already finished ({status})"
            )
    return OperationResult(action="unchanged", count=0, message=f"job {job_id} kept changing")


def _cancel_waiting(jobs: QuerySet[Job], job_id: int) -> bool:
    """Cancel the job if it is waiting; its dependents learn of it in the same transaction."""
    with transaction.atomic(using=jobs.db):
        _, rows = lock_jobs(jobs.filter(status__in=WAITING))  # its workflow's row first
        if not rows or not jobs.filter(status__in=WAITING).update(
            status=Status.CANCELLED, cancel_requested_at=Now(), finished_at=Now()
        ):
            return False
        [(_, workflow_id)] = rows
        release.settle(jobs.db, [Ended(job_id, Status.CANCELLED, workflow_id)])
    return True


# A job that is not running: it may be cancelled, completed or failed from outside (a job
# waiting for a signal too: its body is not running either).
WAITING = (Status.BLOCKED, Status.SCHEDULED, Status.READY, Status.HELD, Status.WAITING)


def cancel_jobs(
    jobs: QuerySet[Job] | Iterable[Job | int], *, alias: str | None = None
) -> OperationResult:
    """Cancel every job of ``jobs`` (a queryset, job ids or jobs) as ``cancel_job`` would:
    waiting ones end cancelled (their workflows learn of it at once), running ones are asked
    to stop. Finished jobs are left alone.

    The jobs are read and written ``BATCH_SIZE`` at a time in id order, one transaction per
    batch (unless the caller's transaction wraps them all): however many jobs match, only a
    batch's rows are locked at a time, never the table.

    >>> cancel_jobs(Job.objects.filter(queue="reports", task_name="reports.tasks.rebuild"))
    """
    for source in WAITING:
        transition(source, Status.CANCELLED)
    selection = _select(jobs, alias).filter(status__in=ACTIVE)
    cancelled = asked = 0
    for batch in batches(selection):
        ids = [pk for (pk,) in batch]
        stopped, running = locking.operation(
            selection.db, "cancel_jobs", functools.partial(_cancel_batch, selection.db, ids)
        )
        cancelled += stopped
        asked += running
    count = cancelled + asked
    action = "cancelled" if cancelled else "cancel_requested" if asked else "unchanged"
    return OperationResult(
        action=action, count=count,
        message=f"{cancelled} waiting job(s) cancelled, {asked} running job(s) asked to stop",
    )  # fmt: skip


def _cancel_batch(db: str, ids: list[int]) -> tuple[int, int]:
    """Cancel the waiting jobs among ``ids`` and ask the running ones to stop, in one
    transaction, in the lock order (workflow/locks.py): their workflows' rows, the jobs' in
    id order, then their dependents'."""
    jobs = _jobs(db).filter(id__in=ids)
    with transaction.atomic(using=db):
        _, waiting = lock_jobs(jobs.filter(status__in=WAITING))
        jobs.filter(id__in=[pk for pk, _ in waiting], status__in=WAITING).update(
            status=Status.CANCELLED, cancel_requested_at=Now(), finished_at=Now()
        )
        running = list(
            jobs.filter(status=Status.RUNNING, cancel_requested_at__isnull=True).values_list(
                "id", flat=True
            )
        )
        if running:
            asked = jobs.filter(
                id__in=running, status=Status.RUNNING, cancel_requested_at__isnull=True
            ).update(cancel_requested_at=Now())
            driver = driver_for(db)
            for job_id in running:  # delivered at commit; a heartbeat finds any other way
                driver.notify_abort(job_id, AbortReason.CANCEL_REQUESTED)
        else:
            asked = 0
        release.settle(db, [Ended(pk, Status.CANCELLED, wf) for pk, wf in waiting])
    return len(waiting), asked


def redrive(
    jobs: QuerySet[Job] | Iterable[Job | int] | None = None,
    *,
    alias: str | None = None,
    attempts: int | None = None,
) -> OperationResult:
    """Move failed jobs (the dead-letter queue) back to ready with a fresh attempt budget.

    ``jobs`` is a queryset (a filter), job ids or jobs; None means every failed job. The error
    history is kept and the claim counter (``attempt``) keeps counting up; both budgets start
    afresh (``budgets.fresh_budget``): the job's own ``max_attempts``, kept as it is, or
    ``attempts`` when given, which becomes its ``max_attempts``. Jobs are redriven in batches
    of at most ``BATCH_SIZE`` rows, one transaction each (unless the caller's transaction
    wraps them all).

    >>> redrive(Job.objects.filter(task_name="billing.tasks.charge"))
    """
    if attempts is not None and (
        isinstance(attempts, bool)
        or not isinstance(attempts, int)
        or not 1 <= attempts <= MAX_ATTEMPTS
    ):
        raise ValueError(
            f"attempts must be a positive integer of at most {MAX_ATTEMPTS:,}, "
            f"got {describe(attempts)}"
        )
    (target,) = transition(Status.FAILED, Status.READY)
    failed = _select(jobs, alias).filter(status=Status.FAILED)
    # A failed job whose unique key another active job of its task holds stays failed:
    # redriving it would break the key's promise (and the unique index would refuse it).
    holder = Job.objects.filter(
        task_name=OuterRef("task_name"), unique_key=OuterRef("unique_key"), status__in=ACTIVE
    )
    # A step of a workflow an operator cancelled stays failed: nothing revives that workflow.
    selection = revivable(failed).exclude(Exists(holder))
    total = 0
    for batch in batches(selection):
        ids = [pk for (pk,) in batch]
        rows = selection.filter(id__in=ids)
        try:
            redrive_rows = functools.partial(_redrive_atomic, rows, target, attempts)
            total += locking.operation(rows.db, "redrive", redrive_rows)
        except IntegrityError:  # a holder appeared meanwhile: go one job at a time
            for pk in ids:
                with contextlib.suppress(IntegrityError), transaction.atomic(using=rows.db):
                    total += _redrive_rows(rows.filter(pk=pk), target, attempts)
    message = f"{total} failed job(s) moved back to ready"
    abandoned = failed.exclude(pk__in=revivable(failed).values("pk")).count()
    if abandoned:
        message += f"; {abandoned} left failed: its workflow was cancelled"
    skipped = revivable(failed).filter(unique_key__isnull=False).count()  # still failed: held keys
    if skipped:
        message += f"; {skipped} left failed: another active job of the task holds its unique_key"
    return OperationResult(
        action="redriven" if total else "unchanged", count=total, message=message
    )


def _redrive_atomic(rows: QuerySet[Job], target: Status, attempts: int | None) -> int:
    with transaction.atomic(using=rows.db):
        return _redrive_rows(rows, target, attempts)


def _redrive_rows(rows: QuerySet[Job], target: Status, attempts: int | None) -> int:
    """Redrive ``rows`` (in the caller's transaction) and resume their workflows from them:
    dependents cancelled because they failed wait again."""
    # Their workflows' rows, then theirs (the lock order, workflow/locks.py): a workflow
    # cancelled since the selection was read gets nothing back.
    cancelled, picked = lock_jobs(rows, "queue")
    picked = [row for row in picked if row[1] not in cancelled]
    # A step redriven while some of its prerequisites are still open waits for them again.
    waiting = prerequisites_open(rows.db, [pk for pk, wf, _ in picked if wf is not None])
    if not picked:
        return 0
    ids = [pk for pk, _, _ in picked]
    status: Any = target
    if waiting:
        (blocked,) = transition(Status.FAILED, Status.BLOCKED)
        status = Case(
            When(id__in=list(waiting), then=Value(blocked.value)), default=Value(target.value)
        )
    count = rows.filter(id__in=ids).update(
        waiting_on=_per_job({pk: n for pk, (n, _) in waiting.items()}),
        prerequisites_succeeded=_per_job({pk: ok for pk, (_, ok) in waiting.items()}),
        status=status,
        **budgets.fresh_budget(attempts),
        run_after=Now(),
        deadline=_deadline_unless_passed(),
        finished_at=None,
        cancel_requested_at=None,
        lease_owner=None,
        lease_expires_at=None,
    )
    resume(rows.db, [(pk, wf) for pk, wf, _ in picked])
    # Idle workers poll rarely while they hear NOTIFY: tell them (at commit).
    _announce(rows.db, {queue for pk, _, queue in picked if pk not in waiting})
    return count


def _announce(db: str, queues: set[str]) -> None:
    """Wake the workers of ``queues`` once the caller's transaction commits: NOTIFY for other
    processes, the in-process wake-up for this one."""
    if queues:
        driver_for(db).notify(queues)
        transaction.on_commit(functools.partial(wakeup.wake, queues), using=db)


def _per_job(values: dict[int, int]) -> Any:
    if not values:
        return 0
    whens = [When(id=pk, then=Value(n)) for pk, n in values.items()]
    return Case(*whens, default=Value(0), output_field=IntegerField())


def _deadline_unless_passed() -> Case:
    """A deadline that has passed is cleared (an operator who runs a job again means it to
    run); one still ahead is kept."""
    return Case(When(deadline__lt=Now(), then=Value(None)), default=F("deadline"))


def retry_job(job: Job | int, *, alias: str | None = None) -> OperationResult:
    """Run a job again as soon as possible.

    A failed job is redriven (fresh attempt budget); a job waiting for its retry delay or
    schedule becomes due now. Either way a deadline that has passed is cleared. Other
    statuses are left alone.
    """
    job_id = job.pk if isinstance(job, Job) else job
    redriven = redrive([job_id], alias=alias)
    if redriven:
        return OperationResult(action="retried", count=1, message=f"job {job_id} redriven")
    (ready,) = transition(Status.SCHEDULED, Status.READY)
    scheduled = _jobs(alias).filter(pk=job_id, status=Status.SCHEDULED)

    def make_due() -> bool:
        queue = scheduled.values_list("queue", flat=True).first()
        if queue is None or not scheduled.update(
            status=ready, run_after=Now(), deadline=_deadline_unless_passed()
        ):
            return False
        _announce(scheduled.db, {queue})
        return True

    if locking.operation(scheduled.db, f"retry_job({job_id})", make_due):
        return OperationResult(action="retried", count=1, message=f"job {job_id} is due now")
    status = _jobs(alias).filter(pk=job_id).values_list("status", flat=True).first()
    if status is None:
        raise Job.DoesNotExist(f"there is no job {job_id}")
    return OperationResult(
        action="unchanged", count=0, message=f"job {job_id} is {status}; nothing to retry"
    )


BATCH_SIZE = 1000
"""The most rows an operation on a set of jobs (``cancel_jobs``, ``redrive``) writes in one
transaction: row locks are held briefly, and never on the whole table."""


def batches(selection: QuerySet[Job], *fields: str) -> Iterator[list[tuple[Any, ...]]]:
    """The rows of ``selection`` as (id, *fields), in id order, ``BATCH_SIZE`` at a time. Each
    batch is read after the previous one was written: rows a batch changed are not read
    again, and rows that join the selection behind the last id read are still found."""
    last: int | None = None
    while True:
        page = selection if last is None else selection.filter(pk__gt=last)
        rows = list(page.order_by("pk").values_list("pk", *fields)[:BATCH_SIZE])
        if not rows:
            return
        yield rows
        if len(rows) < BATCH_SIZE:
            return
        last = rows[-1][0]


def _select(jobs: QuerySet[Job] | Iterable[Job | int] | None, alias: str | None) -> QuerySet[Job]:
    if jobs is None:
        return _jobs(alias)
    if isinstance(jobs, QuerySet):
        if jobs.query.is_sliced:  # a slice cannot be filtered further: select by its ids
            ids = list(jobs.values_list("pk", flat=True))
            return _jobs(alias or jobs.db).filter(pk__in=ids)
        return jobs.using(alias) if alias else jobs
    ids = [j.pk if isinstance(j, Job) else j for j in jobs]
    return _jobs(alias).filter(pk__in=ids)
