"""Signals: sent to a job or a workflow, kept in order, each taken by one wait once.

``operations.send_signal`` keeps a ``Signal`` row and wakes the jobs waiting for its name
(``waiting`` -> ``ready``), in the sender's transaction. A woken job's body runs again and its
``context.wait_for_signal`` takes the oldest kept signal of that name sent to the job or to its
workflow (``take``), marking it delivered in the transaction that records it as the wait's
answer (``attempt/checkpoints.py``): delivered once per wait.

Nothing is lost between a body that found no signal and the write that parks it: every writer
takes the job's row first (the sender locks it before it looks at the status; the park's UPDATE
holds it), and the park looks for kept signals again after its write, in its transaction
(``wake_kept``): either the sender sees the job waiting and wakes it, or the park sees the
signal and does not wait. A run whose worker lost the job's lease may still answer the wait
(``attempt/checkpoints.py`` lets two runs of a job overlap); if it does so between the current
run's look and its park, the park finds the wait answered and wakes the job, which reads the
stored answer.

Timeouts: the promoter wakes waiting jobs whose wait's ``wakes_at`` passed (``time_out``);
their body then gets ``SignalTimeout`` at the call.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Now

from .. import signalling, wakeup
from ..db import driver_for
from ..exceptions import InvalidOption
from ..models import Checkpoint, Job, Signal, Workflow
from ..payload import describe, unstorable_text
from ..states import TERMINAL, Status, WorkflowStatus, transition

MAX_NAME_LENGTH = 200
"""The longest name of a step or a signal (``Checkpoint.name``, ``Signal.name``)."""


def check_name(owner: str, name: Any) -> str:
    """A step's or a signal's name, checked: a non-empty storable string."""
    if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH:
        raise InvalidOption(
            f"{owner}: name must be a non-empty string of at most {MAX_NAME_LENGTH} "
            f"characters, got {describe(name)}"
        )
    problem = unstorable_text(name)
    if problem is not None:
        raise InvalidOption(f"{owner}: name {problem}")
    return name


def send(
    alias: str, name: str, payload: Any, *, job_id: int | None, workflow_id: int | None
) -> int | None:
    """Keep the signal ``name`` for the job ``job_id`` (or for the jobs of ``workflow_id``)
    and wake the jobs waiting for it; return how many were woken, or None if the job (the
    workflow) is finished and nothing was kept. Joins the caller's transaction."""
    with transaction.atomic(using=alias):
        # The target's row is taken first: see the module's docstring.
        if job_id is not None:
            status = _locked_status(Job.objects.using(alias).filter(pk=job_id))
            if status is None:
                raise Job.DoesNotExist(f"there is no job {job_id}")
        else:
            status = _locked_status(Workflow.objects.using(alias).filter(pk=workflow_id or 0))
            if status is None:
                raise Workflow.DoesNotExist(f"there is no workflow {workflow_id}")
        if status in TERMINAL or status in _FINISHED_WORKFLOW:
            return None
        Signal.objects.using(alias).create(
            job_id=job_id, workflow_id=workflow_id, name=name, payload=payload
        )
        waiting = Job.objects.using(alias).filter(
            Exists(_open_waits().filter(signal=name)), status=Status.WAITING
        )
        if job_id is not None:
            return _wake(waiting.filter(pk=job_id))
        return _wake(waiting.filter(workflow_id=workflow_id or 0))


def _locked_status(rows: QuerySet[Any]) -> str | None:
    return rows.select_for_update().values_list("status", flat=True).first()


_FINISHED_WORKFLOW = frozenset(
    {WorkflowStatus.SUCCEEDED, WorkflowStatus.FAILED, WorkflowStatus.CANCELLED}
)


def take(alias: str, job_id: int, workflow_id: int | None, name: str) -> tuple[bool, Any]:
    """Mark the oldest kept signal ``name`` of the job (or of its workflow) delivered to it;
    return (whether there was one, its payload). Call it inside the transaction that records
    the wait's answer."""
    while True:
        kept = (
            _kept(alias, job_id, workflow_id)
            .filter(name=name)
            .order_by("id")
            .values_list("pk", "payload")[:1]
        )
        row = next(iter(kept), None)
        if row is None:
            return False, None
        pk, payload = row
        delivered = _kept(alias, job_id, workflow_id).filter(pk=pk)
        if delivered.update(delivered_at=Now(), delivered_to=job_id):
            return True, payload
        # Another wait took it between the read and the write: the next one, if any.


def wake_kept(alias: str, job_ids: Iterable[int]) -> int:
    """Wake the jobs among ``job_ids`` that are waiting for a signal already kept for them
    (sent while their body was deciding to wait), or whose wait is no longer open: another
    run of the job (one whose worker lost the lease and went on) answered it while this one
    found nothing to take, and nothing else would ever wake it; woken, the body reads the
    stored answer. Call it after the park's write, in its transaction."""
    kept = Signal.objects.using(alias).filter(
        Q(job=OuterRef("job_id")) | Q(workflow=OuterRef("job__workflow_id")),
        name=OuterRef("signal"),
        delivered_at__isnull=True,
    )
    waits = _open_waits().filter(Exists(kept))
    return _wake(Job.objects.using(alias).filter(
        Exists(waits) | ~Exists(_open_waits()), pk__in=list(job_ids), status=Status.WAITING,
    ))  # fmt: skip


def time_out(alias: str, now: datetime | None = None, limit: int = 1000) -> int:
    """Wake up to ``limit`` waiting jobs whose wait's timeout passed (by the database's clock,
    or ``now``); return how many. The body takes the timeout at the call."""
    due = Checkpoint.objects.using(alias).filter(
        kind=Checkpoint.Kind.WAIT, result__isnull=True, wakes_at__isnull=False,
        wakes_at__lte=Now() if now is None else now,
    )  # fmt: skip
    ids = list(due.order_by("wakes_at").values_list("job_id", flat=True)[:limit])
    if not ids:
        return 0
    with transaction.atomic(using=alias):
        return _wake(Job.objects.using(alias).filter(pk__in=ids, status=Status.WAITING))


def next_timeout(alias: str) -> datetime | None:
    """When the earliest open wait times out, if one has a timeout."""
    return (
        Checkpoint.objects.using(alias)
        .filter(kind=Checkpoint.Kind.WAIT, result__isnull=True, wakes_at__isnull=False)
        .order_by("wakes_at")
        .values_list("wakes_at", flat=True)
        .first()
    )


def _open_waits() -> QuerySet[Checkpoint]:
    """The unanswered waits of the outer query's job."""
    return Checkpoint.objects.filter(
        job=OuterRef("pk"), kind=Checkpoint.Kind.WAIT, result__isnull=True
    )


def _kept(alias: str, job_id: int, workflow_id: int | None) -> QuerySet[Signal]:
    mine = Q(job_id=job_id)
    if workflow_id is not None:
        mine |= Q(workflow_id=workflow_id)
    return Signal.objects.using(alias).filter(mine, delivered_at__isnull=True)


def _wake(jobs: QuerySet[Job]) -> int:
    """``waiting`` -> ``ready`` for ``jobs`` (in the current transaction), in line from now;
    their queues' workers are woken at commit."""
    (ready,) = transition(Status.WAITING, Status.READY)
    alias = jobs.db
    rows = list(
        jobs.select_for_update().order_by("pk")
        .values_list("pk", "task_name", "queue", "attempt")
    )  # fmt: skip
    if not rows:
        return 0
    woken = Job.objects.using(alias).filter(pk__in=[row[0] for row in rows],
                                            status=Status.WAITING)  # fmt: skip
    count = woken.update(status=ready, run_after=Now())
    signalling.woken(alias, rows)
    queues = sorted({row[2] for row in rows})
    driver_for(alias).notify(queues)
    transaction.on_commit(functools.partial(wakeup.wake, queues), using=alias)
    return count
