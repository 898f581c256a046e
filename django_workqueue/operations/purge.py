"""Deleting chosen finished jobs now: the admin's purge of selected jobs.

Retention (``maintenance/retention.py``) deletes by age; this deletes the jobs an operator
picked, by the same rule that keeps workflows whole: only finished jobs outside any workflow
that no other job depends on. A workflow's jobs go with their workflow, by retention.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import transaction
from django.db.models import Exists, OuterRef, QuerySet

from ..models import Dependency, Job
from ..states import TERMINAL
from .jobs import OperationResult, _select, batches


def purgeable(jobs: QuerySet[Job]) -> QuerySet[Job]:
    """The jobs of ``jobs`` that ``purge_jobs`` deletes (its dry run)."""
    dependents = Dependency.objects.using(jobs.db).filter(prerequisite=OuterRef("pk"))
    return jobs.filter(status__in=TERMINAL, workflow__isnull=True).exclude(Exists(dependents))


def purge_jobs(
    jobs: QuerySet[Job] | Iterable[Job | int], *, alias: str | None = None
) -> OperationResult:
    """Delete the finished jobs of ``jobs`` (a queryset, ids or jobs) that are outside any
    workflow and have no dependents; the others are kept and counted in the message. Deletes
    ``BATCH_SIZE`` jobs per transaction.

    >>> purge_jobs(Job.objects.filter(status="succeeded", queue="reports"))
    """
    selection = _select(jobs, alias)
    deletable = purgeable(selection)
    deleted = 0
    for batch in batches(deletable):
        ids = [pk for (pk,) in batch]
        with transaction.atomic(using=selection.db):
            # Guarded again under the delete: a job redriven, or given a dependent, since the
            # batch was read stays.
            _, per_model = deletable.filter(pk__in=ids).only("pk").delete()
        deleted += per_model.get(Job._meta.label, 0)
    message = f"{deleted} finished job(s) deleted"
    kept = selection.filter(status__in=TERMINAL).exclude(pk__in=deletable.values("pk"))
    if kept.exists():
        message += (
            "; jobs of workflows and jobs other jobs depend on are kept (retention deletes them)"
        )
    return OperationResult(
        action="purged" if deleted else "unchanged", count=deleted, message=message
    )
