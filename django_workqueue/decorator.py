"""``@task`` and the ``Task`` it returns: the user-facing face of a task.

``Task`` holds a definition (``registry.TaskSpec``) and per-enqueue options, and delegates:
``enqueue`` to ``enqueue.py`` (or ``workflow/store.py`` with ``depends_on``), ``s`` to
``workflow/canvas.py``, ``skip_queue`` runs to ``flow/skipqueue.py``. It sits on the top layer
so that none of those modules imports it (docs/explanation/architecture.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import (
    TYPE_CHECKING,
    Any,
    Generic,
    ParamSpec,
    Protocol,
    Self,
    TypedDict,
    TypeVar,
    Unpack,
    overload,
)

from asgiref.sync import sync_to_async

from . import registry
from .exceptions import InvalidOption
from .flow import skipqueue
from .registry import Backoff, Call, EnqueueOptions, FailureClassifier, TaskSpec, UniqueOn, define
from .workflow.canvas import Signature

if TYPE_CHECKING:
    from .context import JobContext
    from .models import Job

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Task(Generic[P, R]):
    """A registered task. Call it like the function, or ``enqueue`` it to run on a worker.

    Typed over the function's parameters ``P`` and return type ``R``, so that type checkers
    check ``enqueue()`` calls as they check calls of the function (annotated functions only:
    mypy leaves a function without annotations untyped, and its task ``Any``).
    """

    def __init__(self, spec: TaskSpec, options: EnqueueOptions | None = None) -> None:
        self.spec = spec
        self.options = options or EnqueueOptions()

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.spec.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.spec.name}>"

    def using(self, **options: Any) -> Self:
        """Return this task with per-enqueue overrides.

        >>> add.using(delay=30, priority=5, queue="x", unique_key="k").enqueue(1, 2)
        """
        fields = {f.name for f in dataclasses.fields(EnqueueOptions)}
        unknown = sorted(set(options) - fields)
        if unknown:
            raise InvalidOption(
                f"{self.spec.name}.using() got unknown option(s) {', '.join(unknown)}; "
                f"the options are {', '.join(sorted(fields))}"
            )
        return type(self)(self.spec, dataclasses.replace(self.options, **options))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Store a job that runs this task with these arguments; it joins the open transaction.

        >>> job = add.enqueue(1, 2)
        >>> report.using(depends_on=[job1, job2], run_if="all_finished").enqueue()
        """
        # Imported here: this module is imported with the package, before Django's app
        # registry is ready, and the writers import the models.
        from .enqueue import enqueue_one
        from .workflow.store import enqueue_with_dependencies

        if self.options.depends_on is not None:
            return enqueue_with_dependencies(self, args, kwargs)
        job = enqueue_one(self, args, kwargs)
        if self.options.skip_queue:
            skipqueue.run_after_commit(self, job)
        return job

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """``enqueue`` for async code (async views, consumers); the event loop runs on while
        the insert waits for the database.

        >>> job = await add.aenqueue(1, 2)
        >>> job = await add.using(delay=30, unique_key="k").aenqueue(1, 2)

        The insert runs where Django runs the async ORM's queries: ``sync_to_async`` with
        ``thread_sensitive=True``, on that thread's connection. Async code cannot hold a
        transaction open across an ``await``, so there the job commits before the ``await``
        returns. It joins a transaction only when a sync caller opened ``atomic()`` on that
        same thread and called into async code with ``async_to_sync``. To enqueue together
        with other writes, put them and a plain ``enqueue`` in one sync function, run with
        ``sync_to_async``. Errors (``InvalidArguments``, ``PayloadTooLarge``, …) are raised
        from the ``await``.
        """
        return await sync_to_async(self.enqueue, thread_sensitive=True)(*args, **kwargs)

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task with these arguments, as a step of a workflow (checked when the workflow
        is enqueued; a chain's step also receives the previous step's result first).

        >>> chain(fetch.s(url), parse.s(), store.s()).enqueue()
        """
        return Signature(self, args, kwargs)

    def enqueue_many(self, calls: Iterable[Call]) -> list[Job]:
        """Store many jobs of this task with one multi-row INSERT.

        >>> add.enqueue_many([((1, 2), {}), ((3, 4), {})])

        An item may carry its own unique key: ``((1, 2), {}, "key")``. Rows whose key is held
        come back as the holder, marked ``duplicate``, in input order; the rest are inserted.
        """
        # Imported here: see ``enqueue``.
        from .enqueue import enqueue_many
        from .workflow.store import enqueue_many_with_dependencies

        if self.options.depends_on is not None:
            pairs = [_pair(self.name, index, call) for index, call in enumerate(calls)]
            return enqueue_many_with_dependencies(self, pairs)
        return enqueue_many(self, calls)

    async def aenqueue_many(self, calls: Iterable[Call]) -> list[Job]:
        """``enqueue_many`` for async code, run as ``aenqueue`` runs ``enqueue``.

        >>> jobs = await add.aenqueue_many([((1, 2), {}), ((3, 4), {})])
        """
        return await sync_to_async(self.enqueue_many, thread_sensitive=True)(calls)


class ContextTask(Task[P, R]):
    """A task whose function takes a ``JobContext`` first: ``P`` are the parameters after it,
    the ones ``enqueue`` takes (the worker passes the context). Calling it directly passes the
    context too, as calling the function would."""

    # The override narrows the call to the function's own signature; mypy flags any override
    # of __call__ with other parameters, though every caller of a Task[P, R] gets a Task.
    def __call__(  # type: ignore[override]
        self, context: JobContext, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        return self.spec.func(context, *args, **kwargs)


class _ContextFunction(Protocol[P, R_co]):
    """A function whose first parameter is named ``context``. The parameter is not positional
    only, so its name is part of the match: a plain ``def add(a, b)`` does not match."""

    def __call__(self, context: JobContext, *args: P.args, **kwargs: P.kwargs) -> R_co: ...


class _TaskOptions(TypedDict, total=False):
    name: str | None
    queue: str | None
    priority: int | None
    max_attempts: int | None
    lease_seconds: int | None
    timeout: float | None
    backoff: Backoff
    atomic: bool
    on_failure: FailureClassifier | None
    cron: str | None
    timezone: str
    catch_up: str
    unique_on: UniqueOn | None
    unique_for: int | None
    on_conflict: str
    expires_after: float | None
    concurrency: int | None
    rate: str | None
    limit_key: Callable[..., Any] | None
    fair_key: Callable[..., Any] | None
    batch_size: int | None
    batch_wait: float | None
    hard_timeout: float | None
    version: int
    compatible_versions: Sequence[int]
    api: bool


class _TaskDecorator(Protocol):
    """What ``task(...)`` with options only returns."""

    @overload
    def __call__(self, func: _ContextFunction[P, R], /) -> ContextTask[P, R]: ...
    @overload
    def __call__(self, func: Callable[P, R], /) -> Task[P, R]: ...


@overload
def task(func: _ContextFunction[P, R], /, **options: Unpack[_TaskOptions]) -> ContextTask[P, R]: ...
@overload
def task(func: Callable[P, R], /, **options: Unpack[_TaskOptions]) -> Task[P, R]: ...
@overload
def task(func: None = None, /, **options: Unpack[_TaskOptions]) -> _TaskDecorator: ...
def task(func: Callable[..., Any] | None = None, /, **options: Unpack[_TaskOptions]) -> Any:
    """Register a function as a task.

    >>> @task(queue="default", max_attempts=5)
    ... def send_receipt(order_id): ...
    >>> send_receipt.enqueue(42)

    ``backoff`` is a base delay in seconds for exponential backoff, or a function of the attempt
    number returning the delay. ``atomic=True`` runs the body inside the transaction that records
    the job as succeeded. ``on_failure(exc)`` may return ``"discard"`` to fail at once or
    ``"retry"`` to retry (the default for any exception).

    ``cron="*/5 * * * *"`` runs the task (without arguments) at each tick, in ``timezone``
    (an IANA name); ``catch_up`` says what runs for ticks missed while no worker ran:
    ``"latest"`` (one run), ``"all"`` or ``"none"``. See ``WORKQUEUE["SCHEDULES"]`` for
    schedules with arguments.
    Unique jobs (``docs/guides/scheduling.md``): ``unique_on`` names the arguments (or is a
    function of ``(args, kwargs)`` returning a string) whose values make each job's unique key;
    ``on_conflict`` is "keep" or "replace"; ``unique_for`` allows one job per key per window of
    that many seconds. ``expires_after`` gives every job a deadline that many seconds after
    its enqueue.
    Flow control (``docs/guides/flow-control.md``): ``concurrency=2`` runs at most two jobs of
    the task at once and ``rate="10/s"`` starts at most ten per second, across every worker;
    with ``limit_key`` (a function of the job's arguments) both count per key. ``fair_key``
    (a function of the arguments) makes claims rotate between its keys, so one tenant's
    backlog cannot starve another's. ``batch_size=100, batch_wait=0.5`` runs up to 100 jobs
    in one call of the function, which takes the list of their items.
    ``hard_timeout=60`` kills a job still running after 60 seconds, with the process it runs
    in: only a ``runworker --pool processes`` worker can (``docs/guides/pools.md``).
    ``version=2`` marks a change of the body that its stored checkpoints (``context.step``,
    ``sleep``, ``wait_for_signal``) cannot follow: a job started by another version fails when
    this one would resume it, unless ``compatible_versions=(1,)`` lists that version
    (``docs/guides/long-running.md``, "Deploying new versions").
    ``api=True`` lets clients of the HTTP API enqueue it (``docs/reference/http-api.md``).
    """

    def register(fn: Callable[..., Any]) -> Task[..., Any]:
        spec = define(fn, **options)
        wrapped: Task[..., Any] = ContextTask(spec) if spec.takes_context else Task(spec)
        registry.register(wrapped)
        return wrapped

    return register(func) if func is not None else register


def _pair(owner: str, index: int, call: Any) -> tuple[Sequence[Any], Mapping[str, Any]]:
    try:
        args, kwargs = call
    except (TypeError, ValueError):
        raise InvalidOption(
            f"{owner}.enqueue_many(): item {index} is not an (args, kwargs) pair"
        ) from None
    return args, kwargs
