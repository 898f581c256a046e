"""What a task is, and the registry of tasks by name: ``TaskSpec`` (a function and its options,
validated), ``EnqueueOptions`` (per-enqueue overrides), and the look-ups every layer above uses.

Definitions only: enqueuing, composing and running live on the layers above, and the
user-facing ``Task`` that ``@task`` returns (``decorator.py``) delegates to them. A task's name
is its registry key and what is stored in ``Job.task_name``; by default it is the function's
dotted path, so moving a function renames its task (pass ``name=`` to pin it).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from .conf import workqueue_settings as conf
from .cron import cron_problem, timezone_problem
from .exceptions import InvalidArguments, InvalidOption, TaskNotRegistered
from .payload import describe
from .states import CatchUp

if TYPE_CHECKING:
    from .decorator import Task

Backoff = float | Callable[[int], float] | None


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """A rate limit: at most ``count`` starts in any ``period`` seconds."""

    count: int
    period: float

    def __str__(self) -> str:
        return f"{self.count}/{self.period:g}s"


FailureClassifier = Callable[[BaseException], str | None]
UniqueOn = Sequence[str] | Callable[[list[Any], dict[str, Any]], str]
ON_CONFLICT = ("keep", "replace")
# One item of enqueue_many: (args, kwargs), or (args, kwargs, unique_key).
Call = tuple[Sequence[Any], Mapping[str, Any]] | tuple[Sequence[Any], Mapping[str, Any], str | None]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class EnqueueOptions:
    """Per-enqueue overrides given to ``Task.using()``; ``None`` means the task's default."""

    queue: str | None = None
    priority: int | None = None
    delay: float | timedelta | None = None
    run_at: datetime | None = None
    deadline: datetime | timedelta | float | None = None
    unique_key: str | None = None
    on_conflict: str | None = None
    """What an enqueue whose unique key is held does: "keep" (default) returns the holder,
    "replace" gives a waiting holder the new arguments and run_after."""
    unique_for: int | None = None
    """Seconds: at most one job per task and key per window of this length, finished ones
    included."""
    max_attempts: int | None = None
    lease_seconds: int | None = None
    depends_on: Any = None
    """Existing jobs (or their ids) this job waits for; it joins their workflow."""
    run_if: str | None = None
    """When a job with prerequisites runs: "all_succeeded" (default), "all_finished" or
    "any_succeeded"."""
    skip_queue: bool = False
    """Run the first attempt in this process right after the enqueue commits, without waiting
    for a worker; a failure or a crash leaves a normal retry for any worker."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class TaskSpec:
    name: str
    func: Callable[..., Any]
    queue: str
    priority: int
    max_attempts: int
    lease_seconds: int
    timeout: float | None
    backoff: Backoff
    atomic: bool
    on_failure: FailureClassifier | None
    takes_context: bool
    unique_on: UniqueOn | None = None
    """Argument names, or a function of (args, kwargs) returning a string: every job gets
    the unique key derived from its call (see ``enqueue.derived_key``)."""
    unique_for: int | None = None
    on_conflict: str = "keep"
    expires_after: float | None = None
    """Seconds after enqueue (database clock) each job's deadline falls, unless the enqueue
    gives its own."""
    is_async: bool
    signature: inspect.Signature
    """The parameters a job's arguments fill: the function's, without a leading ``context``
    (the worker passes that one). Made once per task, as enqueue binds every call to it."""
    positional_arity: tuple[int, int] | None
    """(fewest, most) positional arguments a call without keywords may pass, or None when a
    keyword-only parameter is required: enqueue's shortcut past ``signature.bind``."""
    cron: str | None = None
    """A cron expression: the task runs on this schedule (without arguments), named as the
    task (``schedules.py``)."""
    cron_timezone: str = "UTC"
    cron_catch_up: str = "latest"
    concurrency: int | None = None
    """At most this many jobs of the task (of each ``limit_key``) run at once, cluster-wide."""
    rate: Rate | None = None
    """At most ``rate.count`` starts per ``rate.period`` seconds (of each ``limit_key``)."""
    limit_key: Callable[..., Any] | None = None
    """A function of the job's arguments naming the key ``concurrency`` and ``rate`` count per."""
    fair_key: Callable[..., Any] | None = None
    """A function of the job's arguments naming its tenant: claims rotate between tenants."""
    batch_size: int | None = None
    """Jobs run together, up to this many per call of the function (a list of items)."""
    batch_wait: float = 1.0
    """Seconds a batch waits for more items after its first is ready."""
    hard_timeout: float | None = None
    """Seconds after which a process-pool worker kills the job's child process (threads cannot
    be killed: a thread-pool worker refuses to serve the task's queue)."""
    version: int = 1
    """The version of the task's body, stored with every checkpoint it writes
    (``context.step``, ``sleep``, ``wait_for_signal``): a job is resumed only by the version
    that started it, or one that lists it in ``compatible_versions``."""
    compatible_versions: tuple[int, ...] = ()
    """Earlier versions whose checkpoints this version's body reads as its own."""
    api: bool = False
    """Whether the HTTP API may enqueue it (``POST /api/workqueue/jobs/``); off by default,
    as a task's arguments reach it from any client allowed to call the API."""

    def check_arguments(
        self, args: Sequence[Any], kwargs: Mapping[str, Any], item: int | None = None
    ) -> None:
        """Raise ``InvalidArguments`` unless the arguments fit the function's parameters.
        ``item`` is the index of the call in ``enqueue_many``."""
        arity = self.positional_arity
        if arity is not None and not kwargs and arity[0] <= len(args) <= arity[1]:
            return  # what nearly every call looks like, at a tenth of bind()'s cost
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            call = _render_call(args, kwargs)
            short = self.func.__name__
            where = (
                f"{self.name}.enqueue({call})"
                if item is None
                else f"{self.name}.enqueue_many(): item {item}, {short}({call})"
            )
            passed = " after the context, which the worker passes" if self.takes_context else ""
            raise InvalidArguments(
                f"{where}: {exc}; the task's parameters are {short}{self.signature}{passed}"
            ) from None


def _positional_arity(signature: inspect.Signature) -> tuple[int, int] | None:
    fewest = most = 0
    for parameter in signature.parameters.values():
        if parameter.kind == parameter.VAR_POSITIONAL:
            most = sys.maxsize
        elif parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD):
            most += 1
            fewest += parameter.default is parameter.empty
        elif parameter.kind == parameter.KEYWORD_ONLY and parameter.default is parameter.empty:
            return None
    return fewest, most


# Task modules that failed to import (module -> error): reported by a system check, by
# runworker at start and in the error of a job whose task is missing.
import_errors: dict[str, str] = {}


def _render_call(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The arguments as they would be written in a call, each shortened."""
    parts = [describe(value, 30) for value in args]
    parts += [f"{key}={describe(value, 30)}" for key, value in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= 120 else f"{text[:115]}, …"


def define(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    lease_seconds: int | None = None,
    timeout: float | None = None,
    backoff: Backoff = None,
    atomic: bool = False,
    on_failure: FailureClassifier | None = None,
    cron: str | None = None,
    timezone: str = "UTC",
    catch_up: str = "latest",
    unique_on: UniqueOn | None = None,
    unique_for: int | None = None,
    on_conflict: str = "keep",
    expires_after: float | None = None,
    concurrency: int | None = None,
    rate: str | None = None,
    limit_key: Callable[..., Any] | None = None,
    fair_key: Callable[..., Any] | None = None,
    batch_size: int | None = None,
    batch_wait: float | None = None,
    hard_timeout: float | None = None,
    version: int = 1,
    compatible_versions: Sequence[int] = (),
    api: bool = False,
) -> TaskSpec:
    """The validated definition of ``fn`` as a task with these options (``@task``'s)."""
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())
    takes_context = bool(params) and params[0].name == "context"
    arguments = signature.replace(
        parameters=params[1:] if takes_context else params,
        return_annotation=inspect.Signature.empty,
    )
    spec = TaskSpec(
        name=name or f"{fn.__module__}.{fn.__qualname__}",
        func=fn,
        queue=queue or conf.DEFAULT_QUEUE,
        priority=conf.DEFAULT_PRIORITY if priority is None else priority,
        max_attempts=conf.DEFAULT_MAX_ATTEMPTS if max_attempts is None else max_attempts,
        lease_seconds=conf.DEFAULT_LEASE_SECONDS if lease_seconds is None else lease_seconds,
        timeout=timeout,
        backoff=backoff,
        atomic=atomic,
        on_failure=on_failure,
        takes_context=takes_context,
        is_async=inspect.iscoroutinefunction(fn),
        signature=arguments,
        positional_arity=_positional_arity(arguments),
        cron=cron,
        cron_timezone=timezone,
        cron_catch_up=catch_up,
        unique_on=tuple(unique_on) if isinstance(unique_on, list | tuple) else unique_on,
        unique_for=unique_for,
        on_conflict=on_conflict,
        expires_after=expires_after,
        concurrency=concurrency,
        rate=parse_rate(f"task {name or fn.__qualname__}", rate),
        limit_key=limit_key,
        fair_key=fair_key,
        batch_size=batch_size,
        batch_wait=1.0 if batch_wait is None else batch_wait,
        hard_timeout=hard_timeout,
        version=version,
        # Anything else is kept as given, for _validate_versions to name it.
        compatible_versions=(
            tuple(compatible_versions)
            if isinstance(compatible_versions, list | tuple)
            else compatible_versions  # type: ignore[arg-type]
        ),
        api=api,
    )
    _validate_spec(spec)
    return spec


_registry: dict[str, Task[..., Any]] = {}


def register(task: Task[..., Any]) -> None:
    """Add ``task`` to the registry under its name; a name taken by another function is
    refused (the same function, imported again or reloaded, replaces its entry)."""
    spec, fn = task.spec, task.spec.func
    existing = _registry.get(spec.name)
    if existing is not None and existing.spec.func is not fn:
        existing_qualname = getattr(existing.spec.func, "__qualname__", "?")
        if existing.spec.func.__module__ != fn.__module__ or existing_qualname != fn.__qualname__:
            raise InvalidOption(
                f"task name {spec.name!r} is already registered by another function; "
                f"pass name= to @task to tell them apart"
            )
    _registry[spec.name] = task


# The largest attempt budget. Snoozes, releases and redrives add to a job's budget and its
# attempt counter, 32-bit integers on PostgreSQL: a budget near their limit would make those
# writes fail. A million attempts is already "forever".
MAX_ATTEMPTS = 1_000_000


def _validate_spec(spec: TaskSpec) -> None:
    if spec.atomic and spec.is_async:
        raise InvalidOption(
            f"task {spec.name}: atomic=True needs a sync function (the body runs inside a "
            f"database transaction); make it a plain def"
        )
    if not 1 <= spec.max_attempts <= MAX_ATTEMPTS:
        raise InvalidOption(
            f"task {spec.name}: max_attempts must be from 1 to {MAX_ATTEMPTS:,}, "
            f"got {spec.max_attempts!r}"
        )
    if spec.lease_seconds < 1:
        raise InvalidOption(f"task {spec.name}: lease_seconds must be at least 1")
    if spec.timeout is not None and spec.timeout <= 0:
        raise InvalidOption(f"task {spec.name}: timeout must be a positive number of seconds")
    _validate_hard_timeout(spec)
    if spec.cron is not None:
        problem = cron_problem(spec.cron) or timezone_problem(spec.cron_timezone)
        if problem is None and spec.cron_catch_up not in CatchUp.values:
            problem = f"catch_up must be one of {', '.join(CatchUp.values)}"
        if problem is None:
            try:
                spec.signature.bind()
            except TypeError:
                problem = "cron= calls the task without arguments; give its parameters defaults"
        if problem is not None:
            raise InvalidOption(f"task {spec.name}: {problem}")
    _validate_unique_on(spec)
    _validate_flow(spec)
    owner = f"task {spec.name}"
    if not isinstance(spec.api, bool):
        raise InvalidOption(f"{owner}: api must be True or False, got {describe(spec.api)}")
    check_unique_mode(owner, spec.on_conflict, spec.unique_for)
    _validate_versions(spec)
    expires = spec.expires_after
    if expires is not None and (
        isinstance(expires, bool) or not isinstance(expires, int | float) or not expires > 0
    ):
        raise InvalidOption(
            f"{owner}: expires_after must be a positive number of seconds, got {describe(expires)}"
        )


def _is_version(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value < 2**31


def _validate_versions(spec: TaskSpec) -> None:
    owner = f"task {spec.name}"
    if not _is_version(spec.version):
        raise InvalidOption(
            f"{owner}: version must be a whole number from 1, got {describe(spec.version)}"
        )
    compatible = spec.compatible_versions
    if not isinstance(compatible, tuple) or not all(_is_version(v) for v in compatible):
        raise InvalidOption(
            f"{owner}: compatible_versions must be a tuple of earlier versions, e.g. (1,), "
            f"got {describe(compatible)}"
        )
    if spec.version in compatible:
        raise InvalidOption(
            f"{owner}: compatible_versions lists the task's own version {spec.version}; "
            f"list only the earlier versions whose checkpoints it can resume"
        )


def _validate_hard_timeout(spec: TaskSpec) -> None:
    hard = spec.hard_timeout
    if hard is None:
        return
    if isinstance(hard, bool) or not isinstance(hard, int | float) or not 0 < hard < 10**7:
        raise InvalidOption(
            f"task {spec.name}: hard_timeout must be a positive number of seconds (below "
            f"10,000,000), got {describe(hard)}"
        )
    if spec.batch_size is not None:
        raise InvalidOption(
            f"task {spec.name}: hard_timeout does not apply to batch tasks (a batch runs in the "
            f"worker's own process); use timeout, or leave out batch_size"
        )
    if spec.timeout is not None and hard <= spec.timeout:
        raise InvalidOption(
            f"task {spec.name}: hard_timeout ({hard}s) must be longer than timeout "
            f"({spec.timeout}s): the hard limit is the last resort after the cooperative one; "
            f"raise hard_timeout or lower timeout"
        )


_RATE_UNITS = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60,
               "h": 3600, "hour": 3600, "d": 86400, "day": 86400}  # fmt: skip
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+(?:\.\d+)?)?\s*([a-z]+)\s*$")


def parse_rate(owner: str, rate: Any) -> Rate | None:
    """``"10/s"`` -> Rate(10, 1.0); also ``"100/m"``, ``"5000/h"``, ``"1/d"``, ``"3/10s"``."""
    if rate is None:
        return None
    match = _RATE.match(rate) if isinstance(rate, str) else None
    unit = _RATE_UNITS.get(match.group(3)) if match else None
    if match is None or unit is None:
        raise InvalidOption(
            f'{owner}: rate must look like "10/s", "100/m", "5000/h" or "3/10s" (starts per '
            f"period), got {describe(rate)}"
        )
    count, multiple = int(match.group(1)), float(match.group(2) or 1)
    if count < 1 or not multiple > 0:
        raise InvalidOption(f"{owner}: rate {rate!r} must allow at least 1 start per period")
    return Rate(count, multiple * unit)


# The longest batch_wait: a day. A batch that waits longer for company is a schedule.
MAX_BATCH_WAIT = 86_400


def _validate_flow(spec: TaskSpec) -> None:
    owner = f"task {spec.name}"
    limited = spec.concurrency is not None or spec.rate is not None
    concurrency = spec.concurrency
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise InvalidOption(
            f"{owner}: concurrency must be a whole number of at least 1, "
            f"got {describe(concurrency)}"
        )
    for option in ("limit_key", "fair_key"):
        value = getattr(spec, option)
        if value is not None and not callable(value):
            raise InvalidOption(
                f"{owner}: {option} must be a function of the job's arguments returning a "
                f"string, e.g. lambda customer_id, **kw: f'customer:{{customer_id}}'; "
                f"got {describe(value)}"
            )
    if spec.limit_key is not None and not limited:
        raise InvalidOption(f"{owner}: limit_key needs concurrency= or rate= to count per key")
    if spec.fair_key is not None and limited:
        raise InvalidOption(
            f"{owner}: fair_key cannot be combined with concurrency= or rate=; claims already "
            f"rotate between limit keys, so give limit_key= the tenant instead"
        )
    size = spec.batch_size
    if size is None:
        return
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InvalidOption(f"{owner}: batch_size must be a whole number of at least 1")
    wait = spec.batch_wait
    if (
        isinstance(wait, bool)
        or not isinstance(wait, int | float)
        or not 0 <= wait <= MAX_BATCH_WAIT  # NaN and infinity fail this too
    ):
        raise InvalidOption(
            f"{owner}: batch_wait must be a number of seconds from 0 to {MAX_BATCH_WAIT:,}, "
            f"got {describe(wait)}"
        )
    if limited or spec.fair_key is not None:
        raise InvalidOption(
            f"{owner}: batch_size cannot be combined with concurrency=, rate= or fair_key= "
            f"(a batch is claimed as one group)"
        )
    if spec.takes_context or spec.atomic or spec.cron is not None:
        raise InvalidOption(
            f"{owner}: a batch task takes the list of items only: no context, atomic or cron"
        )


def _validate_unique_on(spec: TaskSpec) -> None:
    unique_on = spec.unique_on
    if unique_on is None or callable(unique_on):
        return
    if isinstance(unique_on, str) or not unique_on:
        raise InvalidOption(
            f"task {spec.name}: unique_on must be a tuple of argument names or a function of "
            f"(args, kwargs), got {describe(unique_on)}"
        )
    named = {
        p.name
        for p in spec.signature.parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    }
    unknown = [name for name in unique_on if name not in named]
    if unknown:
        raise InvalidOption(
            f"task {spec.name}: unique_on names {', '.join(map(repr, unknown))}, not a "
            f"parameter of {spec.func.__name__}{spec.signature}"
        )


# The longest unique_for window: a year.
MAX_UNIQUE_FOR = 366 * 24 * 3600


def check_unique_mode(owner: str, on_conflict: Any, unique_for: Any) -> None:
    """Raise ``InvalidOption`` unless ``on_conflict`` and ``unique_for`` are valid together."""
    if on_conflict not in ON_CONFLICT:
        raise InvalidOption(
            f'{owner}: on_conflict must be "keep" or "replace", got {describe(on_conflict)}'
        )
    if unique_for is None:
        return
    if (
        isinstance(unique_for, bool)
        or not isinstance(unique_for, int)
        or not (0 < unique_for <= MAX_UNIQUE_FOR)
    ):
        raise InvalidOption(
            f"{owner}: unique_for must be a whole number of seconds from 1 to "
            f"{MAX_UNIQUE_FOR:,}, got {describe(unique_for)}"
        )
    if on_conflict == "replace":
        # A window's job may have finished: there is nothing to replace, and replacing the
        # waiting one would make the window's throttle a debounce.
        raise InvalidOption(f'{owner}: unique_for cannot be combined with on_conflict="replace"')


def get_task(name: str) -> Task[..., Any]:
    found = find_task(name)
    if found is None:
        raise TaskNotRegistered(
            f"no task is registered as {name!r}; is the module that defines it imported "
            f"(an installed app's tasks.py, or WORKQUEUE['TASK_MODULES'])?"
        )
    return found


def find_task(name: str) -> Task[..., Any] | None:
    """The task registered as ``name``, or None.

    A look-up only: it never imports. Names come from requests, job rows, schedules and
    command lines, and importing a module runs its code; the registry is filled at start-up
    instead (``apps.discover_tasks``, ``discovery.import_urlconf``, and ``django.tasks`` tasks of
    the ``WorkqueueBackend`` as they are defined)."""
    return _registry.get(name)


def registered_tasks() -> dict[str, Task[..., Any]]:
    return dict(_registry)
