"""How an attempt ends: what a body's return or exception becomes as an ``Outcome``.

The attempt runner (``run.py``, ``batch.py``) hands every ending here; ``outcomes.py`` then
decides what the outcome writes (status, charged attempt, retry time). The rule for what a
body raises, wherever it runs (a slot thread, the event loop, a batch, a process pool's child,
skip-queue, ``drain``): every exception is the body's failure, ``BaseException`` included —
a ``SystemExit``, ``KeyboardInterrupt`` or ``GeneratorExit`` the task raises fails its attempt
with its class in ``errors`` and is retried under the task's policy; the process running it
goes on. Only the runner's own machinery ends an attempt otherwise: a cancellation, a timeout
or a shutdown that the context asked for (``JobCancelled``, ``asyncio.CancelledError``), and a
Ctrl-C of the process itself (``run.interrupts``), which is not the body's and propagates.

Whatever goes wrong outside the task's body (a ``backoff`` or ``on_failure`` that raises, an
exception whose ``str()`` raises) still ends the attempt with a recorded failure that says what
went wrong: a runner never drops an outcome.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC
from typing import TYPE_CHECKING, Any

from .. import payload, retry
from ..conf import workqueue_settings as conf
from ..context import AbortReason, JobContext
from ..db import ClaimedJob
from ..exceptions import (
    DeadlineExceeded,
    Discard,
    IncompatibleVersion,
    JobCancelled,
    JobTimeout,
    MalformedArguments,
    PayloadNotJSON,
    PayloadTooLarge,
    ResultNotJSON,
    Retry,
    Sleeping,
    Snooze,
    TaskNotRegistered,
    WaitingForSignal,
    WorkqueueError,
)
from ..outcomes import Outcome, OutcomeKind
from ..payload import storable_text
from ..registry import import_errors
from ..states import Status

if TYPE_CHECKING:
    from ..decorator import Task

logger = logging.getLogger("django_workqueue.worker")
job_logger = logging.getLogger("django_workqueue.jobs")
"""One line per attempt's ending (``log_endings``), routable apart from the worker's own."""

_TRACEBACK_LIMIT = 20_000


def not_run(
    job: ClaimedJob, task: Task | None, exc: BaseException, kind: OutcomeKind = OutcomeKind.RETRY
) -> Outcome:
    """The outcome of an attempt that could not call the task (reported like a failure, once
    written: ``log_endings``)."""
    outcome = _ended(job, task, exc, kind)
    outcome.exception = exc
    return outcome


def refused(job: ClaimedJob, task: Task | None) -> Outcome | None:
    """The ending of an attempt that cannot call its task, if it cannot: its deadline passed,
    or its row's arguments cannot make a call (the row does not change between attempts: no
    retry helps either)."""
    if job.deadline_passed and job.deadline is not None:
        late = DeadlineExceeded(f"the deadline {job.deadline.isoformat()} passed before it ran")
        return not_run(job, task, late, OutcomeKind.DISCARD)
    malformed = malformed_arguments(job)
    if malformed is not None:
        return not_run(job, task, MalformedArguments(malformed), OutcomeKind.DISCARD)
    return None


def not_registered(task_name: str) -> TaskNotRegistered:
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


def malformed_arguments(job: ClaimedJob) -> str | None:
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


def success(job: ClaimedJob, value: Any) -> Outcome:
    try:
        # None, what most tasks return, is JSON's null: no walk, and no message made unused.
        encoded = "null" if value is None else payload.encode(
            value, "result", f"{job.task_name} returned a value that"
        )  # fmt: skip
        size = len(encoded.encode())
        if size > conf.MAX_RESULT_BYTES:
            payload.check_size(
                size, conf.MAX_RESULT_BYTES, f"the result of {job.task_name} is",
                "MAX_RESULT_BYTES",
            )  # fmt: skip
    except (PayloadNotJSON, PayloadTooLarge) as exc:
        raise ResultNotJSON(str(exc)) from None
    return _outcome(job, OutcomeKind.SUCCEEDED, result_json=encoded)


def classified(task: Task, job: ClaimedJob, context: JobContext, exc: BaseException) -> Outcome:
    """The outcome of a body that raised ``exc`` (reported once written: ``log_endings``).
    Code of the task's that runs here (``backoff``, ``on_failure``, the exception's ``str()``)
    cannot drop the outcome: if it raises, the attempt ends as a failure that names it,
    retried with the default backoff."""
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
    if outcome.error is not None:
        outcome.exception = exc
    return outcome


def _classify(task: Task, job: ClaimedJob, context: JobContext, exc: BaseException) -> Outcome:
    if isinstance(exc, Retry):
        delay = retry.delay_for(task.spec.backoff, job.attempt) if exc.delay is None else exc.delay
        return _outcome(job, OutcomeKind.RETRY, error=_error(exc), delay=delay)
    if isinstance(exc, Snooze):  # a durable wait is one too, parked waiting for its signal
        waits = isinstance(exc, WaitingForSignal)
        return _outcome(job, OutcomeKind.SNOOZE, delay=exc.delay, waits=waits,
                        parked=_parked(exc))  # fmt: skip
    if isinstance(exc, Discard | ResultNotJSON | IncompatibleVersion):
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
        return released(job)
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
        delay = retry.delay_for(task.spec.backoff if task else None, job.attempts_charged + 1)
    return _outcome(job, kind, error=_error(exc), delay=delay)


def released(job: ClaimedJob) -> Outcome:
    """The attempt is given back, uncharged, in its place: it stopped for a reason that is
    not its body's (a shutdown, its process stopped with the worker, a Ctrl-C)."""
    return _outcome(job, OutcomeKind.RELEASE)


def _outcome(job: ClaimedJob, kind: OutcomeKind, **fields: Any) -> Outcome:
    return Outcome(
        job_id=job.id, attempt=job.attempt, kind=kind, max_attempts=job.max_attempts,
        attempts_charged=job.attempts_charged, task_name=job.task_name, queue=job.queue, **fields,
    )  # fmt: skip


def _parked(exc: Snooze) -> str:
    """What a durable sleep or wait parks its job for, as the worker's line says it."""
    if not isinstance(exc, Sleeping):
        return ""  # a plain snooze: "snoozed for <delay>"
    until = "" if exc.until is None else exc.until.astimezone(UTC).isoformat(timespec="seconds")
    if isinstance(exc, WaitingForSignal):
        return f"waiting for signal {exc.name!r}" + (f" until {until}" if until else "")
    return f"sleeping until {until}" if until else "sleeping"


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


def log_endings(
    outcomes: Iterable[Outcome], ended_as: Mapping[int, str] | None = None
) -> Counter[str]:
    """One line per written outcome on ``django_workqueue.jobs``, once it is written, so it
    tells what the row now says; returns the count of each ending (``ENDINGS``' names).

    ``#42 shop.tasks.send_receipt succeeded in 12 ms``,
    ``#43 shop.tasks.x failed (attempt 2/5, retry in 8 s): ValueError: ...``. Successes,
    snoozes, releases and cancellations at INFO, retries at WARNING, dead-letters at ERROR;
    the traceback joins the line when the logger is enabled for DEBUG (``runworker -v 2``); an
    ERROR line whose exception was raised in this process carries it as ``exc_info`` (error
    trackers), which runworker's own handler prints only at ``-v 2``.
    Structured fields (``job_id``, ``task_name``, ``ending``, ...) ride in ``extra`` for JSON
    handlers. Lazy: whether each level is enabled is asked once per call, and a disabled line
    costs a dict look-up.
    """
    ended_as = ended_as or {}
    enabled = {level: job_logger.isEnabledFor(level) for level in _LEVEL_SET}
    with_traceback = job_logger.isEnabledFor(logging.DEBUG)
    counts: Counter[str] = Counter()
    for outcome in outcomes:
        name = ending_name(outcome, ended_as.get(outcome.job_id))
        counts[name] += 1
        level = _LEVELS[name]
        if enabled[level]:
            _log_ending(outcome, name, level, with_traceback)
    return counts


def ending_name(outcome: Outcome, written_status: str | None = None) -> str:
    """What the written outcome did to its job: one of ``ENDINGS``."""
    if written_status == Status.CANCELLED or outcome.kind == OutcomeKind.CANCELLED:
        return "cancelled"
    if outcome.kind == OutcomeKind.SUCCEEDED:
        return "succeeded"
    if outcome.kind == OutcomeKind.SNOOZE:
        return "snoozed"
    if outcome.kind == OutcomeKind.RELEASE:
        return "released"
    if outcome.kind == OutcomeKind.DISCARD:
        return "discarded"
    return "dead-lettered" if outcome.status == Status.FAILED else "retried"


_LEVELS = {
    "succeeded": logging.INFO, "cancelled": logging.INFO, "snoozed": logging.INFO,
    "released": logging.INFO, "retried": logging.WARNING, "discarded": logging.ERROR,
    "dead-lettered": logging.ERROR,
}  # fmt: skip
_LEVEL_SET = frozenset(_LEVELS.values())
ENDINGS = tuple(_LEVELS)
"""Every ending a worker reports; ``discarded`` and ``dead-lettered`` leave the job failed."""
FINISHED = frozenset({"succeeded", "cancelled", "discarded", "dead-lettered"})
"""The endings that finish their job."""


def _log_ending(outcome: Outcome, name: str, level: int, with_traceback: bool) -> None:
    error = outcome.error or {}
    etype = str(error.get("type") or "").rpartition(".")[2]
    extra: dict[str, Any] = {
        "job_id": outcome.job_id, "task_name": outcome.task_name, "queue": outcome.queue,
        "attempt": outcome.attempt, "max_attempts": outcome.max_attempts, "ending": name,
        "duration_ms": None if outcome.duration is None else round(outcome.duration * 1000, 3),
        "delay": outcome.delay or None, "error_type": error.get("type"),
        "error_message": error.get("message"), "traceback": error.get("traceback"),
    }  # fmt: skip
    args: tuple[Any, ...]
    if name == "succeeded":
        if outcome.duration is None:
            fmt, args = "#%s %s succeeded", (outcome.job_id, outcome.task_name)
        else:
            fmt, args = "#%s %s succeeded in %s", (
                outcome.job_id, outcome.task_name, _Span(outcome.duration),
            )  # fmt: skip
    elif name == "retried":
        fmt = "#%s %s failed (attempt %s/%s, retry in %s): %s: %s"
        args = (outcome.job_id, outcome.task_name, outcome.body_attempt, outcome.max_attempts,
                _Span(outcome.delay), etype, error.get("message", ""))  # fmt: skip
    elif name in ("dead-lettered", "discarded"):
        verdict = "failed" if name == "dead-lettered" else "discarded"
        fmt = "#%s %s " + verdict + " (attempt %s/%s, %s): %s: %s"
        args = (outcome.job_id, outcome.task_name, outcome.body_attempt, outcome.max_attempts,
                "dead-lettered" if name == "dead-lettered" else "not retried", etype,
                error.get("message", ""))  # fmt: skip
    elif name == "snoozed" and outcome.parked:
        fmt, args = "#%s %s %s", (outcome.job_id, outcome.task_name, outcome.parked)
    elif name == "snoozed":
        fmt, args = "#%s %s snoozed for %s", (outcome.job_id, outcome.task_name,
                                              _Span(outcome.delay))  # fmt: skip
    else:  # cancelled, released
        fmt, args = "#%s %s " + name + " (attempt %s/%s)", (
            outcome.job_id, outcome.task_name, outcome.body_attempt, outcome.max_attempts,
        )  # fmt: skip
    exc = outcome.exception if level >= logging.ERROR else None
    if exc is not None:  # for error trackers; runworker's own handler prints it at -v 2 only
        job_logger.log(level, fmt, *args, extra=extra, exc_info=(type(exc), exc, exc.__traceback__))
        return
    if with_traceback and error.get("traceback"):
        fmt, args = fmt + "\n%s", (*args, str(error["traceback"]).rstrip())
    job_logger.log(level, fmt, *args, extra=extra)


class _Span:
    """A duration, formatted only if the line is: ``12 ms``, ``1.5 s``, ``8 s``."""

    __slots__ = ("seconds",)

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __str__(self) -> str:
        seconds = self.seconds
        if seconds < 1:
            return f"{seconds * 1000:.0f} ms"
        return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


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
        max_attempts=outcome.max_attempts, attempts_charged=outcome.attempts_charged,
        task_name=outcome.task_name, queue=outcome.queue,
        error={"type": "django_workqueue.exceptions.WorkqueueError",
               "message": storable_text(str(problem)[:2000]), "traceback": None},
    )  # fmt: skip
