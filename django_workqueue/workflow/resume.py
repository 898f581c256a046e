"""Resuming a workflow from a redriven step.

When a failed job is redriven (back to ``ready``), the dependents that were cancelled because
of it — directly, or further down the graph — wait again (``blocked``), with their counters
recounted from their prerequisites as they stand. One whose condition still cannot be met
(another prerequisite failed too, or an operator cancelled one) stays cancelled. A job an
operator cancelled is never brought back: only cancellations whose reason is an unmet run
condition are undone.

Counters are recounted by ``prerequisites.standing``, from the prerequisites' statuses read
under their row locks. A prerequisite ending concurrently counts its ending only on dependents
that are blocked when it commits, so it must be either seen ended here (this transaction waits
for its commit) or end after this one commits (it waits for the lock), when the dependent is
blocked again. Nothing comes back in a workflow an operator cancelled (``locks.py``).
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from django.db.models import Exists, OuterRef, QuerySet

from ..models import Dependency, Job, Workflow
from ..states import AWAITING_PREREQUISITES, Status, transition
from . import conditions
from .effects import UNMET_TYPE, reopen
from .locks import lock_jobs
from .prerequisites import standing


def revivable(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """The jobs of ``jobs`` that may leave a terminal status again (redrive, a workflow's
    resumption): none of a workflow an operator cancelled. (An ``Exists``, not a join, so that
    a ``select_for_update`` of the jobs locks no workflow row: ``lock_jobs`` takes those.)"""
    cancelled = Workflow.objects.filter(
        pk=OuterRef("workflow_id"), cancel_requested_at__isnull=False
    )
    return jobs.exclude(Exists(cancelled))


def resume(alias: str, redriven: Sequence[tuple[int, int | None]]) -> int:
    """Count redriven jobs (id, workflow id) open again in their workflows and bring back the
    dependents cancelled because of them; return how many dependents came back. The caller
    holds the redriven jobs' rows and has checked their workflows (``locks.lock_jobs``)."""
    counts: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for _, workflow_id in redriven:
        if workflow_id is not None:
            counts[workflow_id][Status.FAILED] += 1
    jobs = Job.objects.using(alias)
    edges = Dependency.objects.using(alias)
    (blocked,) = transition(Status.CANCELLED, Status.BLOCKED)
    frontier = [pk for pk, _ in redriven]
    resumed = 0
    while frontier:
        dependents = edges.filter(prerequisite_id__in=frontier).values("job_id")
        _wait_again(alias, dependents)
        # Their workflows' rows, then theirs, then their prerequisites' (locks.py).
        cancelled, rows = lock_jobs(
            revivable(jobs).filter(id__in=dependents, status=Status.CANCELLED),
            "run_condition", "errors",
        )  # fmt: skip
        candidates = [
            (pk, condition, workflow_id)
            for pk, workflow_id, condition, errors in rows
            if errors and errors[-1].get("type") == UNMET_TYPE
        ]
        stand = standing(alias, [c[0] for c in candidates])
        frontier = []
        for pk, condition, workflow_id in candidates:
            now = stand.get(pk)
            if workflow_id in cancelled or now is None:
                continue
            if now.verdict(condition) != conditions.Verdict.WAIT:
                continue  # still cannot run (or nothing to wait for): it stays as it ended
            jobs.filter(pk=pk, status=Status.CANCELLED).update(
                status=blocked, waiting_on=now.open, prerequisites_succeeded=now.succeeded,
                finished_at=None, cancel_requested_at=None,
            )  # fmt: skip
            if workflow_id is not None:
                counts[workflow_id][Status.CANCELLED] += 1
            frontier.append(pk)
            resumed += 1
    reopen(alias, counts)
    return resumed


_NOT_STARTED = (*AWAITING_PREREQUISITES, Status.READY, Status.SCHEDULED)
"""Dependents that have not started: a prerequisite open again is waited for again."""


def _wait_again(alias: str, dependents: QuerySet[Any]) -> None:
    """The dependents of jobs open again (redriven, or brought back) that have not started
    count them as open again, recounted by ``standing``: a ``blocked`` or ``held`` one waits
    for them as well, and a released one (``ready``, ``scheduled``) whose run condition now
    says wait goes back to ``blocked``. One that started has used its prerequisites' endings:
    it is left as it is; so is one of a workflow an operator cancelled."""
    jobs = Job.objects.using(alias)
    # Their workflows' rows, then theirs, then their prerequisites' (locks.py).
    cancelled, found = lock_jobs(
        jobs.filter(id__in=dependents, status__in=_NOT_STARTED), "status", "run_condition"
    )
    found = [row for row in found if row[1] not in cancelled]
    stand = standing(alias, [pk for pk, *_ in found])
    for pk, _, status, condition in found:
        now = stand[pk]
        changes: dict[str, Any] = {"waiting_on": now.open, "prerequisites_succeeded": now.succeeded}
        if status not in AWAITING_PREREQUISITES:
            if now.verdict(condition) != conditions.Verdict.WAIT:
                continue  # it may still run as released (any_succeeded: one did)
            (changes["status"],) = transition(Status(status), Status.BLOCKED)
        jobs.filter(pk=pk, status=status).update(**changes)


def prerequisites_open(alias: str, ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """{job id: (prerequisites not finished, prerequisites succeeded)} for those of ``ids``
    that still wait on some (``prerequisites.standing``: their rows are locked)."""
    return {pk: (now.open, now.succeeded) for pk, now in standing(alias, ids).items() if now.open}
