"""The dead-letter queue grouped by error type (the type of a failed job's last error), and
"redrive all like this".

Grouping reads the most recent ``RECENT`` failed jobs only, newest first through the
``(status, finished_at)`` index: the dashboard's cost does not grow with the queue. Redriving a
group goes through every failed job with an error of the type (``disclosure.error_type_filter``:
the type, never the text of a message), a batch at a time by id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet

from .. import operations
from ..disclosure import error_type_filter
from ..models import Job
from ..operations.jobs import batches
from ..states import Status

RECENT = 500
"""How many of the newest failed jobs the grouping reads."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterGroup:
    error_type: str
    count: int
    """Jobs of the group among the ``RECENT`` newest failed jobs."""
    latest_id: int


def last_error_type(errors: Any) -> str:
    if isinstance(errors, list) and errors and isinstance(errors[-1], dict):
        return str(errors[-1].get("type") or "unknown")
    return "unknown"


def dead_letter_groups(jobs: QuerySet[Job], recent: int = RECENT) -> list[DeadLetterGroup]:
    """The newest ``recent`` failed jobs of ``jobs`` by their last error's type, largest
    group first."""
    rows = (
        jobs.filter(status=Status.FAILED)
        .order_by("-finished_at")
        .values_list("id", "errors")[:recent]
    )
    counts: dict[str, list[int]] = {}
    for pk, errors in rows:
        counts.setdefault(last_error_type(errors), []).append(pk)
    groups = [
        DeadLetterGroup(error_type=name, count=len(ids), latest_id=max(ids))
        for name, ids in counts.items()
    ]
    return sorted(groups, key=lambda group: (-group.count, group.error_type))


def failed_like(jobs: QuerySet[Job], error_type: str) -> Iterator[list[int]]:
    """Batches of ids of failed jobs whose last error is of ``error_type``."""
    candidates = jobs.filter(error_type_filter(error_type), status=Status.FAILED)
    for batch in batches(candidates, "errors"):
        yield [pk for pk, errors in batch if last_error_type(errors) == error_type]


def redrive_like(jobs: QuerySet[Job], error_type: str) -> int:
    """Redrive every failed job whose last error is of ``error_type``; return how many."""
    total = 0
    for ids in failed_like(jobs, error_type):
        if ids:
            total += operations.redrive(ids, alias=jobs.db).count
    return total
