"""Resuming a workflow from a redriven step.

When a failed job is redriven (back to ``ready``), the dependents that were cancelled because
of it — directly, or further down the graph — wait again (``blocked``), with their counters
recounted from their prerequisites as they stand. One whose condition still cannot be met
(another prerequisite failed too, or an operator cancelled one) stays cancelled. A job an
operator cancelled is never brought back: only cancellations whose reason is an unmet run
condition are undone.

Counters are recounted from the prerequisites' statuses read under their row locks. A
prerequisite ending concurrently counts its ending only on dependents that are blocked when it
commits, so it must be either seen ended here (this transaction waits for its commit) or end
after this one commits (it waits for the lock), when the dependent is blocked again.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from ..models import Dependency, Job, Workflow
from ..states import ACTIVE, Status, transition
from . import conditions
from .effects import UNMET_TYPE, reopen


def revivable(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """The jobs of ``jobs`` that may leave a terminal status again (redrive, a workflow's
    resumption): none of a workflow an operator cancelled. (An ``Exists``, not a join, so that
    a ``select_for_update`` of the jobs locks no workflow row.)"""
    cancelled = Workflow.objects.filter(
        pk=OuterRef("workflow_id"), cancel_requested_at__isnull=False
    )
    return jobs.exclude(Exists(cancelled))


def resume(alias: str, redriven: Sequence[tuple[int, int | None]]) -> int:
    """Count redriven jobs (id, workflow id) open again in their workflows and bring back the
    dependents cancelled because of them; return how many dependents came back."""
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
        candidates = [
            (pk, condition, workflow_id)
            for pk, condition, workflow_id, errors in revivable(jobs.select_for_update())
            .filter(id__in=dependents, status=Status.CANCELLED)
            .order_by("id")
            .values_list("id", "run_condition", "workflow_id", "errors")
            if errors and errors[-1].get("type") == UNMET_TYPE
        ]
        _lock_prerequisites(alias, [c[0] for c in candidates])
        standing: dict[int, list[str]] = collections.defaultdict(list)
        for pk, status in edges.filter(job_id__in=[c[0] for c in candidates]).values_list(
            "job_id", "prerequisite__status"
        ):
            standing[pk].append(status)
        frontier = []
        for pk, condition, workflow_id in candidates:
            statuses = standing[pk]
            waiting = sum(status in ACTIVE for status in statuses)
            succeeded = statuses.count(Status.SUCCEEDED)
            unmet = len(statuses) - waiting - succeeded > 0
            if conditions.verdict(condition, waiting, succeeded, unmet) != conditions.Verdict.WAIT:
                continue  # still cannot run (or nothing to wait for): it stays as it ended
            jobs.filter(pk=pk, status=Status.CANCELLED).update(
                status=blocked, waiting_on=waiting, prerequisites_succeeded=succeeded,
                finished_at=None, cancel_requested_at=None,
            )  # fmt: skip
            if workflow_id is not None:
                counts[workflow_id][Status.CANCELLED] += 1
            frontier.append(pk)
            resumed += 1
    reopen(alias, counts)
    return resumed


def prerequisites_open(alias: str, ids: Sequence[int]) -> dict[int, tuple[int, int]]:
    """{job id: (prerequisites not finished, prerequisites succeeded)} for those of ``ids``
    that still wait on some."""
    if not ids:
        return {}
    _lock_prerequisites(alias, ids)
    rows = (
        Dependency.objects.using(alias)
        .filter(job_id__in=ids)
        .values("job_id")
        .annotate(
            open=Count("id", filter=Q(prerequisite__status__in=ACTIVE)),
            succeeded=Count("id", filter=Q(prerequisite__status=Status.SUCCEEDED)),
        )
        .values_list("job_id", "open", "succeeded")
    )
    return {pk: (n, ok) for pk, n, ok in rows if n > 0}


def _lock_prerequisites(alias: str, dependents: Sequence[int]) -> None:
    """Lock the prerequisites of ``dependents`` (in id order) so that their statuses, read
    next, cannot change before this transaction commits."""
    if not dependents:
        return
    prerequisites = Dependency.objects.using(alias).filter(job_id__in=dependents)
    locked = Job.objects.using(alias).select_for_update().order_by("id")
    list(locked.filter(id__in=prerequisites.values("prerequisite_id")).values_list("id"))
