"""The driver protocol: the few statements of the hot path, written once per database vendor.

Everything here runs on the calling thread's Django connection for the jobs database, in
autocommit unless the caller opened a transaction (``atomic=True`` tasks record their success
inside theirs). Each write by a worker is fenced by (job id, lease owner, attempt) and returns
whether it changed a row: a stale worker's late write changes nothing.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.core.checks import CheckMessage
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import Job
from ..states import Status, transition


class OutcomeKind(enum.StrEnum):
    SUCCEEDED = "succeeded"
    RETRY = "retry"  # back to ready after a delay, or failed once the attempts are spent
    DISCARD = "discard"  # failed now, whatever attempts remain
    CANCELLED = "cancelled"
    SNOOZE = "snooze"  # back to ready after a delay; the attempt is not charged
    RELEASE = "release"  # graceful shutdown: back to ready now; the attempt is not charged


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class NewJob:
    """What the jobs of one enqueue call share, validated. Relative times (``delay``,
    ``deadline_in``) are added to the database's clock by the insert."""

    task_name: str
    queue: str
    priority: int
    max_attempts: int
    lease_seconds: int
    unique_key: str | None = None
    run_at: datetime | None = None
    delay: float | None = None
    deadline_at: datetime | None = None
    deadline_in: float | None = None

    def params(self, timestamp: Callable[[datetime], Any]) -> dict[str, Any]:
        """The values every job of the batch shares, as statement parameters."""
        return {
            "task_name": self.task_name, "queue": self.queue, "priority": self.priority,
            "max_attempts": self.max_attempts, "lease_seconds": self.lease_seconds,
            "unique_key": self.unique_key,
            "run_at": None if self.run_at is None else timestamp(self.run_at),
            "delay": self.delay or 0.0,
            "deadline_at": None if self.deadline_at is None else timestamp(self.deadline_at),
            "deadline_in": self.deadline_in,
        }  # fmt: skip

    @staticmethod
    def batch(payloads: Sequence[tuple[str, str]]) -> str:
        """The jobs' own values as one JSON parameter: ``[[args, kwargs], ...]``, embedding
        the JSON each job's arguments were already encoded to."""
        return "[" + ",".join(f"[{args},{kwargs}]" for args, kwargs in payloads) + "]"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Inserted:
    """What an insert returns. Every job of one insert shares its times (one template, one
    statement clock), so they come back once."""

    ids: list[int]
    run_after: datetime
    enqueued_at: datetime
    deadline: datetime | None


class ClaimedJob:
    """A job this worker claimed, as the claim returned it.

    The arguments arrive as one JSON text and are parsed on first use, by the slot that runs
    the job: the control thread, which claims for every slot, does no per-job parsing.
    ``deadline_passed`` says whether the deadline had passed by the database's clock.
    """

    __slots__ = (
        "_arguments",
        "_payload",
        "attempt",
        "deadline",
        "deadline_passed",
        "id",
        "lease_seconds",
        "max_attempts",
        "priority",
        "queue",
        "task_name",
    )  # fmt: skip

    def __init__(
        self, id: int, task_name: str, queue: str, priority: int, attempt: int,
        max_attempts: int, lease_seconds: int, deadline: datetime | None,
        deadline_passed: bool, payload: str,
    ) -> None:  # fmt: skip
        self.id = id
        self.task_name = task_name
        self.queue = queue
        self.priority = priority
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.lease_seconds = lease_seconds
        self.deadline = deadline
        self.deadline_passed = bool(deadline_passed)
        self._payload = payload  # '[args, kwargs]'
        self._arguments: tuple[list[Any], dict[str, Any]] | None = None

    def _parsed(self) -> tuple[list[Any], dict[str, Any]]:
        if self._arguments is None:
            args, kwargs = json.loads(self._payload)
            self._arguments = (args, kwargs)
        return self._arguments

    @property
    def args(self) -> list[Any]:
        return self._parsed()[0]

    @property
    def kwargs(self) -> dict[str, Any]:
        return self._parsed()[1]

    def __repr__(self) -> str:
        return f"<ClaimedJob {self.task_name}#{self.id} attempt {self.attempt}>"


@dataclasses.dataclass(slots=True, kw_only=True)
class Outcome:
    job_id: int
    attempt: int
    kind: OutcomeKind
    max_attempts: int
    result_json: str | None = None
    error: dict[str, Any] | None = None
    delay: float = 0.0
    _encoded: str | None = dataclasses.field(default=None, repr=False, compare=False)

    def encoded(self) -> str:
        """``row()`` as JSON, made once (slots make it, so the control thread only joins)."""
        if self._encoded is None:
            self._encoded = json.dumps(self.row(), separators=(",", ":"))
        return self._encoded

    @property
    def status(self) -> Status:
        """The status this outcome writes (a cancel request turns any failure into cancelled)."""
        if self.kind == OutcomeKind.SUCCEEDED:
            return Status.SUCCEEDED
        if self.kind == OutcomeKind.DISCARD:
            return Status.FAILED
        if self.kind == OutcomeKind.CANCELLED:
            return Status.CANCELLED
        if self.kind == OutcomeKind.RETRY and self.attempt >= self.max_attempts:
            return Status.FAILED
        return Status.READY

    @property
    def charges_attempt(self) -> bool:
        return self.kind not in (OutcomeKind.SNOOZE, OutcomeKind.RELEASE)

    def row(self) -> dict[str, Any]:
        """This outcome as one row of the batch that ``Driver.record_many`` writes."""
        (status,) = transition(Status.RUNNING, self.status)
        row: dict[str, Any] = {
            "id": self.job_id,
            "attempt": self.attempt,
            "status": status.value,
            "succeeded": self.kind == OutcomeKind.SUCCEEDED,
        }
        # Keys left out arrive as NULL: a success carries only its result, keeping batches small.
        if self.result_json is not None:
            row["result"] = self.result_json
        if self.error is not None:
            row["has_error"] = True
            row["etype"] = self.error.get("type", "")
            row["emessage"] = self.error.get("message", "")
            row["etraceback"] = self.error.get("traceback")
        if status == Status.READY and self.kind != OutcomeKind.RELEASE:
            row["delay"] = float(self.delay)  # a released job keeps its run_after (its place)
        if not self.charges_attempt:
            row["extra_attempts"] = 1
        return row


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    written: set[tuple[int, int]]
    """(job id, attempt) of each outcome written. Not ids alone: a batch may hold two attempts
    of one job (a stale body's late outcome next to the current attempt's), and only the
    current one is written."""
    busy: set[int]
    """Ids of the jobs whose row another session held locked (``skip_locked``)."""


class Driver:
    """Vendor SQL for one database alias. Subclasses fill in the statements."""

    vendor: str = ""
    supports_listen_notify: bool = False
    """Whether workers can be woken by the database (PostgreSQL LISTEN/NOTIFY)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.table = connections[alias].ops.quote_name(Job._meta.db_table)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    def insert(self, job: NewJob, payloads: Sequence[tuple[str, str]]) -> Inserted:
        """Insert one job per (args JSON, kwargs JSON) with one statement on the current
        transaction, and notify the queue. The ids come back in the order given."""
        raise NotImplementedError

    def claim(
        self, queues: Sequence[str], limit: int, owner: str, now: datetime | None = None
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` ready jobs in one statement and lease them to ``owner``."""
        raise NotImplementedError

    def renew(self, owner: str, leases: Sequence[tuple[int, int]]) -> dict[int, bool]:
        """Extend ``owner``'s leases ``(job id, attempt)``; return {renewed id: cancel asked}."""
        raise NotImplementedError

    def record(self, owner: str, outcome: Outcome) -> bool:
        """Write one outcome if ``owner`` still holds the job's lease for that attempt.

        Waits for the row if another session has it locked (an atomic task's success must not
        be mistaken for a lost lease)."""
        written = self.record_many(owner, [outcome]).written
        return (outcome.job_id, outcome.attempt) in written

    def record_many(
        self, owner: str, outcomes: Sequence[Outcome], *, skip_locked: bool = False
    ) -> Recorded:
        """Write many outcomes in one statement, each fenced by (id, ``owner``, attempt).

        ``written`` holds (id, attempt) of the outcomes written; with ``skip_locked``, ``busy``
        holds the ids whose row another session had locked (try them again later); the rest
        had lost their lease.
        """
        raise NotImplementedError

    @staticmethod
    def batch(outcomes: Sequence[Outcome]) -> str:
        """The outcomes as one JSON array parameter (the statement unpacks it into rows)."""
        return "[" + ",".join(outcome.encoded() for outcome in outcomes) + "]"

    def set_progress(
        self, owner: str, job_id: int, attempt: int, current: int, total: int | None, message: str
    ) -> bool:
        """Store a job's progress if ``owner`` still holds its lease (plain SQL, any vendor)."""
        sql = (
            f"UPDATE {self.table} SET progress_current = %s, progress_total = %s, "
            f"progress_message = %s WHERE id = %s AND lease_owner = %s AND attempt = %s "
            f"AND status = 'running'"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, [current, total, message, job_id, owner, attempt])
            return cursor.rowcount == 1

    def reap(self, now: datetime | None = None) -> list[int]:
        """Return expired leases to ready (or end them); the crashed attempt stays counted."""
        raise NotImplementedError

    def configure_control_session(self) -> None:
        """Session settings for a worker's control connection (run once per connection)."""

    def name_session(self, name: str, connection: BaseDatabaseWrapper | None = None) -> None:
        """Show ``connection`` (by default this thread's) as ``name`` where the database lists
        its sessions (run once per connection; a database without such a list does nothing)."""

    def listener(self, callback: Callable[[str | None], None], name: str = "") -> Any:
        """A started background listener calling ``callback(queue)``, or None if unsupported;
        ``name`` as in ``name_session``."""
        return None

    # --- configuration: what the system checks and runworker's start-up ask of a vendor ----------

    @classmethod
    def check_settings(cls, alias: str, settings_dict: Mapping[str, Any]) -> list[CheckMessage]:
        """System check messages about this vendor's settings of the jobs database ``alias``.

        Read from ``settings_dict`` (its ``DATABASES`` entry) alone: checks run before any
        connection, and on machines where the database cannot be reached."""
        return []

    def incurable_connection_error(self, exc: BaseException) -> str | None:
        """What is wrong, and the fix, if ``exc`` (raised while connecting) is a refusal that no
        wait cures: a database that does not exist, a rejected password. None when waiting may
        help (the server is down or restarting)."""
        return None
