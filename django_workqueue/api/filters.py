"""The job filters of ``GET jobs/`` (query parameters) and ``POST jobs/redrive/`` (a JSON body),
parsed into one ``JobFilters`` whose errors name the parameter and what it accepts.

Unknown parameters are refused too: a misspelt filter must not widen a list, let alone a
redrive, to every job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet
from django.utils.dateparse import parse_datetime
from rest_framework.exceptions import ValidationError

from ..disclosure import error_type_filter
from ..exceptions import InvalidFilterValue
from ..filter_values import filter_text, object_id
from ..models import Job
from ..states import Status

MAX_VALUES = 50
"""The most values one list filter (``status``, ``queue``, ``task``, ``error_type``) takes."""
MAX_IDS = 1000
"""The most job ids the ``ids`` filter takes."""
_NAMES = ("status", "queue", "task", "error_type")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JobFilters:
    """Filters on jobs; empty ones match every job. Values no query can take (an id beyond
    64 bits, a name with a NUL) are refused here, whoever built the filters: a 400 naming
    the parameter (``filter_values.py``)."""

    ids: tuple[int, ...] = ()
    statuses: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    error_types: tuple[str, ...] = ()
    """Jobs with a recorded error of one of these types (full names, e.g.
    ``builtins.ValueError``); never the text of errors (``disclosure.error_type_filter``)."""
    workflow: int | None = None
    created_after: datetime | None = None
    """Jobs enqueued at or after this time."""
    created_before: datetime | None = None
    """Jobs enqueued before this time."""

    def __post_init__(self) -> None:
        problems: dict[str, str] = {}
        for name, values in (("status", self.statuses), ("queue", self.queues),
                             ("task", self.tasks), ("error_type", self.error_types)):  # fmt: skip
            try:
                for value in values:
                    filter_text(value, name)
            except InvalidFilterValue as exc:
                problems[name] = str(exc)
        for name, ids, what in (
            ("ids", self.ids, "job"),
            ("workflow", (self.workflow,), "workflow"),
        ):
            try:
                for number in ids:
                    if number is not None:
                        object_id(number, what)
            except InvalidFilterValue as exc:
                problems[name] = str(exc)
        if problems:
            raise ValidationError(problems)

    @property
    def given(self) -> bool:
        return any(
            (self.ids, self.statuses, self.queues, self.tasks, self.error_types,
             self.workflow is not None, self.created_after, self.created_before)
        )  # fmt: skip

    def apply(self, jobs: QuerySet[Job]) -> QuerySet[Job]:
        if self.ids:
            jobs = jobs.filter(pk__in=self.ids)
        if self.error_types:
            jobs = jobs.filter(error_type_filter(*self.error_types))
        if self.statuses:
            jobs = jobs.filter(status__in=self.statuses)
        if self.queues:
            jobs = jobs.filter(queue__in=self.queues)
        if self.tasks:
            jobs = jobs.filter(task_name__in=self.tasks)
        if self.workflow is not None:
            jobs = jobs.filter(workflow_id=self.workflow)
        if self.created_after is not None:
            jobs = jobs.filter(enqueued_at__gte=self.created_after)
        if self.created_before is not None:
            jobs = jobs.filter(enqueued_at__lt=self.created_before)
        return jobs

    def as_target(self) -> dict[str, Any]:
        """The filters given, as JSON (an audit record's target)."""
        chosen = {
            "ids": list(self.ids), "status": list(self.statuses), "queue": list(self.queues),
            "task": list(self.tasks), "error_type": list(self.error_types),
            "workflow": self.workflow,
            "created_after": self.created_after and self.created_after.isoformat(),
            "created_before": self.created_before and self.created_before.isoformat(),
        }  # fmt: skip
        return {key: value for key, value in chosen.items() if value not in (None, [])}


FILTERS = (
    "ids",
    "status",
    "queue",
    "task",
    "error_type",
    "workflow",
    "created_after",
    "created_before",
)


def from_query(params: Any, *, allowed: Iterable[str] = ()) -> JobFilters:
    """Filters from query parameters: ``ids``, ``status``, ``queue``, ``task`` and
    ``error_type`` repeated or comma-separated; ``workflow`` an id; ``created_after`` /
    ``created_before`` ISO 8601 times (UTC when no offset is given). ``allowed`` names other
    parameters the view reads."""
    refuse_unknown(params, [*FILTERS, *allowed])
    values: dict[str, Any] = {}
    for name in ("ids", *_NAMES):
        items = [part.strip() for value in params.getlist(name) for part in value.split(",")]
        values[name] = [item for item in items if item]
    for name in ("workflow", "created_after", "created_before"):
        values[name] = params.get(name)
    return parse(values)


def refuse_unknown(params: Any, known: Iterable[str]) -> None:
    """400 naming every query parameter that is not one of ``known``."""
    known = list(known)
    unknown = sorted(set(params.keys()) - set(known))
    if unknown:
        names = ", ".join(known) or "none"
        raise ValidationError(
            {name: f"unknown parameter; the parameters are: {names}" for name in unknown}
        )


def parse(values: Mapping[str, Any]) -> JobFilters:
    """Filters from a mapping of the ``FILTERS`` (as JSON values); errors name each bad one."""
    problems: dict[str, str] = {}
    lists: dict[str, tuple[str, ...]] = {}
    for name in _NAMES:
        value = values.get(name)
        if value is None:
            value = []
        if isinstance(value, str):
            value = [value]
        if (
            not isinstance(value, list)
            or not all(isinstance(item, str) for item in value)
            or len(value) > MAX_VALUES
        ):
            problems[name] = f"give at most {MAX_VALUES} names (texts)"
            continue
        lists[name] = tuple(dict.fromkeys(value))
    bad = [status for status in lists.get("status", ()) if status not in Status.values]
    if bad:
        problems["status"] = (
            f"{', '.join(map(repr, bad))} is not a job status; the statuses are: "
            f"{', '.join(Status.values)}"
        )
    ids = _ids(values.get("ids"), problems)
    workflow = _workflow(values.get("workflow"), problems)
    after = _time(values.get("created_after"), "created_after", problems)
    before = _time(values.get("created_before"), "created_before", problems)
    if problems:
        raise ValidationError(problems)
    return JobFilters(  # which checks each name and id
        ids=ids, statuses=lists["status"], queues=lists["queue"], tasks=lists["task"],
        error_types=lists["error_type"], workflow=workflow, created_after=after,
        created_before=before,
    )  # fmt: skip


def _ids(value: Any, problems: dict[str, str]) -> tuple[int, ...]:
    if value is None or value == "":
        return ()
    items = value if isinstance(value, list) else [value]
    numbers = [_whole(item) for item in items]
    if len(items) > MAX_IDS or any(number is None for number in numbers):
        problems["ids"] = f"give at most {MAX_IDS} job ids (positive whole numbers)"
        return ()
    return tuple(dict.fromkeys(number for number in numbers if number is not None))


def _whole(value: Any) -> int | None:
    """A positive 64-bit id from JSON (a number, or its digits), else None."""
    try:
        return object_id(value, "job")
    except InvalidFilterValue:
        return None


def _workflow(value: Any, problems: dict[str, str]) -> int | None:
    if value is None or value == "":
        return None
    try:
        return object_id(value, "workflow")
    except InvalidFilterValue as exc:
        problems["workflow"] = str(exc)
        return None


def _time(value: Any, name: str, problems: dict[str, str]) -> datetime | None:
    if value is None or value == "":
        return None
    parsed = None
    if isinstance(value, str):
        try:
            parsed = parse_datetime(value.strip())
        except ValueError:  # well formed but impossible, e.g. February 30th
            parsed = None
    if parsed is not None:
        if parsed.tzinfo is None:
            return parsed.replace(tzinfo=UTC)
        try:  # in UTC: PostgreSQL refuses offsets beyond ±15:59, which ISO 8601 allows
            return parsed.astimezone(UTC)
        except OverflowError:  # before the year 1 or after 9999 in UTC
            pass
    problems[name] = "give an ISO 8601 date and time, e.g. 2026-01-31T12:00:00Z"
    return None
