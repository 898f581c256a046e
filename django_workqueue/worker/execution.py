"""Running one job: a linear pipeline — resolve the task, call it, classify the outcome, record it.

The outcome is recorded with one fenced UPDATE. For ``atomic=True`` tasks the body and that
UPDATE share one transaction, so the body's writes commit if and only if this worker, still the
lease owner, records the job as succeeded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import traceback
from collections.abc import Coroutine
from typing import Any

from django.db import InterfaceError, OperationalError, connections, transaction

from .. import payload, retry
from ..apps import import_errors
from ..conf import workqueue_settings as conf
from ..context import JobContext
from ..db import ClaimedJob, Driver, Outcome, OutcomeKind
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
from ..payload import storable_text
from ..registry import Task, find_task

logger = logging.getLogger("django_workqueue.worker")

_TRACEBACK_LIMIT = 20_000


class _LostLease(Exception):
    pass


def execute(
    job: ClaimedJob, context: JobContext, driver: Driver, loop: AsyncLoop | None
) -> Outcome | None:
    """Run ``job`` and record its outcome; return the outcome if it was recorded."""
    outcome, pending = run(job, context, driver, loop)
    if outcome is None or not pending:
        return outcome
    return record(driver, context, outcome)


def run(
    job: ClaimedJob, context: JobContext, driver: Driver, loop: AsyncLoop | None
) -> tuple[Outcome | None, bool]:
    """Run ``job``; return (outcome, whether it still has to be recorded).

    ``atomic=True`` tasks record their success inside their own transaction, so theirs comes
    back already written (or None when the lease was lost and the body rolled back); the
    worker batches every other outcome into one write with those of other jobs.
    """
    task = find_task(job.task_name)
    if task is None:  # retried: a worker running newer code may know it
        return _failure(job, None, _not_registered(job.task_name)), True
    if job.deadline_passed and job.deadline is not None:
        late = DeadlineExceeded(f"the deadline {job.deadline.isoformat()} passed before it ran")
        return _outcome(job, OutcomeKind.DISCARD, error=_error(late)), True
    malformed = _malformed_arguments(job)
    if malformed is not None:  # the row does not change between attempts: no retry helps
        error = _error(MalformedArguments(malformed), with_traceback=False)
        return _outcome(job, OutcomeKind.DISCARD, error=error), True

    args = [context, *job.args] if task.spec.takes_context else list(job.args)
    try:
        if task.spec.atomic:
            return _run_atomic(task, job, context, driver, args), False
        if task.spec.is_async:
            if loop is None:
                raise RuntimeError("no event loop for async tasks")  # runner always passes one
            value = loop.run(task.spec.func(*args, **job.kwargs), context, task.spec.timeout)
        else:
            value = task.spec.func(*args, **job.kwargs)
        outcome = _success(job, value)
    except _LostLease:
        logger.warning(
            "job %s attempt %s: lease lost; the result was rolled back", job.id, job.attempt
        )
        return None, False
    except BaseException as exc:  # a task's failure must never end the slot
        outcome = _classify(task, job, context, exc)
    return outcome, True


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
        value = task.spec.func(*args, **job.kwargs)
        outcome = _success(job, value)
        context.finished = True
        context.write_progress()  # the last report commits with the result
        if not driver.record(context.owner, outcome):
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


def _classify(task: Task, job: ClaimedJob, context: JobContext, exc: BaseException) -> Outcome:
    if isinstance(exc, Retry):
        delay = retry.delay_for(task.spec.backoff, job.attempt) if exc.delay is None else exc.delay
        return _outcome(job, OutcomeKind.RETRY, error=_error(exc), delay=delay)
    if isinstance(exc, Snooze):
        return _outcome(job, OutcomeKind.SNOOZE, delay=exc.delay)
    if isinstance(exc, Discard | ResultNotJSON):
        return _outcome(job, OutcomeKind.DISCARD, error=_error(exc))
    if context.timed_out and isinstance(exc, JobCancelled | TimeoutError):
        exc = JobTimeout(f"{job.task_name} ran past its timeout of {task.spec.timeout}s")
    elif context.cancel_requested and isinstance(exc, JobCancelled | asyncio.CancelledError):
        return _outcome(job, OutcomeKind.CANCELLED, error=_error(JobCancelled("cancelled")))
    if task.spec.on_failure is not None:
        try:
            verdict = task.spec.on_failure(exc)
        except Exception:
            logger.exception("on_failure of %s raised; retrying as usual", job.task_name)
            verdict = None
        if verdict == "discard":
            return _outcome(job, OutcomeKind.DISCARD, error=_error(exc))
    return _failure(job, task, exc)


def _failure(job: ClaimedJob, task: Task | None, exc: BaseException) -> Outcome:
    delay = retry.delay_for(task.spec.backoff if task else None, job.attempt)
    return _outcome(job, OutcomeKind.RETRY, error=_error(exc), delay=delay)


def _outcome(job: ClaimedJob, kind: OutcomeKind, **fields: Any) -> Outcome:
    return Outcome(
        job_id=job.id, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts, **fields
    )


def _error(exc: BaseException, *, with_traceback: bool = True) -> dict[str, Any]:
    kind = type(exc)
    trace = "".join(traceback.format_exception(exc))[-_TRACEBACK_LIMIT:] if with_traceback else None
    return {
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": storable_text(str(exc)[:2000]),
        "traceback": None if trace is None else storable_text(trace),
    }


def record(driver: Driver, context: JobContext, outcome: Outcome) -> Outcome | None:
    """Write one outcome; return it if it was written (this worker still held the lease)."""
    context.finished = True
    if driver.record(context.owner, outcome):
        return outcome
    log_not_written(outcome)
    return None


def log_not_written(outcome: Outcome) -> None:
    logger.warning(
        "job %s attempt %s: this worker no longer holds the lease; its %s outcome was not "
        "written (the job was reaped, released or cancelled meanwhile)",
        outcome.job_id, outcome.attempt, outcome.kind,
    )  # fmt: skip


# PostgreSQL's lock_timeout and statement cancellation: the session is fine, try again later.
_TRANSIENT_SQLSTATES = frozenset({"55P03", "57014"})


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (or the database is down or locked),
    as opposed to the database refusing one statement."""
    return isinstance(exc, OperationalError | InterfaceError) and not is_lock_timeout(exc)


def is_lock_timeout(exc: BaseException) -> bool:
    return getattr(exc.__cause__, "sqlstate", None) in _TRANSIENT_SQLSTATES


def is_transient(exc: BaseException) -> bool:
    """Worth retrying as it was: a lost connection or a lock wait that timed out."""
    return isinstance(exc, OperationalError | InterfaceError)


def close_unusable_connections() -> None:
    """Close this thread's connections that no longer answer (after a database restart)."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.is_usable():
            conn.close()


def unstorable(outcome: Outcome, exc: BaseException) -> Outcome:
    """A discard saying why ``outcome`` could not be written (the database refused it)."""
    problem = WorkqueueError(
        f"the job's {outcome.kind} outcome could not be stored: {type(exc).__name__}: {exc}"
    )
    return Outcome(
        job_id=outcome.job_id, attempt=outcome.attempt, kind=OutcomeKind.DISCARD,
        max_attempts=outcome.max_attempts, error=_error(problem, with_traceback=False),
    )  # fmt: skip


def tidy_connections() -> None:
    """Treat each job like a request: drop broken connections and roll back leftovers.

    Unlike a web request, a worker keeps its healthy connections between jobs even with
    ``CONN_MAX_AGE = 0`` (one per slot thread, the budget of concurrency + a few); a positive
    ``CONN_MAX_AGE`` still caps their age.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.in_atomic_block:  # a task leaked an open transaction out of its body
            # Closing rolls the transaction back, but Django keeps the wrapper marked as inside
            # the atomic block (closed_in_transaction), so every later query on this thread
            # would fail: drop the wrapper and let the thread open a fresh one.
            conn.close()
            del connections[conn.alias]
        elif conn.settings_dict["CONN_MAX_AGE"] == 0:
            if conn.errors_occurred and not conn.is_usable():
                conn.close()
            conn.errors_occurred = False
        else:
            conn.close_if_unusable_or_obsolete()


class AsyncLoop:
    """The worker's event loop, on its own thread; async tasks run on it one per slot."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_forever, name="workqueue-asyncio", daemon=True
        )
        self.thread.start()

    def run(
        self, coro: Coroutine[Any, Any, Any], context: JobContext, timeout: float | None
    ) -> Any:
        async def guarded() -> Any:
            try:
                async with asyncio.timeout(timeout) as scope:
                    return await coro
            except TimeoutError:
                if scope.expired():  # our timeout, not a TimeoutError of the task's own
                    raise JobTimeout(f"the task ran past its timeout of {timeout}s") from None
                raise

        future = asyncio.run_coroutine_threadsafe(guarded(), self.loop)
        while True:
            try:
                return future.result(timeout=0.05)
            except concurrent.futures.TimeoutError:
                if context.cancelled.is_set() and not future.done():
                    future.cancel()
            except concurrent.futures.CancelledError:
                raise JobCancelled(context._why()) from None

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
