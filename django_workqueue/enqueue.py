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
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db.models import F, Q
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.utils import timezone

from . import payload, signalling, wakeup
from .conf import workqueue_settings as conf
from .db import Encoded, NewJob, driver_for
from .exceptions import (
    InvalidArguments,
    InvalidOption,
    InvalidPriority,
    NaiveDatetime,
    UniqueKeyConflict,
    UnknownQueue,
)
from .flow.keys import check_batch_item, flow_key, is_flow_task
from .models import Job
from .payload import describe
from .registry import MAX_ATTEMPTS, check_unique_mode
from .states import ACTIVE, Status

if TYPE_CHECKING:
    from .decorator import Task


def enqueue_one(
    task: Task, args: Sequence[Any], kwargs: Mapping[str, Any], *, namespace: str | None = None
) -> Job:
    """One job. ``namespace`` (``"api"`` for the HTTP API) keeps the job's unique key apart
    from the application's own keys (``namespaced_key``)."""
    template = job_template(task)
    call = encode_call(args, kwargs, task.name)
    task.spec.check_arguments(call.args, call.kwargs)
    if is_flow_task(task.spec):
        check_batch_item(task.spec, call, task.name)
        flow = flow_key(task.spec, call.args, call.kwargs, task.name)
        template = dataclasses.replace(template, flow_keys=(flow,))
    key = template.unique_key or derived_key(task, template, call, task.name)
    if namespace is not None and key is not None:
        key = namespaced_key(namespace, key)
        if template.unique_key is not None:
            template = dataclasses.replace(template, unique_key=key)
    return _enqueue(template, [call], None if key is None else [key])[0]


def enqueue_many(task: Task, calls: Iterable[Sequence[Any]]) -> list[Job]:
    """Each item is (args, kwargs), or (args, kwargs, unique_key) for a key of its own."""
    template = job_template(task)
    if template.unique_key is not None:
        raise InvalidOption(
            f"{task.name}.enqueue_many() cannot share one unique_key among many jobs; "
            f"give each item its own as a third element: (args, kwargs, unique_key)"
        )
    calls = calls if isinstance(calls, list | tuple) else list(calls)
    batch = _plain_batch(task, template, calls)
    if batch is not None:
        return _enqueue(template, batch, None) if batch.arguments else []
    encoded, keys = [], []
    for index, call in enumerate(calls):
        owner = f"{task.name} item {index}"
        if not isinstance(call, list | tuple) or len(call) not in (2, 3):
            raise InvalidOption(
                f"{task.name}.enqueue_many(): item {index} is not an (args, kwargs) pair "
                f"or an (args, kwargs, unique_key) triple"
            )
        checked = encode_call(call[0], call[1], owner)
        task.spec.check_arguments(checked.args, checked.kwargs, item=index)
        encoded.append(checked)
        own = call[2] if len(call) == 3 else None
        keys.append(
            check_key(owner, own)
            if own is not None
            else derived_key(task, template, checked, owner)
        )
    if not encoded:
        return []
    if is_flow_task(task.spec):
        flows = []
        for index, checked in enumerate(encoded):
            owner = f"{task.name} item {index}"
            check_batch_item(task.spec, checked, owner)
            flows.append(flow_key(task.spec, checked.args, checked.kwargs, owner))
        template = dataclasses.replace(template, flow_keys=tuple(flows))
    if task.options.skip_queue:
        raise InvalidOption(
            f"{task.name}.enqueue_many(): skip_queue runs one job in this process; "
            f"enqueue_many hands its jobs to the workers, so leave skip_queue out"
        )
    unique = template.unique_for is not None or any(key is not None for key in keys)
    return _enqueue(template, encoded, keys if unique else None)


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """The jobs of an ``enqueue_many`` call validated and encoded together: no keys, no flow
    keys, arguments of plain JSON scalars."""

    arguments: list[tuple[list[Any], dict[str, Any]]]
    encoded: Encoded


# What the batch path takes as a job's argument without looking inside (exact types: a
# subclass may encode otherwise); the encoder refuses NaN, infinities and integers too long.
_SCALARS = frozenset({str, int, float, bool, type(None)})


def _plain_batch(task: Task, template: NewJob, calls: Sequence[Any]) -> Batch | None:
    """``enqueue_many``'s common case at a fraction of the per-item path's cost: every item an
    (args, kwargs) pair (or with a None key) of JSON scalars that fits the task's parameters,
    for a task without unique keys, flow control or skip_queue; the arguments of all the jobs
    encoded by one call of the JSON encoder, and checked against the size limit and the
    characters the database refuses all at once. None when anything is unusual: the
    per-item path then validates every item, raising exactly what it always raises."""
    spec = task.spec
    if (
        spec.unique_on is not None
        or template.unique_for is not None
        or task.options.skip_queue
        or is_flow_task(spec)
    ):
        return None
    arity = spec.positional_arity
    fewest, most = arity if arity is not None else (1, 0)  # no shortcut: check each call
    scalars = _SCALARS
    arguments = []
    for call in calls:
        if type(call) is not tuple and type(call) is not list:
            return None
        size = len(call)
        if size != 2 and (size != 3 or call[2] is not None):
            return None
        args, kwargs = call[0], call[1]
        if (type(args) is not tuple and type(args) is not list) or type(kwargs) is not dict:
            return None
        args = list(args)
        for value in args:
            if type(value) not in scalars:
                return None
        if kwargs:
            kwargs = dict(kwargs)
            for name, value in kwargs.items():
                if type(name) is not str or type(value) not in scalars:
                    return None
        else:
            kwargs = {}
        if kwargs or not fewest <= len(args) <= most:
            try:
                spec.check_arguments(args, kwargs)
            except InvalidArguments:
                return None
        arguments.append((args, kwargs))
    try:
        text = payload.encode_scalars(arguments)
    except ValueError:  # NaN, an infinity, an integer too long to write
        return None
    # Each job's arguments are shorter than all of them; characters are bytes in ASCII text.
    if "\\u0000" in text or not text.isascii() or len(text) > conf.MAX_PAYLOAD_BYTES:
        return None
    return Batch(arguments, Encoded(text, len(arguments)))


def _enqueue(
    template: NewJob, calls: list[Call] | Batch, keys: list[str | None] | None
) -> list[Job]:
    alias = conf.DATABASE
    if alias != DEFAULT_DB_ALIAS and connections[DEFAULT_DB_ALIAS].in_atomic_block:
        # The caller writes to another database inside a transaction of its own: insert when
        # (and only if) that transaction commits. The jobs get their ids then (a duplicate
        # its holder's).
        jobs = [_unsaved(template, args, kwargs) for args, kwargs in _arguments(calls)]
        transaction.on_commit(
            functools.partial(_insert, template, calls, keys, alias, jobs), DEFAULT_DB_ALIAS
        )
        return jobs
    return _insert(template, calls, keys, alias)


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
        check_key(owner, options.unique_key)
    on_conflict = options.on_conflict or spec.on_conflict
    unique_for = spec.unique_for if options.unique_for is None else options.unique_for
    check_unique_mode(owner, on_conflict, unique_for)
    if options.run_at is not None and options.delay is not None:
        raise InvalidOption(f"{owner}: give delay or run_at, not both")
    if options.skip_queue:
        check_skip_queue(task)
    deadline = options.deadline
    if deadline is None and spec.expires_after is not None:
        deadline = spec.expires_after  # from the enqueue, by the database's clock
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
        unique_for=unique_for,
        on_conflict=on_conflict,
        run_at=None if options.run_at is None else _aware(owner, "run_at", options.run_at),
        delay=None if options.delay is None else _seconds(owner, "delay", options.delay),
        deadline_at=_aware(owner, "deadline", deadline) if isinstance(deadline, datetime) else None,
        deadline_in=(
            None
            if deadline is None or isinstance(deadline, datetime)
            else _seconds(owner, "deadline", deadline)
        ),
    )


def check_skip_queue(task: Task[..., Any]) -> None:
    """Refuse ``skip_queue`` where nothing could run in this process right after the commit."""
    spec, options, owner = task.spec, task.options, task.name
    if is_flow_task(spec):
        raise InvalidOption(
            f"{owner}: skip_queue cannot run a task with concurrency=, rate=, fair_key= or "
            f"batch_size=: its limits hold only for jobs the workers claim under flow control; "
            f"enqueue it without skip_queue"
        )
    if options.delay is not None or options.run_at is not None:
        raise InvalidOption(
            f"{owner}: skip_queue runs the job right after the enqueue commits, so it cannot "
            f"wait for a delay or run_at; leave one of them out"
        )
    if options.depends_on is not None:
        raise InvalidOption(
            f"{owner}: skip_queue cannot run a job with depends_on: it waits for its "
            f"prerequisites and the workers run it when they end; leave skip_queue out"
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


# Keys made by unique_on (or for unique_for without a key) start with "@"; a key given by hand
# may not, so the two never meet.
_DERIVED = "@"
_MAX_KEY = 255


def check_key(owner: str, key: Any) -> str:
    """A hand-made unique key, validated."""
    if not isinstance(key, str) or not 0 < len(key) <= _MAX_KEY:
        raise InvalidOption(f"{owner}: unique_key must be a string of 1 to 255 characters")
    if key.startswith(_DERIVED):
        raise InvalidOption(
            f"{owner}: unique_key {describe(key)} starts with {_DERIVED!r}, which is kept for "
            f"the keys unique_on derives; choose another first character"
        )
    problem = payload.unstorable_text(key)
    if problem is not None:  # the database would refuse it, or abort the transaction
        raise InvalidOption(f"{owner}: unique_key {problem}")
    return key


def derived_key(task: Task, template: NewJob, call: Call, owner: str) -> str | None:
    """The unique key ``@task(unique_on=...)`` derives from a call: ``@args:`` and the JSON of
    the named arguments' values (defaults included), or ``@fn:`` and what the function
    returned; a digest when longer than a key may be. ``@task`` for ``unique_for`` alone."""
    unique_on = task.spec.unique_on
    if unique_on is None:
        return None if template.unique_for is None else f"{_DERIVED}task"
    if callable(unique_on):
        value = unique_on(call.args, call.kwargs)
        if not isinstance(value, str) or not value:
            raise InvalidOption(
                f"{owner}: unique_on returned {describe(value)}; it must return a non-empty string"
            )
        kind, text = "fn", value
    else:
        bound = task.spec.signature.bind(*call.args, **call.kwargs)
        bound.apply_defaults()
        values = {name: bound.arguments[name] for name in unique_on}
        try:
            text = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            raise InvalidOption(
                f"{owner}: the unique_on arguments {describe(values)} are not JSON ({exc}), "
                f"so no unique key can be made of them"
            ) from None
        kind = "args"
    problem = payload.unstorable_text(text)
    if problem is not None:
        raise InvalidOption(f"{owner}: the unique key made by unique_on {problem}")
    key = f"{_DERIVED}{kind}:{text}"
    if len(key) > _MAX_KEY:  # same values, same digest: still one key per call's values
        key = f"{_DERIVED}{kind}#{hashlib.sha256(text.encode()).hexdigest()}"
    return key


def namespaced_key(namespace: str, key: str) -> str:
    """``key`` (given, or derived from the arguments) in a namespace of its own:
    ``@args:<namespace>:`` and the key, which no key of the application's can be (its own keys
    may not begin with ``@``, and ``@args:`` is followed by ``{`` in the keys ``unique_on``
    derives). Beginning with ``@args:``, it is hidden as a derived key is from users without
    ``view_job_payload`` (``disclosure.py``); a digest when longer than a key may be.

    >>> namespaced_key("api", "order-42")
    '@args:api:order-42'
    """
    spaced = f"{_DERIVED}args:{namespace}:{key}"
    if len(spaced) > _MAX_KEY:
        spaced = f"{_DERIVED}args#{hashlib.sha256(spaced.encode()).hexdigest()}"
    return spaced


def _arguments(calls: list[Call] | Batch) -> list[tuple[list[Any], dict[str, Any]]]:
    if isinstance(calls, Batch):
        return calls.arguments
    return [(call.args, call.kwargs) for call in calls]


def _unsaved(template: NewJob, args: list[Any], kwargs: dict[str, Any]) -> Job:
    job = Job(
        task_name=template.task_name,
        queue=template.queue,
        priority=template.priority,
        args=args,
        kwargs=kwargs,
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
    calls: list[Call] | Batch,
    keys: list[str | None] | None,
    alias: str,
    unsaved: list[Job] | None = None,
    tries: int = 3,
) -> list[Job]:
    """Insert the jobs; with unique keys, each row that met a holder gets it (or, with
    on_conflict="replace", the waiting holder it updated) marked ``duplicate``."""
    driver = driver_for(alias)
    arguments = _arguments(calls)
    payloads: list[tuple[str, str]] | Encoded
    if isinstance(calls, Batch):
        payloads = calls.encoded
    else:
        payloads = [(call.args_json, call.kwargs_json) for call in calls]
    rows = driver.insert(template, payloads, keys)
    written = list(range(len(arguments))) if rows.positions is None else rows.positions
    jobs: list[Job | None] = [None] * len(arguments)
    if written:
        transaction.on_commit(functools.partial(wakeup.wake, (template.queue,)), using=alias)
        signalling.enqueued(alias, template.task_name, template.queue, rows.ids)
        shared = dict(
            _JOB_DEFAULTS,
            task_name=template.task_name, queue=template.queue, priority=template.priority,
            max_attempts=template.max_attempts, lease_seconds=template.lease_seconds,
            run_after=rows.run_after, deadline=rows.deadline, enqueued_at=rows.enqueued_at,
            status=rows.status, unique_window=rows.unique_window,
        )  # fmt: skip
        flows = template.flow_keys
        build = _builder(alias)
        if keys is None and flows is None:  # every row alike but for its id and arguments
            shared.update(unique_key=template.unique_key, flow_key=None)
            for position, pk in zip(written, rows.ids, strict=True):
                args, kwargs = arguments[position]
                jobs[position] = build(shared, pk, args, kwargs)
        else:
            for position, pk in zip(written, rows.ids, strict=True):
                own = {
                    "unique_key": template.unique_key if keys is None else keys[position],
                    "flow_key": None if flows is None else flows[position],
                }
                args, kwargs = arguments[position]
                jobs[position] = build({**shared, **own}, pk, args, kwargs)
    skipped = [position for position, job in enumerate(jobs) if job is None]
    if skipped:
        assert keys is not None and not isinstance(calls, Batch)  # only keyed rows are skipped
        holders = _holders(driver, template, calls, keys, skipped, alias)
        missing = [position for position in skipped if keys[position] not in holders]
        if missing:  # their holders finished between the insert and the read: insert again
            if tries <= 1:  # e.g. REPEATABLE READ: this transaction cannot see the holder
                raise UniqueKeyConflict(
                    f"{template.task_name}: unique_key {keys[missing[0]]!r} is held by a job "
                    f"this transaction cannot see; retry the transaction"
                )
            subset = template
            if template.flow_keys is not None:
                flows = template.flow_keys
                subset = dataclasses.replace(template, flow_keys=tuple(flows[p] for p in missing))
            again = _insert(
                subset, [calls[p] for p in missing], [keys[p] for p in missing], alias,
                tries=tries - 1,
            )  # fmt: skip
            for position, job in zip(missing, again, strict=True):
                jobs[position] = job
        for position in skipped:
            if jobs[position] is None:
                jobs[position] = _duplicate(holders[keys[position]])
    done = [job for job in jobs if job is not None]
    if unsaved is None:
        return done
    for job, stored in zip(unsaved, done, strict=True):
        # A duplicate stays unsaved, as documented: the caller had its job back before the
        # key could be checked.
        if not stored.duplicate:  # type: ignore[attr-defined]
            job.pk, job.run_after, job.status = stored.pk, stored.run_after, stored.status
            job.enqueued_at, job.deadline = stored.enqueued_at, stored.deadline
            job.unique_key, job.unique_window = stored.unique_key, stored.unique_window
            job._state.adding, job._state.db = False, alias
    return unsaved


def _duplicate(job: Job) -> Job:
    job.duplicate = True  # type: ignore[attr-defined]
    return job


def _holders(
    driver: Any,
    template: NewJob,
    calls: list[Call],
    keys: list[str | None],
    skipped: list[int],
    alias: str,
) -> dict[str | None, Job]:
    """The job holding each skipped row's key: the active one, else the one of the current
    unique_for window (the latest). With on_conflict="replace" a waiting holder first gets
    the row's arguments (the last row of a key wins), in a guarded UPDATE that leaves a
    running holder alone."""
    wanted = {keys[position]: position for position in skipped}  # the last row of each key
    if template.on_conflict == "replace":
        replaced = False
        for key, position in wanted.items():
            call = calls[position]
            own = template  # with the row's own flow key: a new customer, a new limit key
            if template.flow_keys is not None:
                own = dataclasses.replace(template, flow_keys=(template.flow_keys[position],))
            replaced |= (
                driver.replace_waiting(own, key, (call.args_json, call.kwargs_json)) is not None
            )
        if replaced:  # a replaced job may be due now: wake the workers
            driver.notify([template.queue])
            transaction.on_commit(functools.partial(wakeup.wake, (template.queue,)), using=alias)
    holders: dict[str | None, Job] = {}
    held = Q(status__in=ACTIVE)
    if template.unique_for is not None:
        held |= Q(unique_window__isnull=False)
    found = (
        Job.objects.using(alias)
        .filter(held, task_name=template.task_name, unique_key__in=list(wanted))
        .order_by(F("unique_window").desc(nulls_first=True), "-pk")
    )
    for job in found:  # an active holder first, else the latest window's job
        current = holders.get(job.unique_key)
        if current is None or (job.status in ACTIVE and current.status not in ACTIVE):
            holders[job.unique_key] = job
    return holders


def _builder(alias: str) -> Callable[[dict[str, Any], int, list[Any], dict[str, Any]], Job]:
    """How to make the inserted jobs' model instances: as ``Model.from_db`` makes the rows
    Django reads (every field set, ``_state`` saved in ``alias``). When nothing listens to
    ``Job``'s ``pre_init``/``post_init`` signals, the same instance is made without running
    ``Model.__init__`` (a tenth of its cost, which dominates a large ``enqueue_many``)."""
    if pre_init.has_listeners(Job) or post_init.has_listeners(Job):

        def saved(shared: dict[str, Any], pk: int, args: list[Any], kwargs: dict[str, Any]) -> Job:
            values = {**shared, "id": pk, "args": args, "kwargs": kwargs, "errors": []}
            job = Job.from_db(alias, _JOB_FIELDS, [values[name] for name in _JOB_FIELDS])
            job.duplicate = False  # type: ignore[attr-defined]
            return job

        return saved
    new = Job.__new__

    def built(shared: dict[str, Any], pk: int, args: list[Any], kwargs: dict[str, Any]) -> Job:
        job = new(Job)
        state = ModelState()
        state.adding, state.db = False, alias
        job.__dict__.update(shared, id=pk, args=args, kwargs=kwargs, errors=[], _state=state,
                            duplicate=False)  # fmt: skip
        return job

    return built


_JOB_FIELDS = [field.attname for field in Job._meta.concrete_fields]
# What a fresh row holds in the columns the insert leaves alone.
_JOB_DEFAULTS: dict[str, Any] = {
    "attempt": 0, "attempts_charged": 0, "crashes_charged": 0, "redriven_attempts": 0,
    "claimed_ahead": False,
    "lease_owner": None, "lease_expires_at": None,
    "cancel_requested_at": None, "progress_current": None, "progress_total": None,
    "progress_message": "", "progress_details": None, "result": None, "started_at": None,
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
