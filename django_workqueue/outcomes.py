"""How a job's attempt ends: the one place where an outcome becomes a status.

Every ending of an attempt (a success, a failure to retry, a discard, a cancellation, a snooze, a
release at shutdown, a lease the reaper found expired) is an ``Outcome``. What it means — the
status it writes, which budget it spends (``budgets.py`` says which, and when one is spent),
when the job may run again — is decided here and nowhere else; the drivers store the decision
(``Outcome.row()``) with one fenced statement and do not decide again.

One fact only the row knows at write time: whether cancellation was requested meanwhile (an
operator may ask after the worker's last heartbeat). So an outcome decides both answers, the
status to write and the status to write if cancellation was requested, and the driver picks one
by the row's ``cancel_requested_at``.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from . import budgets
from .payload import acyclic_encoder
from .states import TERMINAL, TRANSITIONS, Status, transition

# json.dumps(row, separators=...) makes an encoder per call; one kept encoder writes the same
# (a row holds scalars, and progress details decoded afresh from their JSON: no cycle).
_encode_row = acyclic_encoder(ensure_ascii=True, allow_nan=True)


def _written(status: Status) -> str:
    """``status`` as a row stores it, once ``transition`` allowed running -> ``status``."""
    text = _FROM_RUNNING.get(status)
    if text is None:
        (allowed,) = transition(Status.RUNNING, status)  # raises: not a running job's ending
        text = allowed.value
    return text


class OutcomeKind(enum.StrEnum):
    SUCCEEDED = "succeeded"
    RETRY = "retry"  # again after a delay, or failed once the attempts are spent
    DISCARD = "discard"  # failed now, whatever attempts remain
    CANCELLED = "cancelled"
    SNOOZE = "snooze"  # again after a delay; spends nothing
    RELEASE = "release"  # graceful shutdown: ready again at once, in its place; spends nothing
    LEASE_EXPIRED = "lease_expired"  # the reaper: the worker is gone or stopped renewing; a crash


@dataclasses.dataclass(slots=True, kw_only=True)
class Outcome:
    """One attempt's ending, as a slot, the shutdown or the reaper reports it.

    ``delay`` is the wait before the next attempt (retry, snooze). ``progress`` is the job's last
    progress report, written in the same statement so that it always lands with the outcome.
    ``attempts_charged`` and ``crashes_charged`` are the job's budgets as the claim (or the
    reaper) read them, before this ending.
    """

    job_id: int
    attempt: int
    kind: OutcomeKind
    max_attempts: int
    attempts_charged: int = 0
    crashes_charged: int = 0
    result_json: str | None = None
    error: dict[str, Any] | None = None
    delay: float = 0.0
    progress: tuple[int, int | None, str, dict[str, Any] | None] | None = None
    task_name: str = dataclasses.field(default="", compare=False)
    queue: str = dataclasses.field(default="", compare=False)
    """The job's task and queue, for the signals sent once the outcome is written."""
    duration: float | None = dataclasses.field(default=None, compare=False)
    """Seconds from the claim to the ending, for the worker's line (``ending.log_endings``)."""
    exception: BaseException | None = dataclasses.field(default=None, repr=False, compare=False)
    """The exception of a failure, where it was raised in this process: the worker's ERROR line
    carries it as ``exc_info`` for error trackers. Never stored or sent to another process."""
    waits: bool = False
    parked: str = dataclasses.field(default="", compare=False)
    """What a durable sleep or wait parks the job for ("sleeping until T", "waiting for signal
    'approve'"), for the worker's line; empty for any other ending."""
    """A snooze that parks the job ``waiting`` for a signal (``context.wait_for_signal``)
    instead of ``scheduled``: charged as a snooze is, woken by the signal or its timeout."""
    spawn: Any = dataclasses.field(default=None, repr=False, compare=False)
    """Steps the job added at run time (``context.add`` / ``continue_with``), written with a
    success in the same transaction, dropped with any other ending."""
    _encoded: str | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def status(self) -> Status:
        """The status this outcome writes, unless cancellation was requested."""
        kind = self.kind
        if kind == OutcomeKind.SUCCEEDED:
            return Status.SUCCEEDED
        if kind == OutcomeKind.DISCARD:
            return Status.FAILED
        if kind == OutcomeKind.CANCELLED:
            return Status.CANCELLED
        if kind in (OutcomeKind.RETRY, OutcomeKind.LEASE_EXPIRED) and self.spent:
            return Status.FAILED
        if kind in (OutcomeKind.RELEASE, OutcomeKind.LEASE_EXPIRED):
            return Status.READY  # keeps its run_after: back in its place, not behind the backlog
        if self.waits:
            return Status.WAITING
        # Waiting for a later time is its own status, so that claims never walk past it.
        return Status.SCHEDULED if self.delay > 0 else Status.READY

    @property
    def status_if_cancel_requested(self) -> Status:
        """A requested cancellation turns every ending but a success into ``cancelled``."""
        return Status.SUCCEEDED if self.kind == OutcomeKind.SUCCEEDED else Status.CANCELLED

    @property
    def charge(self) -> budgets.Charge:
        """The budget this ending spends."""
        return budgets.charge_of(self.kind)

    @property
    def spent(self) -> bool:
        """Whether this ending spends the last of its budget."""
        return budgets.spent(
            self.charge, max_attempts=self.max_attempts, attempts_charged=self.attempts_charged,
            crashes_charged=self.crashes_charged,
        )  # fmt: skip

    @property
    def body_attempt(self) -> int:
        """The body's attempt this ending is of, counted within the budget (shown as
        "attempt 2/5")."""
        return self.attempts_charged + 1

    @property
    def keeps_run_after(self) -> bool:
        """Whether the job keeps its place (``run_after``) instead of waiting ``delay``."""
        return self.kind in (OutcomeKind.RELEASE, OutcomeKind.LEASE_EXPIRED)

    def row(self) -> dict[str, Any]:
        """This outcome as one row of the batch ``Driver.record_many`` stores.

        Keys left out arrive as NULL, keeping batches of successes small: ``status`` and
        ``cancel_status`` are the two decided statuses, ``finished`` / ``cancel_finished``
        whether each ends the job, ``delay`` (if present) the seconds from the database's clock
        to the new ``run_after``, ``charge_attempt`` / ``charge_crash`` the budget it spends.
        """
        status = self.status
        cancel_status = self.status_if_cancel_requested
        row: dict[str, Any] = {
            "id": self.job_id,
            "attempt": self.attempt,
            "status": _written(status),
            "cancel_status": _written(cancel_status),
            "finished": status in TERMINAL,
        }
        if self.result_json is not None:
            row["result"] = self.result_json
        if self.error is not None:
            row["has_error"] = True
            row["etype"] = self.error.get("type", "")
            row["emessage"] = self.error.get("message", "")
            row["etraceback"] = self.error.get("traceback")
        if status in (Status.READY, Status.SCHEDULED) and not self.keeps_run_after:
            row["delay"] = float(self.delay)
        charged = budgets.charged_columns(self.charge)
        if charged:
            row.update(charged)
        if self.progress is not None:
            row["has_progress"] = True
            row["pcurrent"], row["ptotal"], row["pmessage"], details = self.progress
            if details is not None:  # absent, not JSON null: the column stays SQL NULL
                row["pdetails"] = details
        return row

    def encoded(self) -> str:
        """``row()`` as JSON, made once (slots make it, so the control thread only joins)."""
        if self._encoded is None:
            self._encoded = _encode_row(self.row())
        return self._encoded


# The statuses a running job may take, as rows store them (``transition`` allows each): the
# look-up of every ``row()``, without the enum's ``value`` property or the check's call.
_FROM_RUNNING: dict[Status, str] = {
    status: transition(Status.RUNNING, status)[0].value for status in TRANSITIONS[Status.RUNNING]
}
