"""The lock order of every transaction that writes a workflow's jobs, and its one home.

One order, so that two transactions never wait for each other in a circle:

1. **workflow rows**, in id order (``lock_workflows``): the workflows of the jobs the
   transaction starts from (the attempts a worker records, the job an operation names, the
   prerequisites a new step names), before any of their job rows;
2. **job rows**, those jobs, in id order (``lock_jobs``: 1 and 2 for a writer that starts
   from jobs);
3. **their dependents' rows**, level by level (``Driver.count_down`` locks them in id order);
   the counters are written last, on the workflow rows already held.

A workflow's row is the gate of its jobs: two writers of one workflow meet there first, and
the second waits before it holds any job row the first may need, whatever the ids of the
graph's edges (a continuation, ``depends_on`` on a newer job). A worker's write never waits
for a workflow row: it takes its batch's workflow rows ``SKIP LOCKED`` first
(``Driver.record_many`` with ``skip_locked``) and keeps the outcomes of a held workflow for
its next pass (``db/locking.py``). Every other writer waits its turn (``lock_workflows``):
``cancel_workflow``, ``complete_job`` / ``fail_job``, ``cancel_job`` / ``cancel_jobs``,
``redrive`` / ``retry_job`` and a workflow's resumption, ``release_job``, a step's
``context.add`` / ``continue_with``, a job naming others in ``depends_on``. Rows are taken
``FOR NO KEY UPDATE`` (PostgreSQL), the lock a counter update takes: a job inserted into the
workflow (its foreign key's ``KEY SHARE``) does not wait for them.

Whoever adds steps to a workflow or brings one of its steps back writes nothing into a
workflow ``lock_workflows`` answers as cancelled; ``cancel_workflow`` marks it under the same
lock before it reads its jobs, so such a write and the cancellation never cross.

One case is outside the order: a dependent in another workflow than its prerequisite (a job
naming jobs of two workflows in ``depends_on`` joins the first one's). The prerequisite's
ending counts it down and writes its workflow's counters after the job rows; the bounded
waits of ``db/locking.py`` (a worker's write is retried row by row, an operation after a
deadlock) cover it. SQLite has one writer at a time: the order costs nothing there.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import QuerySet

from ..models import Job, Workflow


def lock_workflows(alias: str, ids: Iterable[int | None]) -> frozenset[int]:
    """Lock the rows of these workflows (in id order) until the transaction ends; return the
    ids of those an operator cancelled (``cancel_workflow``). ``None`` ids are ignored.

    PostgreSQL: ``FOR NO KEY UPDATE``, the lock a counter update takes: it waits for another
    writer of the workflow, not for a job being inserted into it. SQLite: one writer at a time
    already (``BEGIN IMMEDIATE``)."""
    wanted = sorted({pk for pk in ids if pk is not None})
    if not wanted:
        return frozenset()
    rows = (
        Workflow.objects.using(alias)
        .select_for_update(no_key=True)
        .filter(pk__in=wanted)
        .order_by("pk")
        .values_list("pk", "cancel_requested_at")
    )
    return frozenset(pk for pk, cancelled in rows if cancelled is not None)


class _Joined(Exception):
    """A job of the selection joined a workflow between the read and the locks."""


def lock_jobs(jobs: QuerySet[Job], *fields: str) -> tuple[frozenset[int], list[tuple[Any, ...]]]:
    """Lock the workflows of ``jobs`` (``lock_workflows``), then the jobs' rows in id order,
    in the caller's transaction. Returns the ids of those workflows an operator cancelled,
    and the jobs as ``(id, workflow_id, *fields)``, read under their locks.

    A job's workflow is known before its row is locked: it is set when the job is inserted
    and changes once at most, from none (a job in no workflow joins one: ``depends_on``
    naming it, a lone job fanning out). If that happened between the read and the locks, the
    locks are given back (a savepoint rolled back) and taken again in order.

    >>> cancelled, rows = lock_jobs(Job.objects.filter(pk=job_id), "status")
    """
    alias = jobs.db
    columns = ("id", "workflow_id", *fields)
    for last in (False, False, True):
        wanted = set(jobs.order_by().values_list("workflow_id", flat=True).distinct())
        try:
            with transaction.atomic(using=alias):
                cancelled = lock_workflows(alias, wanted)
                rows = list(jobs.select_for_update().order_by("id").values_list(*columns))
                joined = {row[1] for row in rows} - wanted
                if joined and not last:
                    raise _Joined
                # Rare (each job moves once at most, and two tries met a move): the
                # workflows joined since are taken now, after the jobs.
                return cancelled | lock_workflows(alias, joined), rows
        except _Joined:
            continue
    raise AssertionError("unreachable")
