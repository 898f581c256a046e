"""``assert_enqueued`` / ``assert_not_enqueued``: what a test's code enqueued, by task and call."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..conf import workqueue_settings as conf

if TYPE_CHECKING:
    from ..models import Job


def _task_name(task: Any) -> str:
    """Our ``Task``, a ``django.tasks`` task, or a task name."""
    if isinstance(task, str):
        return task
    module_path = getattr(task, "module_path", None)  # a django.tasks Task
    if isinstance(module_path, str):
        return module_path
    name = getattr(task, "name", None)
    if isinstance(name, str):
        return name
    raise TypeError(f"expected a task or a task name, got {task!r}")


def enqueued_jobs(
    task: Any,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    status: str | Sequence[str] | None = None,
) -> list[Job]:
    """The jobs of ``task`` (oldest first) whose args / kwargs equal the given ones (as JSON:
    a tuple equals a list), in any status unless ``status`` names some."""
    from ..models import Job  # not at import: see ``testing.runner.drain``

    jobs = Job.objects.using(conf.DATABASE).filter(task_name=_task_name(task)).order_by("pk")
    if status is not None:
        jobs = jobs.filter(status__in=[status] if isinstance(status, str) else list(status))
    wanted_args = None if args is None else _as_stored(list(args))
    wanted_kwargs = None if kwargs is None else _as_stored(dict(kwargs))
    return [
        job
        for job in jobs
        if (wanted_args is None or job.args == wanted_args)
        and (wanted_kwargs is None or job.kwargs == wanted_kwargs)
    ]


def _as_stored(value: Any) -> Any:
    """``value`` as a job stores it (JSON): tuples become lists, keys strings."""
    return json.loads(json.dumps(value))


def _describe_call(args: Any, kwargs: Any) -> str:
    parts = [repr(a) for a in args or []] + [f"{k}={v!r}" for k, v in (kwargs or {}).items()]
    return ", ".join(parts)


def assert_enqueued(
    task: Any,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    count: int | None = None,
    status: str | Sequence[str] | None = None,
) -> list[Job]:
    """Fail unless ``task`` was enqueued with these arguments (``count`` times exactly, if
    given); return the matching jobs. Arguments left out match any.

    >>> assert_enqueued(send_receipt, args=[order.pk], count=1)
    """
    found = enqueued_jobs(task, args, kwargs, status=status)
    if (count is None and found) or (count is not None and len(found) == count):
        return found
    name = _task_name(task)
    wanted = (
        "any arguments"
        if args is None and kwargs is None
        else (f"({_describe_call(args, kwargs)})")
    )
    times = "at least once" if count is None else f"{count} time(s)"
    others = enqueued_jobs(task)
    seen = "; ".join(
        f"#{job.pk} ({_describe_call(job.args, job.kwargs)}) {job.status}" for job in others[:10]
    )
    raise AssertionError(
        f"expected {name} enqueued with {wanted} {times}, found {len(found)}. "
        + (f"Jobs of {name}: {seen}" if others else f"No job of {name} was enqueued.")
    )


def assert_not_enqueued(
    task: Any,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
) -> None:
    """Fail if ``task`` was enqueued with these arguments (any arguments, if left out)."""
    found = enqueued_jobs(task, args, kwargs)
    if found:
        calls = "; ".join(f"#{j.pk} ({_describe_call(j.args, j.kwargs)})" for j in found[:10])
        raise AssertionError(
            f"expected no job of {_task_name(task)} with these arguments, found "
            f"{len(found)}: {calls}"
        )
