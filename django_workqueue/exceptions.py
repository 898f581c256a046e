"""Exceptions: the ones tasks raise to steer their job, and the ones enqueue raises on bad input."""

from __future__ import annotations

from datetime import datetime


class WorkqueueError(Exception):
    """Base class of every error raised by django-workqueue."""


# --- raised by tasks ---------------------------------------------------------------------------


class JobControl(Exception):
    """Base class of the exceptions a task raises to tell the worker what to do next."""


class Retry(JobControl):
    """Run the job again after ``delay`` seconds; the attempt counts against ``max_attempts``.

    >>> raise Retry(delay=30, reason="upstream is rate-limiting us")
    """

    def __init__(self, delay: float | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry requested")
        self.delay = delay
        self.reason = reason


class Snooze(JobControl):
    """Put the job back for ``delay`` seconds without spending an attempt.

    >>> raise Snooze(delay=60)
    """

    def __init__(self, delay: float = 0) -> None:
        super().__init__(f"snoozed for {delay}s")
        self.delay = delay


class Sleeping(Snooze):
    """Raised by ``context.sleep`` / ``sleep_until`` to park the job until its time: a snooze
    (the attempt is not charged) whose body runs again then, its finished steps answered from
    their checkpoints. In an ``atomic=True`` task the body's writes so far commit with it.
    Let it propagate: a body that catches it goes on instead of sleeping. ``until`` is when it
    ends (the database's clock), for the worker's line."""

    def __init__(self, delay: float = 0, until: datetime | None = None) -> None:
        super().__init__(delay=delay)
        self.until = until


class WaitingForSignal(Sleeping):
    """Raised by ``context.wait_for_signal`` to park the job ``waiting`` until the signal
    arrives (or its timeout, ``delay`` seconds from now, if it has one): a sleep otherwise."""

    def __init__(self, name: str, delay: float = 0, until: datetime | None = None) -> None:
        super().__init__(delay=delay, until=until)
        self.args = (f"waiting for the signal {name!r}",)
        self.name = name


class SignalTimeout(WorkqueueError, TimeoutError):
    """Raised by ``context.wait_for_signal(name, timeout=...)`` when no signal arrived in
    time. Caught, it is the wait's answer: the body goes on (a reminder, an escalation)."""


class IncompatibleVersion(WorkqueueError):
    """A job's stored checkpoints were written by a version of its task that the running code
    does not declare compatible (``@task(version=..., compatible_versions=...)``): the job
    fails at once, its checkpoints kept, rather than feed old checkpoints to new code."""


class Discard(JobControl):
    """Fail the job now, straight to the dead-letter queue, whatever attempts remain.

    >>> raise Discard("the account was deleted")
    """

    def __init__(self, reason: str = "") -> None:
        super().__init__(reason or "discarded")
        self.reason = reason


class JobCancelled(JobControl):
    """Raised by ``context.raise_if_cancelled()`` once the job must stop; ``reason`` says why
    (an ``AbortReason``: cancel_requested, lease_lost, completed_elsewhere, deleted, timeout,
    shutdown)."""

    def __init__(self, message: str = "cancelled", reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason


# --- raised at enqueue -------------------------------------------------------------------------


class EnqueueError(WorkqueueError, ValueError):
    """The job was not enqueued; nothing was written."""


class TaskNotRegistered(EnqueueError, LookupError):
    pass


class PayloadNotJSON(EnqueueError, TypeError):
    pass


class InvalidArguments(EnqueueError, TypeError):
    """The arguments do not fit the task function's parameters (checked at enqueue, so a call
    that could never run is not stored to fail every attempt)."""


class PayloadTooLarge(EnqueueError):
    pass


class UnknownQueue(EnqueueError):
    pass


class InvalidPriority(EnqueueError):
    pass


class InvalidOption(EnqueueError):
    pass


class NaiveDatetime(EnqueueError):
    pass


class UniqueKeyConflict(EnqueueError):
    """The unique key is held by a job the enqueueing transaction cannot see."""


# --- raised while running ----------------------------------------------------------------------


class UnknownSchedule(WorkqueueError, LookupError):
    """No schedule has this name."""


class JobTimeout(WorkqueueError):
    """The task ran longer than its ``timeout`` (or, in a process pool, its ``hard_timeout``)."""


class ProcessDied(WorkqueueError):
    """The child process running the job died before the job ended (a crash in C code, a
    signal such as the kernel's OOM killer, ``os._exit``); the message says how."""


class DeadlineExceeded(WorkqueueError):
    """The job's deadline passed before it could run."""


class ResultNotJSON(WorkqueueError):
    """The task returned a value that cannot be stored as JSON."""


class InvalidProgress(WorkqueueError, ValueError):
    """``set_progress`` got a value the job's row cannot hold (raised in the task, at the call)."""


class MalformedArguments(WorkqueueError):
    """A job row's args and kwargs cannot make a call: the row was not written by enqueue."""


class JobNotFinished(WorkqueueError, TimeoutError):
    """``Job.wait()`` timed out before the job reached a terminal status."""


class DependencyFailed(WorkqueueError):
    """Recorded on a job cancelled because its run condition can no longer be met (a
    prerequisite failed or was cancelled); the error entry names the prerequisite."""


class FailedExternally(WorkqueueError):
    """Recorded on a job ended failed by ``operations.fail_job`` (an approval rejected, a
    webhook's verdict), with the caller's reason as its message."""


class UnknownWorker(WorkqueueError, LookupError):
    """No live worker has this id (``operations.workers()`` lists them)."""


class InvalidSlots(WorkqueueError, ValueError):
    """A number of slots a worker cannot take (``operations.scale_worker``)."""


class InvalidFilterValue(WorkqueueError, ValueError):
    """A filter or selection value no query can take: an id out of range, a text the database
    cannot compare (``filter_values.py``); surfaces answer it as a bad request."""


class RowLocked(WorkqueueError):
    """An operation waited its bound (``db.locking.OPERATION_LOCK_WAIT``) for a row another
    database session holds (a transaction that has not ended), and changed nothing; the
    message names the operation. Try again once that transaction ends."""
