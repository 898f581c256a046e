"""Running one job: a linear pipeline — resolve the task, the attempt middlewares
(``middleware.py``), call it, classify the outcome.

The slot hands the outcome to the completer, which writes it in a batch. ``atomic=True`` tasks
are the exception: the body and the fenced write of its success share one transaction, so the
body's writes commit if and only if this worker, still the lease owner, records the success.

Whatever goes wrong outside the task's body (a ``backoff`` or ``on_failure`` that raises, an
exception whose ``str()`` raises) still ends the attempt with a recorded failure that says what
went wrong: a slot never drops an outcome.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from .. import middleware, payload, retry, signalling, signals
from ..conf import workqueue_settings as conf
from ..context import AbortReason, JobContext
from ..db import ClaimedJob, Driver
from ..exceptions import (
    DeadlineExceeded,
    Discard,
    JobCancelled,
    JobTimeout,
    MalformedArguments,
    PayloadNotJSON,
    PayloadTooLarge,
    ResultNotJSON,
    Retry,
    Snooze,
    TaskNotRegistered,
    WorkqueueError,
)
from ..outcomes import Outcome, OutcomeKind
from ..payload import storable_text
from ..registry import find_task, import_errors
from ..states import Status
from ..workflow import release
from ..workflow.store import first_argument
from .asyncloop import AsyncLoop

if TYPE_CHECKING:
    from ..decorator import Task


logger = logging.getLogger("django_workqueue.worker")

_TRACEBACK_LIMIT = 20_000


class _LostLease(Exception):
    pass


def run(
    job: ClaimedJob, context: JobContext, driver: Driver, loop: AsyncLoop | None
) -> tuple[Outcome | None, bool]:
    """Run ``job``; return (outcome, whether it still has to be written).

    ``atomic=True`` tasks record their success inside their own transaction, so theirs comes
    back already written (or None when the lease was lost and the body rolled back); the
    worker batches every other outcome into one write with those of other jobs.
    """
    if signals.job_started.receivers:
        signalling.started(job.id, job.task_name, job.queue, job.attempt, context.owner)
    task = find_task(job.task_name)
    if task is None:  # retried: a worker running newer code may know it
        return _not_run(job, None, _not_registered(job.task_name)), True
    if job.deadline_passed and job.deadline is not None:
        late = DeadlineExceeded(f"the deadline {job.deadline.isoformat()} passed before it ran")
        return _not_run(job, task, late, OutcomeKind.DISCARD), True
    malformed = _malformed_arguments(job)
    if malformed is not None:  # the row does not change between attempts: no retry helps
        return _not_run(job, task, MalformedArguments(malformed), OutcomeKind.DISCARD), True

    try:
        args = list(job.args)
        if job.input_shape is not None:  # a workflow step: the previous step's value first
            args.insert(0, first_argument(driver.alias, job.id, job.input_shape))
        if task.spec.takes_context:
            args.insert(0, context)
            if task.spec.is_async and job.workflow_id is not None:
                _ = context.dependencies  # read now: the event loop must not query the database
        if task.spec.atomic:
            return _run_atomic(task, job, context, driver, args), False
        value = _attempt(task, job, context, args, loop)
        outcome = _success(job, value)
        outcome.spawn = context.spawn
    except _LostLease:
        logger.warning(
            "job %s attempt %s: lease lost; the result was rolled back", job.id, job.attempt
        )
        return None, False
    except BaseException as exc:  # a task's failure must never end the slot
        outcome = _classified(task, job, context, exc)
    return outcome, True


# The body of each attempt running through the middlewares, by its context's id: the chain is
# built once, and a middleware may call on in another thread than the slot's.
_bodies: dict[int, Callable[[], Any]] = {}


def _call_body(context: JobContext) -> Any:
    """The innermost call of the middleware chain: the attempt's body."""
    return _bodies[id(context)]()


def load_middlewares() -> None:
    """Build the attempt middlewares now (at worker start): a setting that names something
    that cannot be imported fails the start, not the first job."""
    middleware.chain(_call_body)


def _attempt(
    task: Task, job: ClaimedJob, context: JobContext, args: list[Any], loop: AsyncLoop | None
) -> Any:
    """Call the task's body through the attempt middlewares (``WORKQUEUE["MIDDLEWARE"]``)."""
    spec = task.spec
    body: Callable[[], Any]
    if spec.is_async:
        if loop is None:
            raise RuntimeError("no event loop for async tasks")  # runner always passes one
        body = lambda: loop.run(spec.func(*args, **job.kwargs), context, spec.timeout)  # noqa: E731
    else:
        body = lambda: spec.func(*args, **job.kwargs)  # noqa: E731
    chain = middleware.chain(_call_body)
    if chain is None:
        return body()
    _bodies[id(context)] = body
    try:
        return chain(context)
    finally:
        del _bodies[id(context)]


def _not_run(
    job: ClaimedJob, task: Task | None, exc: BaseException, kind: OutcomeKind = OutcomeKind.RETRY
) -> Outcome:
    """The outcome of an attempt that could not call the task, logged like a failure."""
    outcome = _ended(job, task, exc, kind)
    _log_failure(job, outcome, exc)
    return outcome


def _not_registered(task_name: str) -> TaskNotRegistered:
    """Why this worker cannot run a job of ``task_name``, and what to do about it."""
    message = (
        f"no task is registered as {task_name!r} in this worker. If the task still exists, "
        f"make sure the module that defines it is imported (an installed app's tasks.py, or "
        f"WORKQUEUE['TASK_MODULES']) and deploy it to every worker; if its code was removed, "
        f"cancel its jobs. The job is retried until its attempts are spent."
    )
    if import_errors:
        failed = "; ".join(f"{name} ({error})" for name, error in sorted(import_errors.items()))
        message += f" Task modules that failed to import in this worker: {failed}."
    return TaskNotRegistered(message)


def _malformed_arguments(job: ClaimedJob) -> str | None:
    """Why the row's args and kwargs cannot make a call, if they cannot (a row written by
    something other than enqueue: raw SQL, another system, a hand edit)."""
    try:
        args, kwargs = job.args, job.kwargs
    except (ValueError, RecursionError) as exc:  # an integer too long, nesting too deep
        reason = exc if isinstance(exc, ValueError) else "they are nested too deeply"
        return f"the job's arguments cannot be read: {reason}; fix the row or cancel the job"
    if isinstance(args, list) and isinstance(kwargs, dict):
        return None
    return (
        f"the job's args must be a JSON array and its kwargs a JSON object, but the row holds "
        f"{_json_kind(args)} and {_json_kind(kwargs)} (it was not written by enqueue); fix the "
        f"row or cancel the job"
    )


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _run_atomic(
    task: Task, job: ClaimedJob, context: JobContext, driver: Driver, args: list[Any]
) -> Outcome:
    with transaction.atomic(using=driver.alias):
        value = _attempt(task, job, context, args, None)
        outcome = _success(job, value)
        outcome.progress = context.progress  # the last report commits with the result
        outcome.spawn = context.spawn
        context.finished = True
        # The success, the steps the body added and the release of the job's dependents
        # commit with the body's writes, or none of them does.
        if (job.id, job.attempt) not in release.record(driver, context.owner, [outcome]).written:
            raise _LostLease
    return outcome


def _success(job: ClaimedJob, value: Any) -> Outcome:
    try:
        encoded = payload.encode(value, "result", f"{job.task_name} returned a value that")
        payload.check_size(
            len(encoded.encode()), conf.MAX_RESULT_BYTES,
            f"the result of {job.task_name} is", "MAX_RESULT_BYTES",
        )  # fmt: skip
    except (PayloadNotJSON, PayloadTooLarge) as exc:
        raise ResultNotJSON(str(exc)) from None
    return _outcome(job, OutcomeKind.SUCCEEDED, result_json=encoded)


def _classified(task: Task, job: ClaimedJob, context: JobContext, exc: BaseException) -> Outcome:
    """The outcome of a body that raised ``exc``, logged. Code of the task's that runs here
    (``backoff``, ``on_failure``, the exception's ``str()``) cannot drop the outcome: if it
    raises, the attempt ends as a failure that names it, retried with the default backoff."""
    try:
        outcome = _classify(task, job, context, exc)
    except Exception as problem:
        why = WorkqueueError(
            f"{job.task_name} raised {_describe(exc)}, and classifying that failure raised "
            f"{_describe(problem)} (check the task's backoff and on_failure); retried with "
            f"the default backoff"
        )
        why.__cause__ = problem
        outcome = _ended(job, None, why)
    _log_failure(job, outcome, exc)
    return outcome


def _classify(task: Task, job: ClaimedJob, context: JobContext, exc: BaseException) -> Outcome:
    if isinstance(exc, Retry):
        delay = retry.delay_for(task.spec.backoff, job.attempt) if exc.delay is None else exc.delay
        return _outcome(job, OutcomeKind.RETRY, error=_error(exc), delay=delay)
    if isinstance(exc, Snooze):
        return _outcome(job, OutcomeKind.SNOOZE, delay=exc.delay)
    if isinstance(exc, Discard | ResultNotJSON):
        return _ended(job, task, exc, OutcomeKind.DISCARD)
    if context.timed_out and isinstance(exc, JobCancelled | TimeoutError):
        exc = JobTimeout(f"{job.task_name} ran past its timeout of {task.spec.timeout}s")
    elif context.cancel_requested and isinstance(exc, JobCancelled | asyncio.CancelledError):
        return _ended(job, task, JobCancelled("cancelled", reason=context.abort_reason),
                      OutcomeKind.CANCELLED)  # fmt: skip
    elif context.abort_reason == AbortReason.SHUTDOWN and isinstance(
        exc, JobCancelled | asyncio.CancelledError
    ):
        # It stopped because the worker is shutting down: given back, uncharged, in its place
        # (the shutdown has usually released it already; see worker/shutdown.py).
        return _outcome(job, OutcomeKind.RELEASE)
    if task.spec.on_failure is not None:
        try:
            verdict = task.spec.on_failure(exc)
        except Exception as problem:
            # Retried as usual, and the recorded error says why on_failure did not decide.
            wrapped = WorkqueueError(
                f"{_describe(exc)}; on_failure of {job.task_name} raised {_describe(problem)}, "
                f"so the failure was retried as usual"
            )
            wrapped.__cause__ = exc
            return _ended(job, task, wrapped)
        if verdict == "discard":
            return _ended(job, task, exc, OutcomeKind.DISCARD)
    return _ended(job, task, exc)


def _ended(
    job: ClaimedJob,
    task: Task | None,
    exc: BaseException,
    kind: OutcomeKind = OutcomeKind.RETRY,
) -> Outcome:
    """A failure outcome for ``exc``: retried after the task's backoff unless ``kind`` says
    otherwise."""
    delay = 0.0
    if kind == OutcomeKind.RETRY:
        delay = retry.delay_for(task.spec.backoff if task else None, job.attempt)
    return _outcome(job, kind, error=_error(exc), delay=delay)


def _outcome(job: ClaimedJob, kind: OutcomeKind, **fields: Any) -> Outcome:
    return Outcome(
        job_id=job.id, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts,
        task_name=job.task_name, queue=job.queue, **fields,
    )  # fmt: skip


def _error(exc: BaseException) -> dict[str, Any]:
    kind = type(exc)
    with_traceback = not isinstance(exc, MalformedArguments)
    trace = None
    if with_traceback:
        try:
            trace = "".join(traceback.format_exception(exc))[-_TRACEBACK_LIMIT:]
        except Exception as problem:  # a __str__ that raises breaks the formatting too
            trace = f"(the traceback could not be formatted: {_describe(problem)})"
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": storable_text(_safe_str(exc)[:2000]),
        "traceback": None if trace is None else storable_text(trace),
    }


def _safe_str(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception as problem:
        return f"<{type(exc).__name__} whose str() raised {type(problem).__name__}>"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {_safe_str(exc)}"


def _log_failure(job: ClaimedJob, outcome: Outcome, exc: BaseException) -> None:
    """One log line per failed attempt on the worker's logger, so that log handlers and error
    trackers see failures: WARNING when it will run again, ERROR when it ends ``failed``."""
    status = outcome.status
    if outcome.kind in (OutcomeKind.SNOOZE, OutcomeKind.RELEASE) or status in (
        Status.SUCCEEDED,
        Status.CANCELLED,
    ):
        if status == Status.CANCELLED:
            logger.info("job %s (%s) attempt %s cancelled", job.id, job.task_name, job.attempt)
        return
    error = outcome.error or {}
    if status == Status.FAILED:
        level, verdict = logging.ERROR, "failed; the job is dead-lettered (status failed)"
    else:
        level, verdict = logging.WARNING, f"failed; retrying in {outcome.delay:.1f}s"
    logger.log(
        level, "job %s (%s) attempt %s of %s %s: %s: %s",
        job.id, job.task_name, job.attempt, job.max_attempts, verdict,
        error.get("type", type(exc).__name__), error.get("message", ""),
        exc_info=(type(exc), exc, exc.__traceback__),
        extra={"job_id": job.id, "task_name": job.task_name, "attempt": job.attempt},
    )  # fmt: skip


def log_not_written(outcome: Outcome, gone: bool = False) -> None:
    if gone:
        logger.warning(
            "job %s attempt %s: the job's row is gone (deleted while it ran); its %s outcome "
            "was dropped", outcome.job_id, outcome.attempt, outcome.kind,
        )  # fmt: skip
        return
    logger.warning(
        "job %s attempt %s: this worker no longer holds the lease; its %s outcome was not "
        "written (the job was reaped, released or cancelled meanwhile)",
        outcome.job_id, outcome.attempt, outcome.kind,
    )  # fmt: skip


def unstorable(outcome: Outcome, exc: BaseException) -> Outcome:
    """A discard saying why ``outcome`` could not be written (the database refused it)."""
    problem = WorkqueueError(
        f"the job's {outcome.kind} outcome could not be stored: {_describe(exc)}"
    )
    return Outcome(
        job_id=outcome.job_id, attempt=outcome.attempt, kind=OutcomeKind.DISCARD,
        max_attempts=outcome.max_attempts, task_name=outcome.task_name, queue=outcome.queue,
        error={"type": "django_workqueue.exceptions.WorkqueueError",
               "message": storable_text(str(problem)[:2000]), "traceback": None},
    )  # fmt: skip
