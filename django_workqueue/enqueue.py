"""Enqueue: validate, insert on the caller's connection (joining its transaction), wake workers.

Nothing is written when validation fails. The insert uses the connection of the jobs database
(``WORKQUEUE["DATABASE"]``), so a job enqueued inside ``transaction.atomic()`` exists if and only
if that transaction commits. One statement inserts any number of jobs (``Driver.insert``); on
PostgreSQL the same statement sends a ``NOTIFY`` per queue, which PostgreSQL delivers at commit
and folds with duplicates. Workers in this process are woken with ``on_commit``.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.utils import timezone

from . import payload, wakeup
from .conf import workqueue_settings as conf
from .db import NewJob, driver_for
from .exceptions import (
    InvalidOption,
    InvalidPriority,
    NaiveDatetime,
    UniqueKeyConflict,
    UnknownQueue,
)
from .models import Job
from .payload import describe
from .registry import MAX_ATTEMPTS
from .states import ACTIVE, Status

if TYPE_CHECKING:
    from .registry import Task


def enqueue_one(task: Task, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Job:
    template = job_template(task)
    call = encode_call(args, kwargs, task.name)
    task.spec.check_arguments(call.args, call.kwargs)
    return _enqueue(template, [call])[0]


def enqueue_many(task: Task, calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]) -> list[Job]:
    template = job_template(task)
    if template.unique_key is not None:
        raise InvalidOption(
            f"{task.name}.enqueue_many() cannot share one unique_key among many jobs; "
            f"enqueue unique jobs one at a time"
        )
    encoded = []
    for index, call in enumerate(calls):
        try:
            args, kwargs = call
        except (TypeError, ValueError):
            raise InvalidOption(
                f"{task.name}.enqueue_many(): item {index} is not an (args, kwargs) pair"
            ) from None
        checked = encode_call(args, kwargs, f"{task.name} item {index}")
        task.spec.check_arguments(checked.args, checked.kwargs, item=index)
        encoded.append(checked)
    return _enqueue(template, encoded) if encoded else []


def _enqueue(template: NewJob, calls: list[Call]) -> list[Job]:
    alias = conf.DATABASE
    if alias != DEFAULT_DB_ALIAS and connections[DEFAULT_DB_ALIAS].in_atomic_block:
        # The caller writes to another database inside a transaction of its own: insert when
        # (and only if) that transaction commits. The jobs get their ids then.
        jobs = [_unsaved(template, call) for call in calls]
        transaction.on_commit(
            functools.partial(_insert, template, calls, alias, jobs), DEFAULT_DB_ALIAS
        )
        return jobs
    return _insert(template, calls, alias)


def job_template(task: Task) -> NewJob:
    """Validate the task's options (once per call of enqueue or enqueue_many)."""
    spec, options, owner = task.spec, task.options, task.name
    queue = options.queue or spec.queue
    if queue not in conf.QUEUES:
        raise UnknownQueue(
            f"{owner}: queue {describe(queue)} is not one of WORKQUEUE['QUEUES'] "
            f"{list(conf.QUEUES)}; add it there or enqueue to one of those"
        )
    priority = spec.priority if options.priority is None else options.priority
    if isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100:
        raise InvalidPriority(
            f"{owner}: priority must be an integer from -100 to 100 (higher runs first), "
            f"got {describe(priority)}"
        )
    if options.unique_key is not None:
        if not isinstance(options.unique_key, str) or not 0 < len(options.unique_key) <= 255:
            raise InvalidOption(f"{owner}: unique_key must be a string of 1 to 255 characters")
        problem = payload.unstorable_text(options.unique_key)
        if problem is not None:  # the database would refuse it, or abort the transaction
            raise InvalidOption(f"{owner}: unique_key {problem}")
    if options.run_at is not None and options.delay is not None:
        raise InvalidOption(f"{owner}: give delay or run_at, not both")
    deadline = options.deadline
    return NewJob(
        task_name=spec.name,
        queue=queue,
        priority=priority,
        max_attempts=_positive_int(
            owner, "max_attempts", options.max_attempts, spec.max_attempts, MAX_ATTEMPTS
        ),
        lease_seconds=_positive_int(
            owner, "lease_seconds", options.lease_seconds, spec.lease_seconds
        ),
        unique_key=options.unique_key,
        run_at=None if options.run_at is None else _aware(owner, "run_at", options.run_at),
        delay=None if options.delay is None else _seconds(owner, "delay", options.delay),
        deadline_at=_aware(owner, "deadline", deadline) if isinstance(deadline, datetime) else None,
        deadline_in=(
            None
            if deadline is None or isinstance(deadline, datetime)
            else _seconds(owner, "deadline", deadline)
        ),
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Call:
    """One job's arguments, validated and encoded."""

    args: list[Any]
    kwargs: dict[str, Any]
    args_json: str
    kwargs_json: str


def encode_call(args: Any, kwargs: Any, owner: str) -> Call:
    """Validate arguments as JSON within the size limit and encode them once."""
    if not isinstance(args, list | tuple):
        raise InvalidOption(f"{owner}: args must be a list or tuple, not {type(args).__name__}")
    if not isinstance(kwargs, Mapping):
        raise InvalidOption(f"{owner}: kwargs must be a mapping, not {type(kwargs).__name__}")
    args, kwargs = list(args), dict(kwargs)
    args_json = payload.encode(args, "args", owner)
    kwargs_json = payload.encode(kwargs, "kwargs", owner)
    size = len(args_json) + len(kwargs_json)  # characters are bytes when all are ASCII
    if not (args_json.isascii() and kwargs_json.isascii()):
        size = len(args_json.encode()) + len(kwargs_json.encode())
    payload.check_size(size, conf.MAX_PAYLOAD_BYTES, f"args of {owner} are", "MAX_PAYLOAD_BYTES")
    return Call(args, kwargs, args_json, kwargs_json)


def _unsaved(template: NewJob, call: Call) -> Job:
    job = Job(
        task_name=template.task_name,
        queue=template.queue,
        priority=template.priority,
        args=call.args,
        kwargs=call.kwargs,
        status=Status.READY,
        max_attempts=template.max_attempts,
        lease_seconds=template.lease_seconds,
        unique_key=template.unique_key,
        deadline=template.deadline_at,
    )
    if template.run_at is not None:  # otherwise the database's clock sets it at insert
        job.run_after = template.run_at
    job.duplicate = False  # type: ignore[attr-defined]
    return job


def _insert(
    template: NewJob,
    calls: list[Call],
    alias: str,
    unsaved: list[Job] | None = None,
    tries: int = 3,
) -> list[Job]:
    driver = driver_for(alias)
    payloads = [(call.args_json, call.kwargs_json) for call in calls]
    if template.unique_key is not None:  # only ever one job: enqueue_many refuses unique keys
        try:
            with transaction.atomic(using=alias):
                rows = driver.insert(template, payloads)
        except IntegrityError:
            existing = (
                Job.objects.using(alias)
                .filter(
                    task_name=template.task_name,
                    unique_key=template.unique_key,
                    status__in=ACTIVE,
                )
                .first()
            )
            if existing is None:  # the holder finished between our insert and this read
                if tries <= 1:  # e.g. REPEATABLE READ: this transaction cannot see the holder
                    raise UniqueKeyConflict(
                        f"{template.task_name}: unique_key {template.unique_key!r} is held by a "
                        f"job this transaction cannot see; retry the transaction"
                    ) from None
                return _insert(template, calls, alias, unsaved, tries - 1)
            existing.duplicate = True  # type: ignore[attr-defined]
            return [existing]
    else:
        rows = driver.insert(template, payloads)
    transaction.on_commit(functools.partial(wakeup.wake, (template.queue,)), using=alias)
    if unsaved is not None:
        for job, pk in zip(unsaved, rows.ids, strict=True):
            job.pk, job.run_after, job.status = pk, rows.run_after, rows.status
            job.enqueued_at, job.deadline = rows.enqueued_at, rows.deadline
            job._state.adding, job._state.db = False, alias
        return unsaved
    shared = dict(
        _JOB_DEFAULTS,
        task_name=template.task_name, queue=template.queue, priority=template.priority,
        max_attempts=template.max_attempts, lease_seconds=template.lease_seconds,
        unique_key=template.unique_key, run_after=rows.run_after, deadline=rows.deadline,
        enqueued_at=rows.enqueued_at, status=rows.status,
    )  # fmt: skip
    return [_saved(alias, shared, call, pk) for call, pk in zip(calls, rows.ids, strict=True)]


def _saved(alias: str, shared: dict[str, Any], call: Call, pk: int) -> Job:
    """The inserted job as a model instance, built the way Django builds rows it reads."""
    values = {**shared, "id": pk, "args": call.args, "kwargs": call.kwargs, "errors": []}
    job = Job.from_db(alias, _JOB_FIELDS, [values[name] for name in _JOB_FIELDS])
    job.duplicate = False  # type: ignore[attr-defined]
    return job


_JOB_FIELDS = [field.attname for field in Job._meta.concrete_fields]
# What a fresh row holds in the columns the insert leaves alone.
_JOB_DEFAULTS: dict[str, Any] = {
    "attempt": 0, "lease_owner": None, "lease_expires_at": None,
    "cancel_requested_at": None, "progress_current": None, "progress_total": None,
    "progress_message": "", "result": None, "started_at": None,
    "finished_at": None, "workflow_id": None, "waiting_on": 0, "prerequisites_succeeded": 0,
    "run_condition": "all_succeeded", "input_shape": None, "unique_window": None,
}  # fmt: skip


# The largest value of the job table's integer columns on every database (PostgreSQL's
# integer): a larger one would make the INSERT fail and abort the caller's transaction.
_MAX_INT = 2**31 - 1
# The longest delay or relative deadline. Far beyond any schedule, and near enough that the
# database's clock plus it stays a date every database and Python can hold (before year 9999):
# a later one would fail the INSERT, or be stored in a row that nothing can read back.
_MAX_SECONDS = 100 * 365 * 24 * 3600


def _positive_int(owner: str, name: str, value: Any, default: int, limit: int = _MAX_INT) -> int:
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOption(f"{owner}: {name} must be a positive integer, got {describe(value)}")
    if value > limit:
        why = "the largest the job table stores" if limit == _MAX_INT else "the largest budget"
        raise InvalidOption(
            f"{owner}: {name} must be at most {limit:,} ({why}), got {describe(value)}"
        )
    return value


def _aware(owner: str, name: str, value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidOption(f"{owner}: {name} must be a datetime, got {type(value).__name__}")
    if settings.USE_TZ and timezone.is_naive(value):
        raise NaiveDatetime(
            f"{owner}: {name}={value.isoformat()} is a naive datetime while USE_TZ is on; "
            f"attach a timezone (django.utils.timezone.make_aware or datetime.UTC)"
        )
    if timezone.is_aware(value):
        try:
            value.astimezone(UTC)  # stored in UTC: it must exist there
        except OverflowError:
            raise InvalidOption(
                f"{owner}: {name}={value.isoformat()} is out of range: in UTC it falls "
                f"outside the years 1 to 9999"
            ) from None
    return value


def _seconds(owner: str, name: str, value: Any) -> float:
    """A non-negative number of seconds from now; the database adds it to its own clock."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise InvalidOption(
            f"{owner}: {name} must be seconds (a number) or a timedelta, got {describe(value)}"
        )
    # Compared as given: float() of a huge integer would overflow.
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if seconds < 0:
        raise InvalidOption(f"{owner}: {name} must not be negative, got {describe(value)}")
    if not seconds <= _MAX_SECONDS:  # also NaN and infinity
        raise InvalidOption(
            f"{owner}: {name} must be a number of seconds up to {_MAX_SECONDS:,} (100 years), "
            f"got {describe(value)}; for a fixed time use run_at (or a datetime deadline)"
        )
    return float(seconds)
