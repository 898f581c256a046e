"""Attempt middlewares: code that wraps every attempt, configured like Django's ``MIDDLEWARE``.

``WORKQUEUE["MIDDLEWARE"]`` lists dotted paths of factories. A factory is called once per
worker process with the next callable of the chain and returns a callable that takes the
attempt's ``JobContext`` and returns the task's value::

    def timing(next_call):
        def call(context):
            started = time.monotonic()
            try:
                return next_call(context)
            finally:
                metrics.observe(context.job.task_name, time.monotonic() - started)
        return call

The first listed is the outermost. The innermost call runs the task's body (for an async task,
it waits for the coroutine on the worker's event loop; for an ``atomic=True`` task it runs
inside the task's transaction). Whatever a middleware raises is the attempt's exception,
classified as if the body had raised it (``Retry``, ``Snooze``, ``Discard`` included); a
middleware that returns without calling ``next_call`` returns the attempt's result itself.

Two are shipped: ``logging_context`` and ``opentelemetry_span`` (``pip install
django-workqueue[otel]``).
"""

from __future__ import annotations

import contextvars
import importlib.util
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .conf import workqueue_settings as conf
from .exceptions import Snooze

if TYPE_CHECKING:
    from .context import JobContext

Attempt = Callable[["JobContext"], Any]
Factory = Callable[[Attempt], Attempt]

_UNBUILT = object()
_chain: Any = _UNBUILT
_lock = threading.Lock()


def factories() -> list[Factory]:
    """The configured factories, imported (``ImproperlyConfigured`` names a path that fails)."""
    paths = conf.MIDDLEWARE
    if not isinstance(paths, list | tuple):
        raise ImproperlyConfigured(
            f"WORKQUEUE['MIDDLEWARE'] must be a list of dotted paths, got {type(paths).__name__}"
        )
    found = []
    for path in paths:
        try:
            factory = import_string(path)
        except ImportError as exc:
            raise ImproperlyConfigured(
                f"WORKQUEUE['MIDDLEWARE'] names {path!r}, which cannot be imported: {exc}"
            ) from exc
        if not callable(factory):
            raise ImproperlyConfigured(
                f"WORKQUEUE['MIDDLEWARE'] names {path!r}, which is not callable; give a "
                f"factory: make(next_call) -> call(context)"
            )
        found.append(factory)
    return found


def chain(inner: Attempt) -> Attempt | None:
    """The configured middlewares around ``inner``, built on first use and kept for the
    process (rebuilt when the setting changes); None when none is configured."""
    global _chain
    built = _chain
    if built is not _UNBUILT:  # every attempt but the first: no lock
        return built
    with _lock:
        if _chain is _UNBUILT:
            call: Attempt | None = None
            made = factories()
            if made:
                call = inner
                for factory in reversed(made):
                    call = factory(call)
                    if not callable(call):
                        raise ImproperlyConfigured(
                            f"the attempt middleware factory {factory!r} returned "
                            f"{call!r}, not a callable taking the job's context"
                        )
            _chain = call
        return _chain


def _reset(*, setting: str, **kwargs: Any) -> None:
    global _chain
    if setting == "WORKQUEUE":
        with _lock:
            _chain = _UNBUILT


setting_changed.connect(_reset)


# --- logging context -------------------------------------------------------------------------

_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar(
    "workqueue_job", default=None
)
_factory_installed = False
_factory_lock = threading.Lock()

FIELDS = ("workqueue_job_id", "workqueue_task", "workqueue_attempt", "workqueue_queue",
          "workqueue_worker_id")  # fmt: skip
"""The attributes ``logging_context`` gives every log record (None outside a job)."""


def _install_record_factory() -> None:
    global _factory_installed
    with _factory_lock:
        if _factory_installed:
            return
        previous = logging.getLogRecordFactory()

        def record(*args: Any, **kwargs: Any) -> logging.LogRecord:
            made = previous(*args, **kwargs)
            context = _current.get()
            if context is None:
                for field in FIELDS:
                    made.__dict__.setdefault(field, None)
            else:
                job = context.job
                made.__dict__.update(
                    workqueue_job_id=job.id, workqueue_task=job.task_name,
                    workqueue_attempt=job.attempt, workqueue_queue=job.queue,
                    workqueue_worker_id=context.owner,
                )  # fmt: skip
            return made

        logging.setLogRecordFactory(record)
        _factory_installed = True


def logging_context(next_call: Attempt) -> Attempt:
    """Every log record made during an attempt, by any logger, in the slot's thread or in an
    async task on the worker's event loop, carries ``workqueue_job_id``, ``workqueue_task``,
    ``workqueue_attempt``, ``workqueue_queue`` and ``workqueue_worker_id`` (None on records made
    outside jobs, so one format string serves every record)::

        "format": "%(levelname)s %(name)s [job %(workqueue_job_id)s %(workqueue_task)s "
                  "#%(workqueue_attempt)s] %(message)s"

    It installs a log record factory (``logging.setLogRecordFactory``) wrapping the one in
    place; the job is kept in a context variable, which an async task's coroutine inherits.
    """
    _install_record_factory()

    def call(context: JobContext) -> Any:
        token = _current.set(context)
        try:
            return next_call(context)
        finally:
            _current.reset(token)

    return call


# --- OpenTelemetry ---------------------------------------------------------------------------


def opentelemetry_span(next_call: Attempt) -> Attempt:
    """A span per attempt, ``workqueue <task name>`` of kind CONSUMER, with the attributes
    ``workqueue.job_id``, ``workqueue.task``, ``workqueue.attempt``, ``workqueue.queue`` and
    ``workqueue.worker_id``; an exception is recorded on it and sets its status to ERROR.
    Needs ``opentelemetry-api`` (``pip install django-workqueue[otel]``); spans go wherever
    the process's tracer provider sends them."""
    try:  # imported here: opentelemetry-api is an optional extra (otel)
        import opentelemetry.trace as trace
    except ImportError as exc:
        raise ImproperlyConfigured(
            "WORKQUEUE['MIDDLEWARE'] lists django_workqueue.middleware.opentelemetry_span, "
            "but opentelemetry-api is not installed: pip install 'django-workqueue[otel]'"
        ) from exc
    tracer = trace.get_tracer("django_workqueue")

    def call(context: JobContext) -> Any:
        job = context.job
        attributes: dict[str, Any] = {
            "workqueue.job_id": job.id, "workqueue.task": job.task_name,
            "workqueue.attempt": job.attempt, "workqueue.queue": job.queue,
            "workqueue.worker_id": context.owner,
        }  # fmt: skip
        with tracer.start_as_current_span(
            f"workqueue {job.task_name}",
            kind=trace.SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                return next_call(context)
            except Snooze:
                raise  # waiting for later is no failure
            except BaseException as exc:
                span.record_exception(exc)
                span.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}"))
                raise

    return call


def opentelemetry_missing() -> str | None:
    """Why ``opentelemetry_span`` cannot be used here, or None (for the system check)."""
    if importlib.util.find_spec("opentelemetry") is None:
        return "opentelemetry-api is not installed: pip install 'django-workqueue[otel]'"
    return None


opentelemetry_span.requirement = opentelemetry_missing  # type: ignore[attr-defined]
