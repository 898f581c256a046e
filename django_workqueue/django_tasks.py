"""The bridge between Django's ``django.tasks`` and the engine, used by ``backend.py``.

A Django task (``@django.tasks.task``) whose backend is a ``WorkqueueBackend`` becomes one of
our tasks under its ``module_path``: the engine stores, claims, leases, retries and records it
like any other job. What the function gets is Django's: a ``TaskContext`` (with the attempt and
the ``TaskResult``) for ``takes_context`` tasks, and Django's ``task_started`` /
``task_finished`` signals around the run. A Django task is registered when it is defined (the
backend's ``validate_task``): nothing is ever imported by a task's path, which job rows and
requests carry. A worker knows the Django tasks of the modules it imports at start-up; a task
defined elsewhere is named by a warning at its first enqueue (``warn_if_unknown_to_workers``).

Importable on every Django version; only ``backend.py`` (Django 6.0+) registers tasks here.
So ``django.tasks`` (Django 6.0+) is imported inside the functions that use it, and so are the
models: this module loads with the backend, which ``django.tasks`` loads when a task is
defined, possibly before Django's app registry is ready.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import sys
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.conf import settings

from . import signals
from .conf import workqueue_settings
from .decorator import task
from .registry import find_task
from .states import Status

if TYPE_CHECKING:
    from django.tasks import Task as DjangoTask
    from django.tasks import TaskResult

    from .context import JobContext
    from .decorator import Task
    from .models import Job

# What each of our statuses is in Django's four.
RESULT_STATUS = {
    Status.BLOCKED: "READY",
    Status.SCHEDULED: "READY",
    Status.READY: "READY",
    Status.HELD: "READY",
    # Started, not finished: its body is parked on context.wait_for_signal.
    Status.WAITING: "RUNNING",
    Status.RUNNING: "RUNNING",
    Status.SUCCEEDED: "SUCCESSFUL",
    Status.FAILED: "FAILED",
    Status.CANCELLED: "FAILED",
}

logger = logging.getLogger("django_workqueue")

# module_path -> (the Django task, our task, the options it was registered with)
_bridged: dict[str, tuple[DjangoTask, Task[..., Any], dict[str, Any]]] = {}
# Tasks first registered after start-up (module_path -> module): a worker may not know them.
# Both hold names of tasks the code defines (as many as it defines), never names from outside.
_defined_late: dict[str, str] = {}
_warned: set[str] = set()

CANCELLED_ERROR = "django_workqueue.exceptions.JobCancelled"


def register(django_task: DjangoTask, options: dict[str, Any]) -> Task[..., Any]:
    """Our task running ``django_task`` (made once per task and options)."""
    name = django_task.module_path
    known = _bridged.get(name)
    if (
        known is not None
        and known[0].func is django_task.func
        and known[2] == options
        and find_task(name) is known[1]
    ):
        return known[1]
    ours: Task[..., Any] = task(
        _runner(django_task),
        name=name,
        queue=django_task.queue_name,
        priority=django_task.priority,
        **options,
    )
    if known is None and not _at_start_up():
        _defined_late[name] = django_task.func.__module__
    _bridged[name] = (django_task, ours, dict(options))
    return ours


def django_task_of(name: str) -> DjangoTask | None:
    """The Django task registered as ``name``, or None (a look-up: nothing is imported)."""
    known = _bridged.get(name)
    return None if known is None else known[0]


def _at_start_up() -> bool:
    """Whether the code running now runs in every process of the project as it starts, so in
    every worker too: while Django sets up its apps (settings, models, each app's ``ready()``,
    which imports the apps' tasks modules and ``WORKQUEUE["TASK_MODULES"]``), or while the
    URLconf is imported (workers import it at start: ``discovery.import_urlconf``)."""
    if not apps.ready:
        return True
    urlconf = sys.modules.get(str(getattr(settings, "ROOT_URLCONF", "")))
    # Python marks a module's spec ``_initializing`` while the module's code runs.
    return bool(getattr(getattr(urlconf, "__spec__", None), "_initializing", False))


def warn_if_unknown_to_workers(django_task: DjangoTask) -> None:
    """Log (once per task) that ``django_task`` was defined in a module that workers do not
    import at start-up: they cannot run its jobs, which fail with ``TaskNotRegistered``."""
    name = django_task.module_path
    module = _defined_late.get(name)
    if module is None or name in _warned:
        return
    _warned.add(name)
    logger.warning(
        "django.tasks task %s is defined in %s, which was imported after start-up: a worker "
        "imports only each installed app's tasks module, WORKQUEUE['TASK_MODULES'] and the "
        "URLconf (with what they import), so it does not know this task and its jobs will "
        "fail with TaskNotRegistered. Move the task into an installed app's tasks.py, or add "
        "%r to WORKQUEUE['TASK_MODULES'] (docs/guides/django-tasks.md#where-tasks-live).",
        name, module, module,
    )  # fmt: skip


def _runner(django_task: DjangoTask) -> Any:
    """The function our engine calls for ``django_task``: it takes our ``JobContext`` first,
    sends ``task_started`` and calls the Django function (with a ``TaskContext`` if it takes
    one). For an async function it returns the coroutine (the worker awaits it on its event
    loop); the database read and the signal happen first, on the slot's thread."""
    func = django_task.func
    parameters = list(inspect.signature(func).parameters.values())
    if django_task.takes_context:
        parameters = parameters[1:]

    def run(context: JobContext, *args: Any, **kwargs: Any) -> Any:
        result = started(django_task, context)
        if django_task.takes_context:
            from django.tasks import TaskContext  # Django 6.0+ (see the module's docstring)

            return func(TaskContext(task_result=result), *args, **kwargs)
        return func(*args, **kwargs)

    if inspect.iscoroutinefunction(func):
        inspect.markcoroutinefunction(run)  # type: ignore[attr-defined,unused-ignore]
    context = inspect.Parameter("context", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    run.__signature__ = inspect.Signature([context, *parameters])  # type: ignore[attr-defined]
    run.__module__, run.__qualname__, run.__name__ = (
        func.__module__, func.__qualname__, func.__name__,
    )  # fmt: skip
    return run


def started(django_task: DjangoTask, context: JobContext) -> TaskResult:
    """The running job's ``TaskResult``, after sending ``task_started`` with it."""
    from django.tasks.signals import task_started  # Django 6.0+ (see the module's docstring)

    from .models import Job  # not at import (see the module's docstring)

    job = Job.objects.using(_alias()).get(pk=context.job.id)
    backend = django_task.get_backend()
    result = task_result(job, django_task, backend.alias)
    task_started.send(sender=type(backend), task_result=result)
    return result


def task_result(job: Job, django_task: DjangoTask, alias: str) -> TaskResult:
    """``job`` as Django's ``TaskResult`` of ``django_task`` (see docs/guides/django-tasks.md
    for how each field is read)."""
    # Django 6.0+ (see the module's docstring)
    from django.tasks import TaskResult, TaskResultStatus
    from django.tasks.base import TaskError

    errors = [
        TaskError(
            exception_class_path=str(entry.get("type") or "Exception"),
            traceback=entry.get("traceback") or f"{entry.get('type')}: {entry.get('message')}",
        )
        for entry in job.errors or []
        if isinstance(entry, dict)
    ]
    if job.status == Status.CANCELLED and not any(
        e.exception_class_path == CANCELLED_ERROR for e in errors
    ):
        errors.append(
            TaskError(exception_class_path=CANCELLED_ERROR, traceback="JobCancelled: cancelled")
        )
    from django.tasks.exceptions import InvalidTask  # Django 6.0+ (see the module's docstring)

    task = django_task
    if task.queue_name != job.queue or task.priority != job.priority:
        # A queue the settings no longer list keeps the task's own: the result still reads.
        with contextlib.suppress(InvalidTask):
            task = task.using(queue_name=job.queue, priority=job.priority)
    result: TaskResult = TaskResult(
        task=task,
        id=str(job.pk),
        status=TaskResultStatus(RESULT_STATUS[Status(job.status)]),
        enqueued_at=job.enqueued_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
        last_attempted_at=job.started_at,
        args=list(job.args),
        kwargs=dict(job.kwargs),
        backend=alias,
        errors=errors,
        worker_ids=worker_ids(job),
    )
    if job.status == Status.SUCCEEDED:
        object.__setattr__(result, "_return_value", job.result)
    return result


def worker_ids(job: Job) -> list[str]:
    """One id per attempt (Django counts attempts as ``len(worker_ids)``): the worker each
    failed attempt's error entry names, the lease owner for the running attempt, else
    ``"unknown"`` (a successful attempt's worker is not kept)."""
    named = {
        entry.get("attempt"): entry.get("worker")
        for entry in job.errors or []
        if isinstance(entry, dict) and entry.get("worker")
    }
    ids = [str(named.get(attempt) or "unknown") for attempt in range(1, job.attempt + 1)]
    if job.status == Status.RUNNING and job.lease_owner and ids:
        ids[-1] = job.lease_owner
    return ids


def send_finished(sender: Any, job_id: int, task_name: str, **kwargs: Any) -> None:
    """Receiver of our ``job_succeeded`` / ``job_failed`` / ``job_cancelled``: Django's
    ``task_finished`` for jobs of Django tasks, with the result as stored."""
    known = _bridged.get(task_name)
    if known is None:
        return
    from django.tasks.signals import task_finished  # Django 6.0+ (see the module's docstring)

    from .models import Job  # not at import (see the module's docstring)

    django_task = known[0]
    backend = django_task.get_backend()
    job = Job.objects.using(_alias()).filter(pk=job_id).first()
    if job is not None:
        result = task_result(job, django_task, backend.alias)
        task_finished.send(sender=type(backend), task_result=result)


def _alias() -> str:
    return str(workqueue_settings.DATABASE)


def connect_signals() -> None:
    """Send Django's ``task_finished`` when our jobs of Django tasks end (once per process)."""
    for signal in (signals.job_succeeded, signals.job_failed, signals.job_cancelled):
        signal.connect(send_finished, dispatch_uid="django_workqueue.django_tasks.finished")
