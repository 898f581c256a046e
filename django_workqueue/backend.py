"""``WorkqueueBackend``: the engine as a backend of Django's ``django.tasks`` (Django 6.0+).

>>> TASKS = {"default": {"BACKEND": "django_workqueue.backend.WorkqueueBackend",
...                      "QUEUES": ["default", "emails"],
...                      "OPTIONS": {"TASK_OPTIONS": {"myapp.tasks.send": {"max_attempts": 5}}}}}

Every Django task becomes one of our tasks (``django_tasks.py``): its jobs get retries, leases,
crash recovery, cancellation and every operator surface. ``enqueue`` joins the caller's
transaction as our own ``Task.enqueue`` does; ``OPTIONS["ON_COMMIT"] = True`` inserts after the
commit instead, Django's documented advice made the default. See docs/guides/django-tasks.md.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import django
from django.core.exceptions import ImproperlyConfigured

if django.VERSION < (6, 0):
    raise ImproperlyConfigured(
        f"django_workqueue.backend.WorkqueueBackend is a backend of django.tasks, which "
        f"Django 6.0 added; this is Django {django.get_version()}. Upgrade to Django 6.0 or "
        f"later, or enqueue with django_workqueue's own @task (it works on Django 5.2)."
    )

from django.core import checks
from django.db import transaction
from django.tasks import Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.module_loading import import_string

from . import django_tasks
from .conf import workqueue_settings as conf
from .exceptions import WorkqueueError

if TYPE_CHECKING:
    from .decorator import Task as EngineTask
    from .models import Job
    from .workflow.canvas import Signature

# Our task options a Django task may take (per task in OPTIONS, or on Django 6.1 as arguments
# of @task); queue and priority are Django's own.
TASK_OPTIONS = (
    "max_attempts", "lease_seconds", "timeout", "backoff", "atomic", "on_failure",
    "unique_on", "unique_for", "on_conflict", "expires_after", "concurrency", "rate",
    "limit_key", "fair_key", "cron", "timezone", "catch_up",
)  # fmt: skip
# Options that take a function: a dotted path to one is imported.
_CALLABLE_OPTIONS = ("backoff", "on_failure", "limit_key", "fair_key")
BACKEND_OPTIONS = ("ON_COMMIT", "TASK_DEFAULTS", "TASK_OPTIONS")
# django.tasks has no retries, and code written for it assumes one run: one body attempt unless
# TASK_DEFAULTS, TASK_OPTIONS or the task says otherwise. A worker's crash spends the crash
# budget, not this one (budgets.py), so a crash still does not fail the job.
DJANGO_TASK_DEFAULTS: dict[str, Any] = {"max_attempts": 1}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkqueueTask(Task):
    """Django's ``Task`` with our options as fields (None: the backend's ``OPTIONS``). On
    Django 6.1, ``@task`` passes its extra arguments here:

    >>> @task(max_attempts=5, backoff=10, unique_on=["order_id"])
    ... def send_receipt(order_id): ...
    """

    max_attempts: int | None = None
    lease_seconds: int | None = None
    timeout: float | None = None
    backoff: Any = None
    atomic: bool | None = None
    on_failure: Any = None
    unique_on: Any = None
    unique_for: int | None = None
    on_conflict: str | None = None
    expires_after: float | None = None
    concurrency: int | None = None
    rate: str | None = None
    limit_key: Any = None
    fair_key: Any = None
    cron: str | None = None
    timezone: str | None = None
    catch_up: str | None = None

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """This task with these arguments as a step of a workflow (``chain``, ``group``,
        ``.then``), as our tasks' ``.s()``; a chain's step gets the previous step's result
        first.

        >>> chain(fetch.s(url), parse.s()).enqueue()
        """
        backend = self.get_backend()
        if not isinstance(backend, WorkqueueBackend):
            raise InvalidTask(f"{self.module_path}: workflows need the WorkqueueBackend")
        return backend.engine_task(self).s(*args, **kwargs)


class WorkqueueBackend(BaseTaskBackend):
    """Runs Django tasks on django-workqueue's workers (``manage.py runworker``)."""

    task_class = WorkqueueTask
    runs_on_workqueue = True
    """What ``django_tasks.resolve`` looks for before it registers a task it imported by path
    (the bridge sits below this module and does not import it)."""

    supports_defer = True
    """``Task.using(run_after=...)``: the job waits until then (database clock)."""
    supports_async_task = True
    """``async def`` tasks run on the worker's event loop."""
    supports_get_result = True
    """Results are the job rows: any process reads them."""
    supports_priority = True
    """-100..100, higher first, as our own priorities."""

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.on_commit = bool(self.options.get("ON_COMMIT", False))
        django_tasks.connect_signals()

    # --- options ---------------------------------------------------------------------------

    def option_problems(self) -> list[str]:
        """What is wrong with ``OPTIONS``, one sentence each."""
        owner = f"TASKS[{self.alias!r}]['OPTIONS']"
        if not isinstance(self.options, Mapping):
            return [f"{owner} must be a dict"]
        problems = [
            f"{owner} has an unknown key {key!r}; the keys are {', '.join(BACKEND_OPTIONS)}"
            for key in self.options
            if key not in BACKEND_OPTIONS
        ]
        defaults = self.options.get("TASK_DEFAULTS", {})
        per_task = self.options.get("TASK_OPTIONS", {})
        if not isinstance(per_task, Mapping):
            return [*problems, f"{owner}['TASK_OPTIONS'] must map task paths to dicts"]
        for where, given in [("TASK_DEFAULTS", defaults), *per_task.items()]:
            label = where if where == "TASK_DEFAULTS" else f"TASK_OPTIONS[{where!r}]"
            if not isinstance(given, Mapping):
                problems.append(f"{owner}['{label}'] must be a dict of task options")
                continue
            problems += [
                f"{owner}[{label!r}] has an unknown task option {key!r}; the options are "
                f"{', '.join(TASK_OPTIONS)} (queue and priority are @task's own)"
                for key in given
                if key not in TASK_OPTIONS
            ]
        return problems

    def task_options(self, task: Task) -> dict[str, Any]:
        """Our options for ``task``: its own fields (Django 6.1's ``@task(...)``) over
        ``TASK_OPTIONS[path]`` over ``TASK_DEFAULTS`` over ``DJANGO_TASK_DEFAULTS`` (one body
        attempt)."""
        problems = self.option_problems()
        if problems:
            raise InvalidTask("; ".join(problems))
        options: dict[str, Any] = {
            **DJANGO_TASK_DEFAULTS,
            **self.options.get("TASK_DEFAULTS", {}),
            **self.options.get("TASK_OPTIONS", {}).get(task.module_path, {}),
        }
        for name in TASK_OPTIONS:
            value = getattr(task, name, None)
            if value is not None:
                options[name] = value
        for name in _CALLABLE_OPTIONS:
            if isinstance(options.get(name), str):
                try:
                    options[name] = import_string(options[name])
                except ImportError as exc:
                    raise InvalidTask(
                        f"{task.module_path}: {name}={options[name]!r} cannot be imported ({exc})"
                    ) from None
        if isinstance(options.get("unique_on"), list):
            options["unique_on"] = tuple(options["unique_on"])
        return options

    # --- the contract ------------------------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        if task.queue_name not in conf.QUEUES:  # TASKS[alias]["QUEUES"] = []: Django's any
            raise InvalidTask(
                f"Queue {task.queue_name!r} is not valid for backend: it is in neither "
                f"TASKS[{self.alias!r}]['QUEUES'] nor WORKQUEUE['QUEUES'] {list(conf.QUEUES)}; "
                f"add it to one of them (the workers serve those queues)."
            )
        try:
            django_tasks.register(task, self.task_options(task))
        except WorkqueueError as exc:
            raise InvalidTask(str(exc)) from None

    def engine_task(self, task: Task) -> EngineTask[..., Any]:
        """Our task running ``task``, with its queue, priority and run_after."""
        self.validate_task(task)
        ours = django_tasks.register(task, self.task_options(task))
        django_tasks.warn_if_unknown_to_workers(task)
        return ours.using(queue=task.queue_name, priority=task.priority, run_at=task.run_after)

    def _prepare(self, task: Task, args: Any, kwargs: Any) -> Any:
        """Our task for ``task`` with its queue, priority and run_after, checked as our
        ``enqueue`` checks (before anything is written or deferred)."""
        # Imported here: django.tasks loads this backend when a task is defined, which may be
        # before Django's app registry is ready, and enqueue imports the models.
        from .enqueue import encode_call, job_template

        ours = self.engine_task(task)
        job_template(ours)
        call = encode_call(args, kwargs, ours.name)
        ours.spec.check_arguments(call.args, call.kwargs)
        return ours

    def _result(
        self, task: Task, job: Job | None, args: Any, kwargs: Any, announce: bool = True
    ) -> TaskResult:
        result: TaskResult = TaskResult(
            task=task,
            id="" if job is None or job.pk is None else str(job.pk),
            status=TaskResultStatus.READY,
            enqueued_at=None if job is None else job.enqueued_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        if job is not None and job.pk is None:  # inserted when the caller's default commits
            transaction.on_commit(functools.partial(_fill, result, job))
        elif announce:
            self._announce(result)
        return result

    def _announce(self, result: TaskResult) -> None:
        transaction.on_commit(
            functools.partial(task_enqueued.send, sender=type(self), task_result=result),
            using=conf.DATABASE,
        )

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """Insert a job joining the caller's transaction (``ON_COMMIT``: after its commit;
        the result's ``id`` is filled in then)."""
        ours = self._prepare(task, args, kwargs)
        if self.on_commit and transaction.get_connection(conf.DATABASE).in_atomic_block:
            result = self._result(task, None, args, kwargs, announce=False)

            def insert() -> None:
                _fill(result, ours.enqueue(*args, **kwargs))

            transaction.on_commit(insert, using=conf.DATABASE)
            return result
        return self._result(task, ours.enqueue(*args, **kwargs), args, kwargs)

    async def aenqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        """``enqueue`` for async code, through our ``Task.aenqueue``; ``task_enqueued`` is
        sent at once (async code holds no transaction to wait for)."""
        ours = self._prepare(task, args, kwargs)
        job = await ours.aenqueue(*args, **kwargs)
        result = self._result(task, job, args, kwargs, announce=False)
        await task_enqueued.asend(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        return self._found(result_id, _jobs(result_id).first())

    async def aget_result(self, result_id: str) -> TaskResult:
        return self._found(result_id, await _jobs(result_id).afirst())

    def _found(self, result_id: str, job: Job | None) -> TaskResult:
        if job is None:
            raise TaskResultDoesNotExist(f"no task result has the id {result_id!r}")
        django_task = django_tasks.django_task_of(job.task_name)
        if django_task is None:
            raise TaskResultDoesNotExist(
                f"result {result_id!r} is a job of {job.task_name}, which is not a django.tasks "
                f"task defined in this process; read it as a job (django_workqueue.models.Job), "
                f"or import the module that defines the task at start-up (an installed app's "
                f"tasks.py, or WORKQUEUE['TASK_MODULES'])"
            )
        return django_tasks.task_result(job, django_task, self.alias)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        return [
            checks.Error(problem, id="django_workqueue.E101") for problem in self.option_problems()
        ]


def _jobs(result_id: Any) -> Any:
    from .models import Job  # not at import: see ``_prepare``

    try:
        pk = int(result_id)
    except (TypeError, ValueError):
        return Job.objects.none()
    return Job.objects.using(conf.DATABASE).filter(pk=pk)


def _fill(result: TaskResult, job: Job) -> None:
    """Give a result made before its insert the job's id and enqueue time, then announce it."""
    object.__setattr__(result, "id", str(job.pk))
    object.__setattr__(result, "enqueued_at", job.enqueued_at)
    backend = result.task.get_backend()
    backend._announce(result)  # type: ignore[attr-defined]
