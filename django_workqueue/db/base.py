"""The driver protocol: the few statements of the hot path, written once per database vendor.

Everything here runs on the calling thread's Django connection for the jobs database, in
autocommit unless the caller opened a transaction (``atomic=True`` tasks record their success
inside theirs). Each write by a worker is fenced by (job id, lease owner, attempt) and returns
whether it changed a row: a stale worker's late write changes nothing.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.core.checks import CheckMessage
from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import (
    Case,
    Count,
    DateTimeField,
    Expression,
    ExpressionWrapper,
    Min,
    Q,
    QuerySet,
    Value,
    When,
)
from django.db.models.functions import Now

from ..models import IdempotencyClaim, Job, Queue, StatsCounter
from ..outcomes import Outcome, OutcomeKind
from ..states import ACTIVE, AWAITING_PREREQUISITES, Status, transition


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
    unique_for: int | None = None
    """Seconds of a ``unique_for`` window: the insert stores the start of the window of the
    database's clock in ``unique_window`` (one job per task, key and window)."""
    on_conflict: str = "keep"
    """For the enqueue, not the insert: "replace" updates a waiting holder of the key."""
    run_at: datetime | None = None
    delay: float | None = None
    deadline_at: datetime | None = None
    deadline_in: float | None = None
    # Workflow steps: a job waiting on prerequisites is inserted blocked.
    workflow_id: int | None = None
    waiting_on: int = 0
    run_condition: str = "all_succeeded"
    input_shape: str | None = None
    """JSON: which prerequisites' results make the first argument (see ``Job.input_shape``)."""

    def params(self, timestamp: Callable[[datetime], Any]) -> dict[str, Any]:
        """The values every job of the batch shares, as statement parameters."""
        return {
            "task_name": self.task_name, "queue": self.queue, "priority": self.priority,
            "max_attempts": self.max_attempts, "lease_seconds": self.lease_seconds,
            "unique_key": self.unique_key, "unique_for": self.unique_for,
            "run_at": None if self.run_at is None else timestamp(self.run_at),
            "delay": self.delay or 0.0,
            "deadline_at": None if self.deadline_at is None else timestamp(self.deadline_at),
            "deadline_in": self.deadline_in,
            "workflow_id": self.workflow_id, "waiting_on": self.waiting_on,
            "run_condition": self.run_condition, "input_shape": self.input_shape,
        }  # fmt: skip

    flow_keys: Sequence[str | None] | None = None
    """One ``Job.flow_key`` per job of the insert (flow control), or None: none has one."""

    def batch(
        self, payloads: Sequence[tuple[str, str]], keys: Sequence[str | None] | None = None
    ) -> str:
        """The jobs' own values as one JSON parameter: ``[[args, kwargs(, key, flow key)],
        ...]``, embedding the JSON each job's arguments were already encoded to."""
        flow = self.flow_keys
        if keys is None and flow is None:
            return "[" + ",".join(f"[{args},{kwargs}]" for args, kwargs in payloads) + "]"
        rows = len(payloads)
        keys = [None] * rows if keys is None else keys
        flow = [None] * rows if flow is None else flow
        return (
            "["
            + ",".join(
                f"[{args},{kwargs},{json.dumps(key)},{json.dumps(flow_key)}]"
                for (args, kwargs), key, flow_key in zip(payloads, keys, flow, strict=True)
            )
            + "]"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Encoded:
    """The arguments of a batch of jobs encoded together, as ``NewJob.batch`` would encode
    rows without keys or flow keys: ``[[args, kwargs], ...]`` in one JSON text."""

    text: str
    count: int


def inserted_positions(
    keys: Sequence[str | None], inserted_keys: Sequence[str | None]
) -> list[int]:
    """Which rows of a batch inserted with ``ON CONFLICT DO NOTHING`` were written, given the
    keys of the written rows: every row without a key, and of each key written, its first row
    (the batch is inserted in its order, so a later row with the same key met the first)."""
    written = {key for key in inserted_keys if key is not None}
    seen: set[str] = set()
    positions = []
    for position, key in enumerate(keys):
        if key is None:
            positions.append(position)
        elif key in written and key not in seen:
            seen.add(key)
            positions.append(position)
    return positions


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Inserted:
    """What an insert returns. Every job of one insert shares its times (one template, one
    statement clock), so they come back once."""

    ids: list[int]
    run_after: datetime
    enqueued_at: datetime
    deadline: datetime | None
    status: str
    """``ready``, or ``scheduled`` when ``run_after`` is later than the database's clock, or
    ``blocked`` when the jobs wait on prerequisites."""
    unique_window: datetime | None = None
    positions: list[int] | None = None
    """With per-row keys: the index in the batch of each written row (``ids`` in the same
    order); the other rows met a unique constraint and were not written. None: all were."""


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
        "attempts_charged",
        "deadline",
        "deadline_passed",
        "flow_key",
        "id",
        "input_shape",
        "lease_seconds",
        "max_attempts",
        "priority",
        "queue",
        "task_name",
        "workflow_id",
    )  # fmt: skip

    def __init__(
        self, id: int, task_name: str, queue: str, priority: int, attempt: int,
        max_attempts: int, attempts_charged: int, lease_seconds: int, deadline: datetime | None,
        deadline_passed: bool, payload: str, workflow_id: int | None = None,
        input_shape: Any = None, flow_key: str | None = None,
    ) -> None:  # fmt: skip
        self.id = id
        self.task_name = task_name
        self.queue = queue
        self.priority = priority
        self.attempt = attempt
        self.max_attempts = max_attempts
        self.attempts_charged = attempts_charged
        """The body's attempts charged against ``max_attempts`` before this claim."""
        self.lease_seconds = lease_seconds
        self.deadline = deadline
        self.deadline_passed = bool(deadline_passed)
        self._payload = payload  # '[args, kwargs]'
        self._arguments: tuple[list[Any], dict[str, Any]] | None = None
        self.workflow_id = workflow_id
        self.flow_key = flow_key
        # JSON text from the claim (None for a job that receives no prerequisite's result).
        self.input_shape = json.loads(input_shape) if isinstance(input_shape, str) else input_shape

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


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BatchClaim:
    """What ``Driver.claim_batch`` returns: the jobs of one batch it claimed, or, when the
    group's jobs are not due together yet, how long until they are."""

    jobs: list[ClaimedJob]
    """The batch, in claim order (priority DESC, run_after, id); empty if nothing was due."""
    due_in: float | None = None
    """With no jobs claimed: seconds (database clock) until the group's oldest ready job has
    waited ``wait``; None when it has no ready job (or its queue is paused)."""


@dataclasses.dataclass(frozen=True, slots=True)
class FlowGroup:
    """A flow key with ready jobs, as ``Driver.flow_keys`` found it."""

    queue: str
    key: str
    task_name: str
    """The task of the key's first ready job (a limit key belongs to one task)."""
    ready: int | None = None
    """The group's ready jobs, counted up to the walk's ``count`` (None: not counted; a
    driver counts where that is cheap within the walk, SQLite's does)."""


class FlowHold:
    """The transaction of one limited flow claim (``Driver.flow_limits_held``), begun when
    its first row is to be locked."""

    claim_last: bool = False
    """The claim is its last statement (no starts to write after it): a driver may end the
    transaction in the claim's round trip."""

    clock: datetime | None = None
    """The database's clock when the rows were locked, if the driver read it with them."""

    def __init__(self, begin: Callable[[], object] | None = None) -> None:
        self._begin = begin

    def begin(self) -> None:
        """Begin the transaction now, if not begun yet (a driver that sends its BEGIN with
        the next statement does nothing here)."""
        if self._begin is not None:
            self._begin()
            self._begin = None


@dataclasses.dataclass(frozen=True, slots=True)
class FlowPick:
    """How many jobs ``Driver.claim_flow`` may take of one flow key, and the key's turn."""

    queue: str
    key: str
    take: int
    turn: int
    cap: int | None = None
    """The key's ``concurrency=``, where the claim is to count its running jobs itself
    (drivers with ``supports_capped_flow_claim``): the jobs taken of the key never make them
    more than this, whatever a count made before the claim said."""


@dataclasses.dataclass(frozen=True, slots=True)
class Ended:
    """A job a write just finished (succeeded, failed or cancelled): what its dependents and
    its workflow need to know, in the same transaction."""

    id: int
    status: str
    workflow_id: int | None


class Timing(NamedTuple):
    """A written outcome's attempt as the stats count it: where it ran, the status written,
    and its durations by the database's clock (seconds).

    Immutable as a tuple, not a frozen dataclass: a worker's pass makes one per written
    outcome on its control thread, and a frozen dataclass's ``__init__`` (``object.__setattr__``
    per field) cost about 1.8 µs a job there, a tuple's 0.8 (issue 32)."""

    id: int
    attempt: int
    queue: str
    task_name: str
    status: str
    run_seconds: float | None
    """From the attempt's start to this write."""
    wait_seconds: float | None
    """From the job's ``run_after`` to the attempt's start; negative when this write moved
    ``run_after`` on (a retry or snooze: the wait is then unknown)."""


#: The unfinished statuses in the order of ``wq_job_active``'s condition (models.py).
ACTIVE_STATUSES = ["blocked", "scheduled", "ready", "held", "waiting", "running"]

AWAITING_SQL = ", ".join(f"'{status.value}'" for status in sorted(AWAITING_PREREQUISITES))
"""``states.AWAITING_PREREQUISITES`` as an SQL list: the rows ``count_down`` counts on."""
assert set(ACTIVE_STATUSES) == {str(status.value) for status in ACTIVE}


@dataclasses.dataclass(frozen=True, slots=True)
class ActiveCount:
    """Unfinished jobs of one queue, task and status (``Driver.active_counts``)."""

    queue: str
    task_name: str
    status: str
    count: int
    due: int
    """Of them, ready and due."""
    oldest_due: datetime | None


def counter_batch(counters: Iterable[tuple[str, str, str, int, int, int]]) -> str:
    """``Driver.count_stats``'s rows as one JSON array parameter."""
    keys = ("queue", "task_name", "name", "bucket", "shard", "count")
    return json.dumps([dict(zip(keys, row, strict=True)) for row in counters])


@dataclasses.dataclass(frozen=True, slots=True)
class CountedDown:
    """A waiting dependent after its prerequisites' endings were counted (``Driver.count_down``)."""

    id: int
    waiting_on: int
    prerequisites_succeeded: int
    run_condition: str
    workflow_id: int | None
    due: bool
    """Whether its run_after has come (released, it is ready; otherwise scheduled)."""
    queue: str
    held: bool = False
    """Held by an operator: counted like a blocked one, its verdict waits for its release."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    written: set[tuple[int, int]]
    """(job id, attempt) of each outcome written. Not ids alone: a batch may hold two attempts
    of one job (a stale body's late outcome next to the current attempt's), and only the
    current one is written."""
    busy: set[int]
    """Ids of the jobs whose row another session held locked (``skip_locked``): try them
    again later. A row that no longer exists is never busy."""
    ended: list[Ended] = dataclasses.field(default_factory=list)
    """The written outcomes that finished their job, as the row says (a requested
    cancellation may have turned a failure into ``cancelled``)."""
    timings: list[Timing] = dataclasses.field(default_factory=list)
    """Every written outcome's attempt, for the stats (``record_many`` and ``record_and_claim``)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class CountedWrite:
    """A worker's outcomes of plain jobs with what the statistics count for each, decided
    above the driver (``stats/counters.py``), for ``Driver.record_and_claim``."""

    outcomes: Sequence[Outcome]
    counted: Sequence[tuple[int, int, str | None, str | None]]
    """The outcomes that count once written, one row each: (job id, attempt, the counter of
    the status decided, the counter of the status a requested cancellation picks; None: that
    status counts nothing)."""
    shard: int
    """The counter rows' shard of the writing worker."""
    bounds: Sequence[float]
    """The smallest duration of each duration class from 1 on (``histogram.lower_bounds``)."""
    counters: Sequence[tuple[str | None, str | None]]
    """The counters a counted outcome adds to (``stats.counters.COUNTERS``): (counter, or None
    for the outcome's own ending; the duration that classes it, ``"run"`` or ``"wait"``, or
    None for class 0)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """A running job's latest progress report, validated by ``JobContext.set_progress``."""

    job_id: int
    attempt: int
    current: int
    total: int | None
    message: str
    details: dict[str, Any] | None = None

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "id": self.job_id, "attempt": self.attempt, "pcurrent": self.current,
            "ptotal": self.total, "pmessage": self.message,
        }  # fmt: skip
        if self.details is not None:  # absent, not JSON null: the column stays SQL NULL
            row["pdetails"] = self.details
        return row


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Expired:
    """A running job whose lease has expired, as ``Driver.expired_leases`` locked it."""

    id: int
    attempt: int
    max_attempts: int
    attempts_charged: int
    crashes_charged: int
    owner: str
    queue: str
    owner_gone: bool = False
    """Reaped because its worker is gone (liveness), not because the lease ran out."""
    began: bool = True
    """Whether its body may have begun: False for a job claimed ahead into its worker's
    buffer that no slot took as far as the database knows (``Driver.claim(ahead=True)``)."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class LivenessToken:
    """What a worker holds that ends with its process, as its ``WorkerProcess`` row declares
    it (``liveness``, ``liveness_since``): a worker declares it again whenever either changes."""

    value: str
    taken_at: datetime | None = None
    """When it was taken, by the database's clock (a PostgreSQL key: when its session took
    it, so that a new session holding the same key is declared anew); None: at the writing."""


class WorkerWatch(abc.ABC):
    """Waits, at no cost to the database, for one worker's process to be gone (liveness):
    a vendor's way to hear a death as it happens instead of polling for it."""

    @abc.abstractmethod
    def wait_gone(self, worker: Any) -> bool:
        """Block until ``worker`` (a ``WorkerProcess`` row) is gone: True; or until
        ``interrupt()`` or a lost connection: False. A worker already gone returns at once."""

    @abc.abstractmethod
    def interrupt(self) -> None:
        """Make the ``wait_gone`` running now, or the next one, return False (any thread)."""

    def close(self) -> None:
        """Free what the watch holds (a connection)."""
        return None


def reapable(now: datetime | None, gone: Collection[str]) -> Q:
    """Running jobs the reaper takes back: their lease expired (by the database's clock, or
    ``now``), or their worker is one of ``gone``."""
    expired = lease_ran_out(now)
    return expired | Q(lease_owner__in=gone) if gone else expired


def lease_ran_out(now: datetime | None) -> Q:
    """Jobs whose lease expired (by the database's clock, or ``now``)."""
    return Q(lease_expires_at__lt=Now() if now is None else now)


def spare(
    jobs: QuerySet[Job], owner: str | None, ids: Collection[int] | None = None
) -> QuerySet[Job]:
    """``jobs`` but those of lease owner ``owner`` (all of them, or only ``ids`` when given)."""
    if owner is None:
        return jobs
    if ids is None:
        return jobs.exclude(lease_owner=owner)
    return jobs.exclude(lease_owner=owner, id__in=list(ids))


class Driver(abc.ABC):
    """Vendor SQL for one database alias: the statements of the hot path, one class per vendor.

    Drivers store what was decided above them (``outcomes.Outcome.row()``, the claim order, the
    promotion of due jobs); they do not decide what an outcome means. Vendor knowledge (SQL,
    error codes, session settings) lives here and nowhere else. The conformance suite in
    ``tests/integration/test_drivers.py`` runs every method on every vendor.
    """

    vendor: str = ""
    supports_listen_notify: bool = False
    """Whether workers can be woken by the database (PostgreSQL LISTEN/NOTIFY)."""
    supports_separate_commit: bool = True
    """Whether a second connection can commit a write while this thread's connection is in an
    open transaction (SQLite: no, it would wait for that transaction's write lock)."""
    supports_row_locks: bool = True
    """Whether a session locks rows, so that a writer stopped by one row's lock can still write
    the others (SQLite: no, one writer locks the whole database; ``db/locking.py``)."""
    supports_record_and_claim: bool = False
    """Whether ``record_and_claim`` writes plain outcomes, counts them and claims in one
    autocommitted statement (PostgreSQL with psycopg 3)."""
    supports_capped_flow_claim: bool = False
    """Whether ``claim_flow`` honours a pick's ``cap``: it counts the key's running jobs in its
    own statement, under the write lock that statement takes (SQLite), so that a claim of keys
    limited by ``concurrency=`` alone needs no transaction around the walk's count."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.table = connections[alias].ops.quote_name(Job._meta.db_table)
        self.queue_table = connections[alias].ops.quote_name(Queue._meta.db_table)
        self.claim_table = connections[alias].ops.quote_name(IdempotencyClaim._meta.db_table)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    def transaction_failed(self) -> bool:
        """Whether a statement failed in the open transaction, its error caught: the database
        then refuses the transaction's next statements and rolls it back at its ``COMMIT``
        (PostgreSQL). SQLite undoes the failed statement alone: never."""
        return False

    def pipelined(self) -> contextlib.AbstractContextManager[object]:
        """Inside it, a statement whose answer nothing reads goes out with the next one whose
        answer is read, in one round trip (PostgreSQL's pipeline mode); elsewhere, one by one.
        Its end waits for every answer, so an error of any statement has raised by then."""
        return contextlib.nullcontext()

    # --- enqueue ------------------------------------------------------------------------------

    @abc.abstractmethod
    def insert(
        self,
        job: NewJob,
        payloads: Sequence[tuple[str, str]] | Encoded,
        keys: Sequence[str | None] | None = None,
    ) -> Inserted:
        """Insert one job per (args JSON, kwargs JSON) (or per row of ``Encoded``, whose jobs
        have neither keys nor flow keys) with one statement on the current
        transaction, ``scheduled`` if its run_after is later than the database's clock and
        ``ready`` otherwise, and notify the queue. The ids come back in the order given.

        With ``keys`` (one unique key or None per row), a row that meets a unique constraint
        (an active job of its key, or a job of its key in its ``unique_for`` window) is skipped
        (``ON CONFLICT DO NOTHING``) and ``Inserted.positions`` says which rows were written.
        Without, ``job.unique_key`` applies to every row and a conflict raises."""

    @abc.abstractmethod
    def replace_waiting(self, job: NewJob, key: str, payload: tuple[str, str]) -> int | None:
        """Give the waiting (blocked, scheduled, ready or held) job of ``job.task_name`` and
        ``key`` these arguments and a new run_after (``job``'s delay or run_at, from the
        database's clock now), and the new deadline if ``job`` has one, in one guarded UPDATE.
        A ready or scheduled job becomes whichever its new run_after makes it. Returns its id,
        or None when no waiting job holds the key (a running one is never changed)."""

    # --- the worker's hot path ----------------------------------------------------------------

    @abc.abstractmethod
    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        owner: str,
        now: datetime | None = None,
        *,
        ahead: bool = False,
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` ready jobs of ``queues`` in one statement, highest priority
        first, and lease them to ``owner``; the claim is the attempt's start (attempt + 1).

        ``ahead``: a claim into the worker's local buffer, beyond its free slots. Only jobs
        never claimed before (``attempt = 0``) are taken, and they are marked
        ``claimed_ahead`` (not begun) until ``began`` says a slot took them: a job that never
        began goes back uncharged if its worker dies, and a job that killed its worker before
        the database learned it began is never claimed ahead again, so its next crash is
        charged (a poison pill still ends in the dead-letter queue)."""

    def leased_to(self, owner: str, since: datetime) -> list[Outcome]:
        """The jobs ``owner`` holds a lease on (``running``, leased to it) by a claim made at
        ``since`` or later (the database's clock: a process's own claims, not those of an
        earlier process that used the same worker id), each as the release that would give it
        back to ready uncharged (``OutcomeKind.RELEASE``, its budgets as the row has them):
        what a worker compares with the jobs it knows it holds after a lost connection
        (``worker/unheld.py``). Rare, so the ORM's query."""
        rows = (
            Job.objects.using(self.alias)
            .filter(status=Status.RUNNING, lease_owner=owner, started_at__gte=since)
            .order_by("id")
            .values_list(
                "id", "attempt", "max_attempts", "attempts_charged", "crashes_charged",
                "task_name", "queue",
            )
        )  # fmt: skip
        return [
            Outcome(
                job_id=pk, attempt=attempt, kind=OutcomeKind.RELEASE, max_attempts=max_attempts,
                attempts_charged=charged, crashes_charged=crashes, task_name=task, queue=queue,
            )
            for pk, attempt, max_attempts, charged, crashes, task, queue in rows
        ]  # fmt: skip

    @abc.abstractmethod
    def began(self, owner: str, leases: Sequence[tuple[int, int]]) -> set[int]:
        """Jobs ``(id, attempt)`` claimed ahead by ``owner`` that a slot took: no longer
        ``claimed_ahead``, started now. Fenced like every worker write, and never waiting for
        a row another session holds (db/locking.py: such a row is skipped, and the caller
        tries it again on its next pass). Returns the ids written."""

    def flow_keys(
        self, queues: Sequence[str], after: str, limit: int, *, count: int = 0
    ) -> list[FlowGroup]:
        """Up to ``limit`` flow keys with ready jobs in the unpaused
        ``queues``: those after ``after`` in key order first, then from the first key on
        (round-robin from a cursor). Each key costs one index probe, however many jobs and
        keys there are (a skip scan of ``wq_job_flow``). The generic version walks with one
        query per key, fine for an embedded database; a server overrides it with one
        statement. ``count``: a driver may count each group's ready jobs up to it
        (``FlowGroup.ready``); this version does not."""
        paused = set(
            Queue.objects.using(self.alias)
            .filter(name__in=list(queues), paused_at__isnull=False)
            .values_list("name", flat=True)
        )
        served = [queue for queue in queues if queue not in paused]
        ahead = sorted(
            (g for queue in served for g in self._walk(queue, after, None, limit)),
            key=lambda g: (g.key, g.queue),
        )[:limit]
        if len(ahead) < limit and after:
            behind = sorted(
                (g for queue in served for g in self._walk(queue, "", after, limit)),
                key=lambda g: (g.key, g.queue),
            )
            ahead += behind[: limit - len(ahead)]
        return ahead

    def _walk(self, queue: str, low: str, high: str | None, limit: int) -> list[FlowGroup]:
        ready = Job.objects.using(self.alias).filter(
            status=Status.READY, queue=queue, flow_key__isnull=False
        )
        if high is not None:
            ready = ready.filter(flow_key__lte=high)
        groups: list[FlowGroup] = []
        key = low
        while len(groups) < limit:
            row = (
                ready.filter(flow_key__gt=key)
                .order_by("flow_key")
                .values_list("flow_key", "task_name")
                .first()
            )
            if row is None:
                break
            key = row[0] or ""  # never None: the filter is flow_key > key
            groups.append(FlowGroup(queue, key, row[1]))
        return groups

    @contextlib.contextmanager
    def flow_limits_held(self) -> Iterator[FlowHold]:
        """The transaction of a limited flow claim (``flow/claim.py``): ``lock_flow_limits``,
        ``claim_flow`` and ``write_flow_starts`` run inside it, and the rows stay locked until
        it ends. Inside a caller's transaction, a savepoint of it: a failed claim rolls back
        alone, and the rows stay locked until the caller's transaction ends."""
        with contextlib.ExitStack() as stack:
            yield FlowHold(lambda: stack.enter_context(transaction.atomic(using=self.alias)))

    def walk_flow_limits(
        self,
        hold: FlowHold,
        queues: Sequence[str],
        after: str,
        limit: int,
        limited: Mapping[str, bool],
        prefix: str,
        *,
        count: int = 0,
    ) -> tuple[list[FlowGroup], dict[str, tuple[list[list[float]], int]]]:
        """``flow_keys`` (``count`` as there), then ``lock_flow_limits`` of the walked keys
        that start with ``prefix`` and whose task is in ``limited`` (task name: whether its
        running jobs are counted), inside ``hold``. The generic version walks outside the
        transaction and begins it only when there are rows to lock."""
        walked = self.flow_keys(queues, after, limit, count=count)
        keys = {g.key: limited[g.task_name] for g in walked
                if g.task_name in limited and g.key.startswith(prefix)}  # fmt: skip
        if not keys:
            return walked, {}
        hold.begin()
        return walked, self.lock_flow_limits(sorted(keys), {k for k, n in keys.items() if n})

    @abc.abstractmethod
    def lock_flow_limits(
        self, keys: Sequence[str], counted: Collection[str]
    ) -> dict[str, tuple[list[list[float]], int]]:
        """Hold the limits of ``keys`` for the claim, inside ``flow_limits_held``, and return
        {held key: (its recorded starts, its running jobs)}: where rows lock, the
        ``FlowLimit`` rows in key order, those of keys seen for the first time made, a row
        another session holds skipped; where one writer locks the database (SQLite), its
        write lock, with no row made. Running jobs are counted for the keys in ``counted``
        only (0 for the others): a count walks every running job of its key."""

    @abc.abstractmethod
    def write_flow_starts(self, starts: Mapping[str, list[list[float]]]) -> None:
        """Store the recent starts of rate-limited keys held by ``lock_flow_limits``, inside
        ``flow_limits_held`` (one statement for every key)."""

    @abc.abstractmethod
    def claim_flow(
        self, picks: Sequence[FlowPick], limit: int, owner: str, now: datetime | None = None
    ) -> list[ClaimedJob]:
        """Claim up to ``limit`` ready jobs under flow control in one statement: of each pick,
        up to ``take`` of its key's jobs in claim order (priority, run_after, id), taken in
        rounds — every key's first job, in ``turn`` order, then every key's second — and
        lease them to ``owner`` like ``claim``. Returned in that round order, each with its
        ``flow_key``. Where ``supports_capped_flow_claim``, a pick's ``cap`` bounds its key's
        running jobs, counted by this statement (the picks of one key share it)."""

    @abc.abstractmethod
    def batch_backlog(
        self, groups: Sequence[tuple[str, str, int]], now: datetime | None = None
    ) -> dict[tuple[str, str], tuple[int, float]]:
        """For each group (queue, flow key, batch size) with ready jobs, in one read-only
        statement: {(queue, flow key): (its ready jobs counted up to the batch size, seconds
        the oldest of those has been due)}. A group of a paused queue is left out, as is one
        with no ready job. What a worker reads each pass to find the batches worth claiming."""

    @abc.abstractmethod
    def claim_batch(
        self,
        queue: str,
        flow_key: str,
        size: int,
        wait: float,
        owner: str,
        now: datetime | None = None,
    ) -> BatchClaim:
        """Claim up to ``size`` ready jobs of ``queue`` with ``flow_key`` (a batch task's
        group) in one statement, in claim order, and lease them to ``owner`` like ``claim`` —
        but only together: when ``size`` are ready, or the oldest ready one became due
        (``run_after``) at least ``wait`` seconds ago. Otherwise nothing is claimed and
        ``due_in`` says when the group will be due. A paused queue claims nothing."""

    @abc.abstractmethod
    def renew_leases(
        self, owner: str, leases: Sequence[tuple[int, int]]
    ) -> tuple[dict[int, bool], set[int]]:
        """Extend ``owner``'s leases ``(job id, attempt)`` without waiting for a row another
        session holds locked. Return {id still held: whether cancellation was requested} and
        the ids among them whose row was locked, so not extended: the caller tries those again
        soon, well before their lease runs out."""

    def renew(self, owner: str, leases: Sequence[tuple[int, int]]) -> dict[int, bool]:
        """``renew_leases``'s first part: {id still held: whether cancellation was requested}."""
        return self.renew_leases(owner, leases)[0]

    @abc.abstractmethod
    def record_many(
        self, owner: str, outcomes: Sequence[Outcome], *, skip_locked: bool = False
    ) -> Recorded:
        """Store many outcomes (``Outcome.row()``) in one statement, each fenced by (id,
        ``owner``, attempt, status running); the row's ``cancel_requested_at`` picks between
        the outcome's two decided statuses. An outcome's progress lands in the same write.

        With ``skip_locked``, rows another session holds locked are left alone and reported
        ``busy``; without it the statement waits for them.
        """

    def record_and_claim(
        self, owner: str, write: CountedWrite, queues: Sequence[str], limit: int
    ) -> tuple[Recorded, list[ClaimedJob]]:
        """One statement, committed on its own (autocommit), for a worker's pass of plain jobs:
        ``record_many(owner, write.outcomes, skip_locked=True)``, the statistics of what it
        wrote (``count_stats``, by ``write.counted``) and ``claim(queues, limit, owner)``.
        Only where ``supports_record_and_claim``; either all of it is kept, or none. A row
        that joined a workflow since its claim (``using(depends_on=...)`` of a running job) is
        not written: its outcome comes back ``busy``, for a pass that writes workflow effects.
        """
        raise NotImplementedError(f"{self.vendor} passes write, count and claim apart")

    def active_counts(self, now: datetime) -> list[ActiveCount]:
        """Unfinished jobs per (queue, task, status), with those ready and due at ``now`` and
        the oldest due ``run_after``, for ``stats.snapshot()``: one GROUP BY that reads the
        ``wq_job_active`` index alone (PostgreSQL: an index-only scan)."""
        due = Q(status=Status.READY, run_after__lte=now)
        rows = (
            Job.objects.using(self.alias)
            .filter(status__in=ACTIVE_STATUSES)
            .order_by()
            .values_list("queue", "task_name", "status")
            .annotate(
                n=Count("*"),
                due=Count("run_after", filter=due),  # a column of the index, never NULL
                oldest=Min("run_after", filter=due),
            )
        )
        return [ActiveCount(*row) for row in rows]

    def estimate_count(self, queryset: QuerySet[Any]) -> int | None:
        """A cheap estimate of ``queryset.count()`` from the planner's statistics, for the
        admin's pages over large tables; None where the database keeps none (SQLite: the
        caller counts exactly, up to a cap)."""
        return None

    @property
    def stats_table(self) -> str:
        return StatsCounter._meta.db_table

    @abc.abstractmethod
    def count_stats(self, counters: Sequence[tuple[str, str, str, int, int, int]]) -> None:
        """Add ``(queue, task name, name, bucket, shard, count)`` to the ``StatsCounter`` rows
        of the database clock's current minute, in one statement (an upsert: rows are
        created or added to). Rows are written in key order, so that two writers never wait
        for each other in a cycle."""

    def record(self, owner: str, outcome: Outcome) -> bool:
        """Write one outcome, waiting (a bounded time) for its row if another session holds
        it locked; return whether it was written. Outside a worker's writes (tools, tests):
        those follow ``db/locking.py``."""
        written = self.record_many(owner, [outcome]).written
        return (outcome.job_id, outcome.attempt) in written

    @abc.abstractmethod
    def write_progress(
        self, owner: str, reports: Sequence[Progress], *, skip_locked: bool = False
    ) -> Recorded:
        """Store many progress reports in one statement, each fenced like an outcome.
        ``written`` holds (id, attempt) of those written, ``busy`` as in ``record_many``."""

    def set_progress(
        self, owner: str, job_id: int, attempt: int, current: int, total: int | None, message: str
    ) -> bool:
        """Store one job's progress now (outside a worker: tests, tools, atomic bodies)."""
        report = Progress(
            job_id=job_id, attempt=attempt, current=current, total=total, message=message
        )
        return (job_id, attempt) in self.write_progress(owner, [report]).written

    def retake(self, owner: str, job_id: int, attempt: int) -> bool:
        """Lease a job this worker released at shutdown back to it, if nobody claimed it
        since (same attempt, still ready, no owner), so that an outcome that arrived just
        after the release can be written. The release spent nothing, and neither does this."""
        (running,) = transition(Status.READY, Status.RUNNING)
        return bool(
            Job.objects.using(self.alias)
            .filter(id=job_id, attempt=attempt, status=Status.READY, lease_owner__isnull=True)
            .update(
                status=running,
                lease_owner=owner,
                # Long enough for the write that follows; the heartbeat is stopping.
                lease_expires_at=ExpressionWrapper(
                    Now() + timedelta(minutes=1), output_field=DateTimeField()
                ),
            )
        )

    def lease_states(self, ids: Iterable[int]) -> dict[int, tuple[str, str | None]]:
        """(status, lease owner) of each job in ``ids`` that still exists: why a lease was
        not renewed (finished elsewhere, taken by another worker, or the row is gone)."""
        rows = Job.objects.using(self.alias).filter(id__in=list(ids))
        return {pk: (status, owner) for pk, status, owner in
                rows.values_list("id", "status", "lease_owner")}  # fmt: skip

    # --- flow control: skip-queue and idempotency claims -------------------------------------

    @abc.abstractmethod
    def claim_job(self, job_id: int, owner: str) -> ClaimedJob | None:
        """Claim the one job ``job_id`` for ``owner`` as ``claim`` would (attempt + 1, a lease
        of the job's ``lease_seconds`` from the database's clock) in one guarded UPDATE, if
        it is still ready, outside flow control and not in a paused queue; None otherwise (a
        worker claimed it first, it was cancelled or held). Skip-queue runs its first attempt
        in the enqueuing process this way."""

    @abc.abstractmethod
    def take_claim(
        self,
        key: str,
        job_id: int | None,
        ttl: float,
        connection: BaseDatabaseWrapper | None = None,
    ) -> bool:
        """Take the idempotency claim ``key`` for ``job_id`` until ``ttl`` seconds after the
        database's clock, in one statement: insert it, or take over a claim of the key whose
        ``expires_at`` has passed; return whether this call took it. On ``connection`` (by
        default this thread's), in its transaction if it has one: a concurrent claim of the
        same key waits for that transaction and then sees the outcome."""

    def delete_expired_claims(self, limit: int, now: datetime | None = None) -> int:
        """Delete up to ``limit`` idempotency claims whose ``expires_at`` has passed, oldest
        first (the ``wq_claim_expires`` index), in one statement; return how many."""
        claims = IdempotencyClaim.objects.using(self.alias)
        clock = Now() if now is None else now
        expired = claims.filter(expires_at__lt=clock)
        if not expired.exists():  # the usual answer: one read, no write lock, no transaction
            return 0
        oldest = expired.order_by("expires_at").values("key")[:limit]
        # The condition again on the deleted rows themselves: on PostgreSQL a claim taken over
        # while this statement waited for its row lock is checked anew, and stays.
        deleted, _ = claims.filter(key__in=oldest, expires_at__lt=clock).delete()
        return deleted

    # --- workflows ---------------------------------------------------------------------------

    @abc.abstractmethod
    def count_down(self, counts: Sequence[tuple[int, int, int]]) -> list[CountedDown]:
        """Count prerequisites' endings on their waiting dependents (``blocked`` or ``held``,
        ``AWAITING_SQL``) in one statement: for each (dependent id, prerequisites that ended, of
        which succeeded), lower ``waiting_on`` and raise ``prerequisites_succeeded``, and return
        each counted row as it is now, locked until the transaction ends. Dependents no longer
        waiting are left alone."""

    # --- maintenance --------------------------------------------------------------------------

    def expired_leases(
        self,
        limit: int,
        now: datetime | None = None,
        spare_owner: str | None = None,
        spare_ids: Collection[int] | None = None,
        gone: Collection[str] = (),
        among: Collection[int] | None = None,
    ) -> list[Expired]:
        """Running jobs whose lease expired, or whose worker is one of ``gone`` (liveness),
        oldest id first, up to ``limit`` (and only ``among`` these ids, when given), locked
        until the caller's transaction ends. Rows
        another session holds locked are skipped (a long transaction that called cancel_job
        must not stall every reaper); SQLite, which has no row locks, holds its write lock
        instead (BEGIN IMMEDIATE). ``spare_owner``'s jobs are left alone: all of them, or only
        ``spare_ids`` when given (see ``Reaper``)."""
        candidates = spare(
            Job.objects.using(self.alias).filter(reapable(now, gone), status=Status.RUNNING),
            spare_owner,
            spare_ids,
        )
        if among is not None:
            candidates = candidates.filter(id__in=list(among))
        owner_gone: Any = (
            Case(When(lease_owner__in=gone, then=Value(True)), default=Value(False))
            if gone
            else Value(False)
        )
        rows = (
            candidates.order_by("id")
            .select_for_update(skip_locked=True)
            .annotate(owner_gone=owner_gone)
            .values_list(
                "id", "attempt", "max_attempts", "attempts_charged", "crashes_charged",
                "lease_owner", "queue", "owner_gone", "claimed_ahead",
            )[:limit]
        )  # fmt: skip
        return [
            Expired(
                id=pk, attempt=attempt, max_attempts=budget, attempts_charged=charged,
                crashes_charged=crashes, owner=owner or "", queue=queue,
                owner_gone=bool(owner_gone), began=not ahead,
            )
            for pk, attempt, budget, charged, crashes, owner, queue, owner_gone, ahead in rows
        ]  # fmt: skip

    # --- liveness -----------------------------------------------------------------------------

    def gone_workers(self) -> Collection[str]:
        """The ids of registered workers whose process is known to be gone, by what the
        database or the host tells at once (``WorkerProcess.liveness``); a worker whose token
        proves nothing (``trusted_liveness``) is never among them (its jobs wait for their
        leases). A collection usable as ``id__in=`` in a query (a vendor may return a subquery,
        run with it). The one answer to "is this worker dead?" that the reaper and the
        maintenance lease's takeover (``maintenance/liveness.py``) both read."""
        return ()

    def trusted_liveness(self) -> Q | Expression:
        """The ``WorkerProcess`` rows whose liveness token, once no longer held, proves the
        process gone: those that show one (PostgreSQL adds: taken since the server's last
        start, ``pg_liveness``). The others' jobs wait for their leases."""
        return ~Q(liveness="")

    def liveness_token(self) -> LivenessToken | None:
        """This process's liveness token where the vendor takes it from the process itself
        (SQLite: its pid on its host), or None (PostgreSQL: the worker's LISTEN connection
        holds it, ``listener().held()``)."""
        return None

    def worker_watch(self) -> WorkerWatch | None:
        """A ``WorkerWatch`` for another worker's death, or None where none can be had."""
        return None

    @abc.abstractmethod
    def promote(self, limit: int, now: datetime | None = None) -> list[str]:
        """Move up to ``limit`` scheduled jobs whose run_after has come to ready, earliest
        first; return the queue of each and notify those queues."""

    @abc.abstractmethod
    def now(self) -> datetime:
        """The database's clock (aware, UTC): what every schedule and lease is compared with,
        read for the values computed in Python (a schedule's next tick)."""

    def notify(self, queues: Iterable[str]) -> None:
        """Wake the workers of ``queues`` in other processes (at commit), where supported."""
        return None  # optional: vendors that support it override

    def bound_lock_waits(self, seconds: float | None = None) -> str | None:
        """Make row-lock waits of the rest of this transaction fail after ``seconds`` (by
        default a worker's bound, a moment) instead of stalling the caller (call it inside
        ``atomic``; it leaves nothing on the session), where the database waits for row locks
        at all. Returns the bound it replaced, for ``restore_lock_waits``."""
        return None  # SQLite: one writer at a time, waited for by its busy timeout

    def restore_lock_waits(self, previous: str | None) -> None:
        """Put back the bound ``bound_lock_waits`` replaced, for the rest of the transaction."""
        return None

    def notify_abort(self, job_id: int, reason: str) -> None:
        """Tell the worker running ``job_id`` to stop, for ``reason`` (at commit), where
        supported; elsewhere its heartbeat finds out."""
        return None  # optional: vendors that support it override

    # --- sessions and errors ------------------------------------------------------------------

    def name_session(self, name: str, connection: BaseDatabaseWrapper | None = None) -> None:
        """Show ``connection`` (by default this thread's) as ``name`` where the database lists
        its sessions (run once per connection; a database without such a list does nothing)."""
        return None  # optional: vendors that support it override

    def listener(
        self,
        on_ready: Callable[[str | None], None],
        on_abort: Callable[[int, str], None],
        name: str = "",
        on_standby: Callable[[], None] = lambda: None,
    ) -> Any:
        """A started background listener, or None if unsupported. It calls ``on_ready(queue)``
        when a queue has new ready jobs (``on_ready(None)`` after a reconnect: poll once) and
        ``on_abort(job id, reason)`` when a running job must stop (``notify_abort``); ``name``
        as in ``name_session``. Where a watch of the maintainer costs a connection, it also
        holds this worker's standby slot (``standby``, ``want_standby``) and calls
        ``on_standby()`` when that changes."""
        return None

    def notify_standby_free(self) -> None:
        """Tell the listening workers that a standby slot may be free (a worker died), so that
        one that has none tries to take it (see ``listener``); nothing where there are none."""
        return None

    def is_lock_timeout(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a wait for a row lock (or a statement) that timed out, or a
        deadlock the database broke by aborting this side: the session is fine, the statement
        can be tried again later."""
        return False

    def is_deadlock(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a deadlock the database broke by aborting this side (a kind of
        ``is_lock_timeout``): tried again at once, it usually succeeds."""
        return False

    @staticmethod
    def batch(rows: Iterable[Outcome | Progress]) -> str:
        """Outcomes or progress reports as one JSON array parameter (the statement unpacks
        it into rows)."""
        parts = (
            row.encoded() if isinstance(row, Outcome) else json.dumps(row.row()) for row in rows
        )
        return "[" + ",".join(parts) + "]"

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
