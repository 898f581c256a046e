"""``JobContext``: what a task that declares ``context`` as its first parameter receives."""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from .exceptions import InvalidOption, InvalidProgress, JobCancelled, PayloadNotJSON
from .flow.claims import claim
from .payload import encode, storable_text
from .registry import find_task

if TYPE_CHECKING:
    from .attempt.checkpoints import Checkpoints
    from .db import ClaimedJob, Driver, Progress
    from .workflow.canvas import Step
    from .workflow.store import Spawn


logger = logging.getLogger("django_workqueue.worker")

T = TypeVar("T")

_event_lock = threading.Lock()

# The progress columns are 64-bit integers on every database.
_BIGINT = (-(2**63), 2**63 - 1)
PROGRESS_MESSAGE_LENGTH = 500
PROGRESS_DETAILS_BYTES = 8 * 1024
"""The most a report's ``details`` may take, JSON-encoded (UTF-8 bytes)."""

#: A report as a context keeps it: current, total, message, details (a JSON object or None).
Report = tuple[int, int | None, str, dict[str, Any] | None]


class AbortReason(enum.StrEnum):
    """Why a running job was told to stop (``context.abort_reason``, ``JobCancelled.reason``)."""

    CANCEL_REQUESTED = "cancel_requested"
    """An operator or the code asked for it (``cancel_job``); the job ends ``cancelled``."""
    LEASE_LOST = "lease_lost"
    """Another worker owns the job now (this one stalled past its lease and it was reaped)."""
    COMPLETED_ELSEWHERE = "completed_elsewhere"
    """The job was finished outside this worker; nothing this attempt does is recorded."""
    DELETED = "deleted"
    """The job's row is gone."""
    TIMEOUT = "timeout"
    """The task ran past its ``timeout``."""
    SHUTDOWN = "shutdown"
    """The worker is stopping and the grace period is over; the job goes back to ready."""


_NOT_OURS = frozenset(
    {AbortReason.LEASE_LOST, AbortReason.COMPLETED_ELSEWHERE, AbortReason.DELETED}
)

_WHY = {
    AbortReason.CANCEL_REQUESTED: "cancellation was requested",
    AbortReason.LEASE_LOST: "this worker lost the job's lease",
    AbortReason.COMPLETED_ELSEWHERE: "the job was completed elsewhere",
    AbortReason.DELETED: "the job was deleted",
    AbortReason.TIMEOUT: "the task ran past its timeout",
    AbortReason.SHUTDOWN: "the worker is shutting down",
}


class JobContext:
    """The running job, its attempt, progress reporting and cooperative cancellation.

    >>> @task
    ... def import_rows(context, path):
    ...     rows = load(path)
    ...     for n, row in enumerate(rows, 1):
    ...         context.raise_if_cancelled()
    ...         save(row)
    ...         context.set_progress(n, len(rows), "importing")
    """

    def __init__(
        self,
        job: ClaimedJob,
        *,
        owner: str,
        driver: Driver,
        on_progress: Callable[[JobContext], None] | None = None,
    ) -> None:
        self.job = job
        self.owner = owner
        self._driver = driver
        self._on_progress = on_progress
        self.progress: Report | None = None
        self._cancelled: threading.Event | None = None
        self.abort_reason: AbortReason | None = None
        """Why the job was told to stop, or None while it may go on."""
        self._not_ours = False  # the lease was lost, whatever the first reason to stop was
        self.finished = False
        self.released = False  # handed back to ready by the worker's shutdown
        self.spawn: Spawn | None = None  # steps added at run time, written with a success
        self._dependencies: list[Prerequisite] | None = None
        self._checkpoints: Checkpoints | None = None

    @property
    def cancelled(self) -> threading.Event:
        """Set once the job must stop: see ``abort_reason`` for why."""
        # Made on first use: most jobs never look at it, and an Event is not free per job.
        if self._cancelled is None:
            with _event_lock:
                if self._cancelled is None:
                    self._cancelled = threading.Event()
        return self._cancelled

    def abort(self, reason: AbortReason) -> bool:
        """Tell the job to stop for ``reason``; the first reason stays. Returns whether this
        call set it (the worker logs each abort once)."""
        with _event_lock:
            first = self.abort_reason is None
            if first:
                self.abort_reason = reason
            if reason in _NOT_OURS:
                self._not_ours = True
        self.cancelled.set()
        return first

    @property
    def cancel_requested(self) -> bool:
        return self.abort_reason == AbortReason.CANCEL_REQUESTED

    @property
    def timed_out(self) -> bool:
        return self.abort_reason == AbortReason.TIMEOUT

    @property
    def lease_lost(self) -> bool:
        """Whether this worker no longer holds the job (its outcome will not be recorded),
        also when another reason to stop came first (a cancellation, then a lost lease)."""
        return self._not_ours

    @property
    def attempt(self) -> int:
        return self.job.attempt

    @property
    def job_id(self) -> int:
        return self.job.id

    def set_progress(
        self,
        current: int,
        total: int | None = None,
        message: str = "",
        details: dict[str, Any] | None = None,
    ) -> bool:
        """Report progress; returns False once this worker has lost the job's lease.

        ``current`` and ``total`` are integers within 64 bits (``InvalidProgress``, a
        ``ValueError``, otherwise); ``message`` is any text, made storable (NUL and lone
        surrogates escaped) and cut to 500 characters; ``details`` is a JSON object of at most
        8 KiB encoded (``InvalidProgress`` otherwise), stored in ``Job.progress_details``. Each
        report replaces the previous one whole, details included.

        >>> context.set_progress(n, len(rows), "importing", details={"file": path, "bad": 3})

        Inside a worker the value is handed to the worker's control thread, which writes the
        latest value of each job at most once per ``WORKQUEUE["PROGRESS_INTERVAL"]`` seconds,
        and the last one with the job's outcome, in the same write. The task's own connection
        and transaction are never used, so an ``atomic=True`` body may report progress too,
        and a tight loop of calls costs a write per interval. Every call sends the
        ``job_progress`` signal in the worker process (not throttled).
        """
        self.progress = (
            _progress_int("current", current),
            None if total is None else _progress_int("total", total),
            storable_text(str(message))[:PROGRESS_MESSAGE_LENGTH],
            None if details is None else _progress_details(details),
        )
        # Imported here: this module is imported with the package, before Django's app
        # registry is ready, and signalling imports the models.
        from . import signalling

        signalling.progress(self)
        if self._on_progress is None:  # run outside a worker (tests, tools): write now
            return self.write_progress()
        self._on_progress(self)
        return not self.lease_lost

    def progress_report(self) -> Progress | None:
        """The latest report as the driver writes it, or None if nothing was reported."""
        from .db import Progress  # not at import: see ``set_progress``; db imports the models

        if self.progress is None:
            return None
        current, total, message, details = self.progress
        return Progress(
            job_id=self.job.id, attempt=self.job.attempt, current=current, total=total,
            message=message, details=details,
        )  # fmt: skip

    def write_progress(self) -> bool:
        """Write the latest reported progress now (fenced by lease owner and attempt)."""
        report = self.progress_report()
        if report is None:
            return True
        written = self._driver.write_progress(self.owner, [report]).written
        return (report.job_id, report.attempt) in written

    # --- idempotency --------------------------------------------------------------------------

    def claim(self, key: str, ttl: float | timedelta | None = None) -> bool:
        """Return True if this call is the first to claim ``key``, across every worker, process
        and attempt, and False ever after, until the claim expires (``ttl`` seconds, by
        default ``WORKQUEUE["CLAIM_TTL"]``, 7 days). Guard a side effect a retry must not
        repeat:

        >>> if context.claim(f"charge:{invoice_id}"):
        ...     charge(invoice_id)

        In a task without ``atomic=True`` the claim commits at once, so an attempt that
        crashes after it leaves it taken: the side effect runs at most once. In an
        ``atomic=True`` task it joins the task's transaction and rolls back with a failed
        attempt: exactly once together with the body's database writes. See
        ``docs/guides/flow-control.md``. ``key``: a non-empty string of up to 255 characters.
        """
        task = find_task(self.job.task_name)
        return claim(
            self._driver, key, job_id=self.job.id, ttl=ttl,
            joins=bool(task is not None and task.spec.atomic),
        )  # fmt: skip

    # --- durable steps and sleeps ------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` once per job and return its result: stored (as JSON) as
        soon as ``fn`` returns, and returned from the store, without calling ``fn``, when the
        body runs again (a retry, the end of a ``sleep``, a crash).

        >>> @task
        ... def fulfil(context, order_id):
        ...     charge = context.step("charge", charge_card, order_id)
        ...     context.sleep(24 * 3600)
        ...     context.step("remind", send_reminder, order_id, charge["id"])

        ``name`` (up to 200 characters) finds the checkpoint: unique within one run of the body
        (``InvalidOption`` at the second use). A result that cannot be stored raises
        ``PayloadNotJSON`` or ``PayloadTooLarge`` (``WORKQUEUE["MAX_RESULT_BYTES"]``) at the
        call. Without ``atomic=True`` the checkpoint commits at once (a crash after ``fn``
        returned and before it was stored runs ``fn`` again: at least once for what ``fn``
        does outside the database); in an ``atomic=True`` task it joins the task's
        transaction: a failed attempt rolls back the step's writes and its checkpoint, and the
        retry runs it again. Sync tasks only. See ``docs/guides/long-running.md``.
        """
        return self._durable("context.step").step(name, fn, args, kwargs)

    def sleep(self, seconds: float | timedelta) -> None:
        """End this attempt, without charging it, and run the body again in ``seconds``: the
        job waits ``scheduled`` (no worker slot, no lease), and the calls it already made
        are answered from their checkpoints. When the body runs again this call returns (or
        sleeps what is left, if the job was run early).

        >>> context.step("invite", send_invite, user_id)
        >>> context.sleep(timedelta(days=3))
        >>> context.step("remind", send_reminder, user_id)

        It raises ``Sleeping`` (a ``Snooze``): let it propagate. In an ``atomic=True`` task
        the body's writes so far commit with its checkpoints.
        """
        from .attempt.checkpoints import after  # not at import: see ``set_progress``

        self._durable("context.sleep").sleep_until(after("context.sleep", seconds))

    def sleep_until(self, when: datetime) -> None:
        """``sleep`` until ``when`` (an aware datetime, compared with the database's clock)."""
        from .attempt.checkpoints import wake_time  # not at import: see ``set_progress``

        owner = "context.sleep_until"
        self._durable(owner).sleep_until(wake_time(owner, when))

    def wait_for_signal(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """Return the payload of the signal ``name`` sent to this job or to its workflow
        (``operations.send_signal``): at once if one was sent already (kept signals are taken
        oldest first), otherwise the attempt ends, uncharged, and the job waits ``waiting``
        (no worker slot, no lease) until one arrives; its body then runs again, its finished
        steps answered from their checkpoints, and this call returns the payload. After
        ``timeout`` seconds without one it raises ``SignalTimeout`` here instead.

        >>> try:
        ...     decision = context.wait_for_signal("approve", timeout=timedelta(days=3))
        ... except SignalTimeout:
        ...     decision = {"approved": False}

        Each wait takes one signal, once: the answer is stored with the job (in an
        ``atomic=True`` task, in its transaction: a failed attempt gives the signal back to
        the retry's wait). Sync tasks only. See ``docs/guides/long-running.md``.
        """
        return self._durable("context.wait_for_signal").wait_for_signal(name, timeout)

    def _durable(self, owner: str) -> Checkpoints:
        if self._checkpoints is None:
            # Not at import: see ``set_progress``; the checkpoints import the models.
            from .attempt.checkpoints import Checkpoints

            task = find_task(self.job.task_name)
            if task is not None and task.spec.is_async:
                raise InvalidOption(
                    f"{owner}: {self.job.task_name} is an async task; durable steps, sleeps and "
                    f"waits are for sync tasks (they write to the database from the body's thread)"
                )
            self._checkpoints = Checkpoints(
                self._driver, self.job.id, self.job.task_name, self.job.workflow_id,
                atomic=bool(task is not None and task.spec.atomic),
                version=task.spec.version if task is not None else 1,
            )  # fmt: skip
        return self._checkpoints

    # --- workflows ----------------------------------------------------------------------------

    def add(self, step: Step) -> None:
        """Add ``step`` (a signature, chain or group) to this job's workflow, to run once this
        attempt succeeds; the job's dependents wait for it too. Written in the transaction
        that records the success, so a failed or crashed attempt adds nothing, and a success
        adds it exactly once. Checked now: bad arguments raise here, in the task.

        >>> for part in parts(path):
        ...     context.add(process.s(part))
        """
        self._spawn().add(step)

    def continue_with(self, step: Step) -> None:
        """Continue with ``step`` once this attempt succeeds, after every step added with
        ``add``: it takes this job's place, so the job's dependents wait for it and a chain's
        next step receives its result instead of this job's. Once per attempt.

        >>> context.continue_with(merge.s(path))
        """
        self._spawn().continue_with(step)

    def _spawn(self) -> Spawn:
        from .workflow.store import Spawn  # not at import: see ``set_progress``

        if self.spawn is None:
            self.spawn = Spawn()
        return self.spawn

    @property
    def dependencies(self) -> list[Prerequisite]:
        """This job's prerequisites, in declared order, each with its status and result."""
        if self._dependencies is None:
            from .models import Dependency  # not at import: see ``set_progress``

            edges = (
                Dependency.objects.using(self._driver.alias)
                .filter(job_id=self.job.id)
                .order_by("position")
                .values_list(
                    "prerequisite_id", "prerequisite__task_name", "prerequisite__status",
                    "prerequisite__result",
                )
            )  # fmt: skip
            self._dependencies = [
                Prerequisite(job_id=pk, task_name=name, status=status, result=result)
                for pk, name, status, result in edges
            ]
        return self._dependencies

    def raise_if_cancelled(self) -> None:
        """Raise ``JobCancelled`` (with ``reason``) if the job should stop now."""
        if self.cancelled.is_set():
            raise JobCancelled(self._why(), reason=self.abort_reason)

    def _why(self) -> str:
        return _WHY[self.abort_reason or AbortReason.SHUTDOWN]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Prerequisite:
    """A prerequisite of the running job, as ``context.dependencies`` lists it."""

    job_id: int
    task_name: str
    status: str
    result: Any

    @property
    def succeeded(self) -> bool:
        return self.status == "succeeded"


def _progress_int(name: str, value: Any) -> int:
    try:
        number = int(value)  # floats are cut, as int() does
    except (TypeError, ValueError, OverflowError):
        raise InvalidProgress(
            f"set_progress: {name} must be an integer, got {type(value).__name__}"
        ) from None
    if not _BIGINT[0] <= number <= _BIGINT[1]:
        raise InvalidProgress(
            f"set_progress: {name}={number} is outside the 64-bit range the job row stores "
            f"({_BIGINT[0]} to {_BIGINT[1]}); report a smaller unit (e.g. thousands) or a ratio"
        )
    return number


def _progress_details(details: Any) -> dict[str, Any]:
    if not isinstance(details, dict):
        raise InvalidProgress(
            f"set_progress: details must be a JSON object (a dict), got {type(details).__name__}"
        )
    try:
        encoded = encode(details, "details", "set_progress")
    except PayloadNotJSON as exc:
        raise InvalidProgress(str(exc)) from None
    size = len(encoded.encode("utf-8"))
    if size > PROGRESS_DETAILS_BYTES:
        raise InvalidProgress(
            f"set_progress: details are {size:,} bytes as JSON; the limit is "
            f"{PROGRESS_DETAILS_BYTES:,}. Report a summary (counts, the last item) and keep "
            f"the rest in your own tables"
        )
    # A copy, as stored: the task may change its dict before the control thread writes it.
    copy: dict[str, Any] = json.loads(encoded)
    return copy
