"""Enqueue: validate, insert on the caller's connection (joining its transaction), wake workers.

Nothing is written when validation fails. The insert uses the connection of the jobs database
(``WORKQUEUE["DATABASE"]``), so a job enqueued inside ``transaction.atomic()`` exists if and only
if that transaction commits. On PostgreSQL a ``NOTIFY`` carrying the queue name is sent in the
same transaction: PostgreSQL delivers it at commit and folds duplicates. Workers in this process
are woken with ``on_commit``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, IntegrityError, connections, transaction
from django.db.models import DateTimeField, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone

from . import payload
from .conf import workqueue_settings as conf
from .db import driver_for
from .exceptions import InvalidOption, InvalidPriority, NaiveDatetime, UnknownQueue
from .models import Job
from .states import ACTIVE
from .worker import wakeup

if TYPE_CHECKING:
    from .registry import Task


def enqueue_one(task: Task, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Job:
    alias = conf.DATABASE
    job = build_job(task, args, kwargs)
    if _defer_to_caller(alias):
        transaction.on_commit(functools.partial(_insert_one, job, alias), using=DEFAULT_DB_ALIAS)
        return job
    return _insert_one(job, alias)


def enqueue_many(task: Task, calls: Iterable[tuple[Sequence[Any], Mapping[str, Any]]]) -> list[Job]:
    if task.options.unique_key is not None:
        raise InvalidOption(
            f"{task.name}.enqueue_many() cannot share one unique_key among many jobs; "
            f"enqueue unique jobs one at a time"
        )
    alias = conf.DATABASE
    jobs = []
    for index, call in enumerate(calls):
        try:
            args, kwargs = call
        except (TypeError, ValueError):
            raise InvalidOption(
                f"{task.name}.enqueue_many(): item {index} is not an (args, kwargs) pair"
            ) from None
        jobs.append(build_job(task, args, kwargs, label=f"item {index}"))
    if not jobs:
        return []
    if _defer_to_caller(alias):
        transaction.on_commit(functools.partial(_insert_many, jobs, alias), using=DEFAULT_DB_ALIAS)
        return jobs
    return _insert_many(jobs, alias)


def build_job(
    task: Task, args: Sequence[Any], kwargs: Mapping[str, Any], *, label: str = ""
) -> Job:
    """Validate one call of ``task`` and return the unsaved ``Job``; raise on bad input."""
    spec, options = task.spec, task.options
    owner = f"{spec.name}{' ' + label if label else ''}"
    if not isinstance(args, list | tuple):
        raise InvalidOption(f"{owner}: args must be a list or tuple, not {type(args).__name__}")
    if not isinstance(kwargs, Mapping):
        raise InvalidOption(f"{owner}: kwargs must be a mapping, not {type(kwargs).__name__}")
    args, kwargs = list(args), dict(kwargs)
    size = len(payload.encode(args, "args", owner).encode()) + len(
        payload.encode(kwargs, "kwargs", owner).encode()
    )
    payload.check_size(size, conf.MAX_PAYLOAD_BYTES, f"args of {owner} are", "MAX_PAYLOAD_BYTES")

    queue = options.queue or spec.queue
    if queue not in conf.QUEUES:
        raise UnknownQueue(
            f"{owner}: queue {queue!r} is not one of WORKQUEUE['QUEUES'] {list(conf.QUEUES)}; "
            f"add it there or enqueue to one of those"
        )
    priority = spec.priority if options.priority is None else options.priority
    if isinstance(priority, bool) or not isinstance(priority, int) or not -100 <= priority <= 100:
        raise InvalidPriority(
            f"{owner}: priority must be an integer from -100 to 100 (higher runs first), "
            f"got {priority!r}"
        )
    max_attempts = _positive_int(owner, "max_attempts", options.max_attempts, spec.max_attempts)
    lease_seconds = _positive_int(owner, "lease_seconds", options.lease_seconds, spec.lease_seconds)
    if options.unique_key is not None and (
        not isinstance(options.unique_key, str) or not 0 < len(options.unique_key) <= 255
    ):
        raise InvalidOption(f"{owner}: unique_key must be a string of 1 to 255 characters")

    job = Job(
        task_name=spec.name,
        queue=queue,
        priority=priority,
        args=args,
        kwargs=kwargs,
        max_attempts=max_attempts,
        lease_seconds=lease_seconds,
        unique_key=options.unique_key,
    )
    # True only on the existing job returned for an active unique_key; always present, so
    # callers can test ``job.duplicate`` without getattr.
    job.duplicate = False  # type: ignore[attr-defined]
    if options.run_at is not None and options.delay is not None:
        raise InvalidOption(f"{owner}: give delay or run_at, not both")
    if options.run_at is not None:
        job.run_after = _aware(owner, "run_at", options.run_at)
    elif options.delay is not None:
        job.run_after = _from_now(owner, "delay", options.delay)
    if options.deadline is not None:
        if isinstance(options.deadline, datetime):
            job.deadline = _aware(owner, "deadline", options.deadline)
        else:
            job.deadline = _from_now(owner, "deadline", options.deadline)
    return job


def _insert_one(job: Job, alias: str) -> Job:
    if job.unique_key is None:
        job.save(using=alias, force_insert=True)
    else:
        try:
            with transaction.atomic(using=alias):
                job.save(using=alias, force_insert=True)
        except IntegrityError:
            existing = (
                Job.objects.using(alias)
                .filter(unique_key=job.unique_key, status__in=ACTIVE)
                .first()
            )
            if existing is None:  # the holder finished between our insert and this read
                return _insert_one(job, alias)
            existing.duplicate = True  # type: ignore[attr-defined]
            return existing
    _announce(alias, {job.queue})
    if isinstance(job.deadline, CombinedExpression):  # computed by the database at insert
        job.refresh_from_db(using=alias, fields=["deadline"])
    return job


def _insert_many(jobs: list[Job], alias: str) -> list[Job]:
    created = Job.objects.using(alias).bulk_create(jobs)
    _announce(alias, {job.queue for job in created})
    if any(isinstance(job.deadline, CombinedExpression) for job in created):
        # computed by the database at insert, and not returned by bulk_create
        deadlines = dict(
            Job.objects.using(alias)
            .filter(pk__in=[job.pk for job in created])
            .values_list("pk", "deadline")
        )
        for job in created:
            job.deadline = deadlines[job.pk]
    return created


def _announce(alias: str, queues: set[str]) -> None:
    driver_for(alias).notify(queues)
    transaction.on_commit(functools.partial(wakeup.wake, queues), using=alias)


def _defer_to_caller(alias: str) -> bool:
    """True when the caller writes to another database inside a transaction of its own."""
    return alias != DEFAULT_DB_ALIAS and connections[DEFAULT_DB_ALIAS].in_atomic_block


def _positive_int(owner: str, name: str, value: Any, default: int) -> int:
    value = default if value is None else value
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidOption(f"{owner}: {name} must be a positive integer, got {value!r}")
    return value


def _aware(owner: str, name: str, value: datetime) -> datetime:
    if not isinstance(value, datetime):
        raise InvalidOption(f"{owner}: {name} must be a datetime, got {type(value).__name__}")
    if settings.USE_TZ and timezone.is_naive(value):
        raise NaiveDatetime(
            f"{owner}: {name}={value.isoformat()} is a naive datetime while USE_TZ is on; "
            f"attach a timezone (django.utils.timezone.make_aware or datetime.UTC)"
        )
    return value


def _from_now(owner: str, name: str, value: Any) -> CombinedExpression:
    """``now() + value`` computed by the database, so schedules use the database clock."""
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise InvalidOption(
            f"{owner}: {name} must be seconds (a number) or a timedelta, got {value!r}"
        )
    delta = value if isinstance(value, timedelta) else timedelta(seconds=value)
    if delta < timedelta(0):
        raise InvalidOption(f"{owner}: {name} must not be negative, got {value!r}")
    return CombinedExpression(Now(), "+", Value(delta), output_field=DateTimeField())
