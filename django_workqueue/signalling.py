"""When and with what each signal of ``signals.py`` is sent (see that module for the list).

Every job signal's ``sender`` is the registered task, looked up here; receivers learn of a
change once its transaction commits (``after_commit``), and are called with ``send_robust``.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.dispatch import Signal

from .models import Job, Workflow
from .outcomes import OutcomeKind
from .registry import find_task
from .signals import (
    job_cancelled,
    job_enqueued,
    job_failed,
    job_progress,
    job_reaped,
    job_retrying,
    job_snoozed,
    job_started,
    job_succeeded,
    job_woken,
    workflow_finished,
)
from .states import Status

if TYPE_CHECKING:
    from .context import JobContext
    from .db import Ended, Outcome, Recorded

logger = logging.getLogger("django_workqueue.worker")

Sends = list[tuple[Signal, dict[str, Any]]]


def send(signal: Signal, **kwargs: Any) -> None:
    """Send now, with ``sender`` the task named ``task_name`` if the kwargs name one."""
    if not signal.receivers:
        return
    sender = kwargs.pop("sender", None)
    if sender is None and "task_name" in kwargs:
        sender = _task(kwargs["task_name"])
    signal.send_robust(sender, **kwargs)


def send_all(sends: Sends) -> None:
    for signal, kwargs in sends:
        send(signal, **kwargs)


def after_commit(alias: str, sends: Sends) -> None:
    """Send ``sends`` in order once the current transaction of ``alias`` commits (at once
    outside a transaction); nothing if it rolls back."""
    if sends:
        transaction.on_commit(functools.partial(send_all, sends), using=alias)


def send_after_commit(alias: str, signal: Signal, **kwargs: Any) -> None:
    if signal.receivers:
        after_commit(alias, [(signal, kwargs)])


def _task(name: str) -> Any:
    return find_task(name)


def _job(
    job_id: int, task_name: str, queue: str, attempt: int, worker_id: str | None
) -> dict[str, Any]:
    return {"job_id": job_id, "task_name": task_name, "queue": queue, "attempt": attempt,
            "worker_id": worker_id}  # fmt: skip


# --- send points ------------------------------------------------------------------------------


def enqueued(alias: str, task_name: str, queue: str, ids: Sequence[int]) -> None:
    """Jobs just inserted (in the caller's transaction): one ``job_enqueued`` each."""
    if job_enqueued.receivers and ids:
        after_commit(alias, [(job_enqueued, _job(pk, task_name, queue, 0, None)) for pk in ids])


def started(job_id: int, task_name: str, queue: str, attempt: int, worker_id: str) -> None:
    """A slot is about to run an attempt (its claim has committed)."""
    if job_started.receivers:
        send(job_started, **_job(job_id, task_name, queue, attempt, worker_id))


def outcomes_watched() -> bool:
    """Whether a receiver of a signal ``outcomes_written`` sends is connected."""
    return bool(
        job_succeeded.receivers or job_failed.receivers or job_cancelled.receivers
        or job_retrying.receivers or job_snoozed.receivers
    )  # fmt: skip


def outcomes_written(
    alias: str, owner: str, outcomes: Sequence[Outcome], recorded: Recorded
) -> None:
    """Outcomes a worker just wrote (inside the writing transaction): the signal of the status
    each row got, as the row says (a requested cancellation turns a failure into
    ``cancelled``). Outcomes the fence refused send nothing."""
    if not outcomes_watched():
        return
    ended = {e.id: e.status for e in recorded.ended}
    sends: Sends = []
    for outcome in outcomes:
        if (outcome.job_id, outcome.attempt) not in recorded.written:
            continue
        kwargs = _job(outcome.job_id, outcome.task_name, outcome.queue, outcome.attempt, owner)
        status = ended.get(outcome.job_id)
        if status == Status.SUCCEEDED:
            sends.append((job_succeeded, kwargs))
        elif status == Status.FAILED:
            sends.append((job_failed, {**kwargs, "error": outcome.error}))
        elif status == Status.CANCELLED:
            sends.append((job_cancelled, kwargs))
        elif outcome.kind == OutcomeKind.RETRY:
            sends.append((job_retrying, {**kwargs, "error": outcome.error, "delay": outcome.delay}))
        elif outcome.kind == OutcomeKind.SNOOZE:
            sends.append((job_snoozed, {**kwargs, "delay": outcome.delay}))
    after_commit(alias, [(s, k) for s, k in sends if s.receivers])


def reaped(alias: str, rows: Iterable[tuple[int, int, str, str]], ended: Iterable[Ended]) -> None:
    """Jobs the reaper just took back (id, attempt, lost owner, queue), inside its transaction:
    ``job_reaped`` each (their endings are sent by ``jobs_ended``)."""
    if not job_reaped.receivers:
        return
    rows = list(rows)
    status = {e.id: e.status for e in ended}
    names = dict(
        Job.objects.using(alias).filter(id__in=[r[0] for r in rows]).values_list("id", "task_name")
    )
    sends: Sends = []
    for pk, attempt, owner, queue in rows:
        kwargs = _job(pk, names.get(pk, ""), queue, attempt, owner)
        sends.append((job_reaped, {**kwargs, "status": status.get(pk, "ready")}))
    after_commit(alias, sends)


def woken(alias: str, rows: Iterable[tuple[int, str, str, int]]) -> None:
    """Waiting jobs a signal just made ready (id, task, queue, attempt), inside the
    transaction that sent it: ``job_woken`` each, once it commits."""
    if job_woken.receivers:
        after_commit(alias, [(job_woken, _job(pk, task, queue, attempt, None))
                             for pk, task, queue, attempt in rows])  # fmt: skip


def jobs_ended(alias: str, ended: Iterable[Ended]) -> None:
    """Jobs an operation, the reaper or a workflow's run condition just ended outside a
    worker's write (inside the ending transaction)."""
    if not (job_succeeded.receivers or job_failed.receivers or job_cancelled.receivers):
        return
    signal_of = {Status.SUCCEEDED: job_succeeded, Status.FAILED: job_failed,
                 Status.CANCELLED: job_cancelled}  # fmt: skip
    wanted = {e.id: signal_of[Status(e.status)] for e in ended}
    wanted = {pk: signal for pk, signal in wanted.items() if signal.receivers}
    if not wanted:
        return
    jobs = Job.objects.using(alias)
    failed = [pk for pk, signal in wanted.items() if signal is job_failed]
    errors = dict(jobs.filter(id__in=failed).values_list("id", "errors")) if failed else {}
    sends: Sends = []
    rows = jobs.filter(id__in=list(wanted)).order_by("id")
    for pk, task_name, queue, attempt in rows.values_list("id", "task_name", "queue", "attempt"):
        kwargs = _job(pk, task_name, queue, attempt, None)
        if pk in errors:
            kwargs["error"] = errors[pk][-1] if errors[pk] else None
        sends.append((wanted[pk], kwargs))
    after_commit(alias, sends)


def workflow_ended(alias: str, workflow_id: int, status: str) -> None:
    if workflow_finished.receivers:
        send_after_commit(
            alias, workflow_finished, sender=Workflow, workflow_id=workflow_id, status=status
        )


def worker_event(signal: Signal, worker: Any) -> None:
    """``worker_started`` / ``worker_stopping`` / ``worker_stopped`` (no transaction)."""
    if signal.receivers:
        signal.send_robust(
            type(worker), worker=worker, worker_id=worker.id, queues=list(worker.queues)
        )


def progress(context: JobContext) -> None:
    """``job_progress``, at once in the worker (before the throttled write commits)."""
    if not job_progress.receivers:  # the common case costs one attribute read
        return
    current, total, message, details = context.progress  # type: ignore[misc]
    responses = job_progress.send_robust(  # the sender is the task, as for every job signal
        sender=find_task(context.job.task_name), job_id=context.job.id,
        task_name=context.job.task_name, attempt=context.job.attempt, current=current,
        total=total, message=message, details=details,
    )  # fmt: skip
    for receiver, response in responses:
        if isinstance(response, Exception):
            logger.error(
                "job %s: job_progress receiver %r raised", context.job.id, receiver,
                exc_info=response,
            )  # fmt: skip
