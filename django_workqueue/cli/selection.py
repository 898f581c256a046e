"""Which jobs a subcommand acts on: ids, or filters (``--queue``, ``--task``, ``--status``,
``--error-type``, ``--error``, ``--older-than``), as one queryset.

Errors are filtered as ``disclosure`` decides: on their type for everyone, on their text
(messages, tracebacks) only for a user who may read all of it, so that ``--error`` cannot
confirm guesses of what is hidden from the user.

The argument validators are plain functions that raise ``argparse.ArgumentTypeError`` with a
message naming the fix, as Django's commands do.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from django.db.models.functions import Coalesce, Now

from ..disclosure import Clearance, error_type_filter
from ..exceptions import InvalidFilterValue
from ..filter_values import filter_text, object_id
from ..models import Job
from ..states import Status

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")


def duration(value: str) -> timedelta:
    """``30s``, ``15m``, ``6h``, ``7d`` or ``2w``."""
    match = _DURATION.match(value.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a duration; write a number and a unit (s, m, h, d or w), "
            f"e.g. 30m or 7d"
        )
    number, unit = match.groups()
    return timedelta(seconds=float(number) * _UNITS[unit])


def status(value: str) -> str:
    if value not in Status.values:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a job status; use one of {', '.join(Status.values)}"
        )
    return value


def job_id(value: str) -> int:
    try:
        return object_id(value, "job")
    except InvalidFilterValue as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def name(value: str) -> str:
    """A queue's or a task's name, as a filter takes it."""
    try:
        return filter_text(value, "name")
    except InvalidFilterValue as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Filters:
    """The filters of a subcommand; empty ones match every job."""

    queues: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    error_types: tuple[str, ...] = ()
    """Jobs with a recorded error of one of these types (full names)."""
    error: str | None = None
    """A piece of any recorded error of the job (type, message or traceback), any case."""
    older_than: timedelta | None = None
    """Finished jobs by ``finished_at``, the others by ``enqueued_at``."""
    clearance: Clearance = Clearance(payload=False, tracebacks=False)  # noqa: RUF009 (frozen)
    """Who filters: ``error`` needs a clearance to read all of an error."""

    def __post_init__(self) -> None:
        if self.error:
            self.clearance.error_text_filter(self.error)  # refuse now, naming the fix

    @property
    def given(self) -> bool:
        return bool(
            self.queues or self.tasks or self.statuses or self.error_types or self.error
            or self.older_than
        )  # fmt: skip

    def apply(self, jobs: QuerySet[Job]) -> QuerySet[Job]:
        if self.queues:
            jobs = jobs.filter(queue__in=self.queues)
        if self.tasks:
            jobs = jobs.filter(task_name__in=self.tasks)
        if self.statuses:
            jobs = jobs.filter(status__in=self.statuses)
        if self.error_types:
            jobs = jobs.filter(error_type_filter(*self.error_types))
        if self.error:
            jobs = jobs.filter(self.clearance.error_text_filter(self.error))
        if self.older_than is not None:
            jobs = jobs.alias(last_change=Coalesce("finished_at", "enqueued_at")).filter(
                last_change__lt=Now() - self.older_than
            )
        return jobs


def add_filter_arguments(parser: argparse.ArgumentParser) -> None:
    """The filter options, shared by the subcommands that select jobs."""
    parser.add_argument(
        "--queue", action="append", default=[], type=name, metavar="NAME",
        help="Jobs of this queue (repeat).",
    )  # fmt: skip
    parser.add_argument(
        "--task", action="append", default=[], type=name, metavar="NAME",
        help="Jobs of this task, by its registered name (repeat).",
    )  # fmt: skip
    parser.add_argument(
        "--status", action="append", default=[], type=status, metavar="STATUS",
        help=f"Jobs in this status (repeat): {', '.join(Status.values)}.",
    )  # fmt: skip
    parser.add_argument(
        "--error-type", action="append", default=[], type=name, metavar="TYPE", dest="error_type",
        help="Jobs with an error of this type, its full name: builtins.ValueError (repeat).",
    )  # fmt: skip
    parser.add_argument(
        "--error", metavar="TEXT",
        help="Jobs with an error containing TEXT (type, message or traceback; any case). With "
        "--user, the user needs view_job_payload and view_job_traceback.",
    )  # fmt: skip
    parser.add_argument(
        "--older-than", type=duration, metavar="AGE",
        help="Jobs finished (or, if not finished, enqueued) more than AGE ago: 30m, 6h, 7d.",
    )  # fmt: skip


def filters_from(options: dict[str, Any], clearance: Clearance) -> Filters:
    """The filters of the options, for a user of ``clearance``; raises
    ``disclosure.ErrorTextHidden`` for ``--error`` without the clearance to read errors."""
    return Filters(
        queues=tuple(options.get("queue") or ()),
        tasks=tuple(options.get("task") or ()),
        statuses=tuple(options.get("status") or ()),
        error_types=tuple(options.get("error_type") or ()),
        error=options.get("error") or None,
        older_than=options.get("older_than"),
        clearance=clearance,
    )
