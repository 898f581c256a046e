"""The bridge between Django's ``django.tasks`` and the engine, used by ``backend.py``.

A Django task (``@django.tasks.task``) whose backend is a ``WorkqueueBackend`` becomes one of
our tasks under its ``module_path``: the engine stores, claims, leases, retries and records it
like any other job. What the function gets is Django's: a ``TaskContext`` (with the attempt and
the ``TaskResult``) for ``takes_context`` tasks, and Django's ``task_started`` /
``task_finished`` signals around the run. A worker that meets a job of a Django task it has not
seen yet imports the task by its path (``resolve``), but only when what it finds there is a
Django task of a ``WorkqueueBackend``: a job row cannot make a worker call anything else.

Importable on every Django version: on Django < 6.0 nothing resolves.
"""

from __future__ import annotations

import contextlib
import inspect
from typing import TYPE_CHECKING, Any

import django

from .states import Status

if TYPE_CHECKING:
    from django.tasks import Task as DjangoTask
    from django.tasks import TaskResult

    from .context import JobContext
    from .decorator import Task
    from .models import Job

HAS_DJANGO_TASKS = django.VERSION >= (6, 0)

# What each of our statuses is in Django's four.
RESULT_STATUS = {
    Status.BLOCKED: "READY",
    Status.SCHEDULED: "READY",
    Status.READY: "READY",
    Status.HELD: "READY",
    Status.RUNNING: "RUNNING",
    Status.SUCCEEDED: "SUCCESSFUL",
    Status.FAILED: "FAILED",
    Status.CANCELLED: "FAILED",
}

# module_path -> (the Django task, our task, the options it was registered with)
_bridged: dict[str, tuple[DjangoTask, Task[..., Any], dict[str, Any]]] = {}
# Names that were looked for and are not Django tasks of ours (imported once, not per job).
_not_django: set[str] = set()

CANCELLED_ERROR = "django_workqueue.exceptions.JobCancelled"


def register(django_task: DjangoTask, options: dict[str, Any]) -> Task[..., Any]:
    """Our task running ``django_task`` (made once per task and options)."""
    from .decorator import task
    from .registry import find_task

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
    _bridged[name] = (django_task, ours, dict(options))
    _not_django.discard(name)
    return ours


def django_task_of(name: str) -> DjangoTask | None:
    """The Django task registered as ``name`` (imported by path if need be), or None."""
    if name not in _bridged:
        resolve(name)
    known = _bridged.get(name)
    return None if known is None else known[0]


def resolve(name: str) -> Task[..., Any] | None:
    """Our task for the Django task at the dotted path ``name``, importing its module, if it
    is a Django task whose backend is a ``WorkqueueBackend``; else None (remembered)."""
    known = _bridged.get(name)
    if known is not None:
        return known[1]
    if not HAS_DJANGO_TASKS or name in _not_django or "." not in name:
        return None
    from django.tasks import Task as DjangoTask
    from django.utils.module_loading import import_string

    try:
        found = import_string(name)
    except Exception:
        found = None
    if isinstance(found, DjangoTask):
        backend: Any = found.get_backend()
        if getattr(type(backend), "runs_on_workqueue", False) is True:  # a WorkqueueBackend
            # Defining the task validated it, which registered it; register again in case the
            # module was imported before the backend could (another backend alias, a reload).
            return register(found, backend.task_options(found))
    _not_django.add(name)
    return None


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
            from django.tasks import TaskContext

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
    from django.tasks.signals import task_started

    from .models import Job

    job = Job.objects.using(_alias()).get(pk=context.job.id)
    backend = django_task.get_backend()
    result = task_result(job, django_task, backend.alias)
    task_started.send(sender=type(backend), task_result=result)
    return result


def task_result(job: Job, django_task: DjangoTask, alias: str) -> TaskResult:
    """``job`` as Django's ``TaskResult`` of ``django_task`` (see docs/guides/django-tasks.md
    for how each field is read)."""
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
    from django.tasks.exceptions import InvalidTask

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
    from django.tasks.signals import task_finished

    from .models import Job

    django_task = known[0]
    backend = django_task.get_backend()
    job = Job.objects.using(_alias()).filter(pk=job_id).first()
    if job is not None:
        result = task_result(job, django_task, backend.alias)
        task_finished.send(sender=type(backend), task_result=result)


def _alias() -> str:
    from .conf import workqueue_settings

    return str(workqueue_settings.DATABASE)


def connect_signals() -> None:
    """Send Django's ``task_finished`` when our jobs of Django tasks end (once per process)."""
    from . import signals

    for signal in (signals.job_succeeded, signals.job_failed, signals.job_cancelled):
        signal.connect(send_finished, dispatch_uid="django_workqueue.django_tasks.finished")
