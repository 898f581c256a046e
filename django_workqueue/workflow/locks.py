"""The lock order of every transaction that writes a workflow's jobs, and its one home.

One order, so that two transactions never wait for each other in a circle:

1. **job rows** — the jobs the transaction starts from (the attempts a worker records, the job
   an operation names, the prerequisites a new step names), in id order;
2. **their dependents' rows**, level by level (``Driver.count_down`` locks them in id order);
3. **workflow rows**, in id order (``lock_workflows``), before anything is written that the
   workflow's cancellation must see, and their counters last.

A worker's completion cannot go the other way round: its fenced ``UPDATE`` of the attempt's row
is the first thing it does, before it knows the workflow. So ``cancel_workflow`` does not hold
its workflow's row while it waits for job rows: it marks the workflow cancelled under the row's
lock in a transaction of its own, then cancels the jobs in the order above.

Whoever adds steps to a workflow (a step's ``context.add`` / ``continue_with``, ``depends_on``
joining its workflow) or brings one of its steps back (``redrive``, a workflow's resumption)
takes the workflow's row with ``lock_workflows`` and writes nothing into a workflow it answers
as cancelled. The cancellation's mark and such a write therefore never cross: a write that took
the row first commits before the mark (and the cancellation's scan, which starts after the mark,
sees what it wrote); one that comes after sees the mark.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..models import Workflow


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
