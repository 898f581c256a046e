"""PostgreSQL: ``FOR UPDATE SKIP LOCKED`` claims, the server's clock, LISTEN/NOTIFY.

The clock is ``statement_timestamp()`` (what Django's ``Now()`` uses too), not ``now()``: inside
a caller's long transaction ``now()`` is frozen at its start, which would date a job enqueued at
the end of it, or a completion recorded inside an ``atomic=True`` task, too early.

Many worker processes on many hosts share one database. Claims never wait on each other's row
locks (SKIP LOCKED); two reapers or a reaper and a completion racing for one row serialise on
its row lock, and the loser's ``WHERE status = 'running' AND lease_owner = …`` no longer matches.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import selectors
import socket
import threading
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from django.core import checks
from django.core.checks import CheckMessage
from django.core.exceptions import EmptyResultSet, ImproperlyConfigured
from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import QuerySet

from ..conf import workqueue_settings as conf
from ..models import FlowLimit, Workflow
from ..outcomes import Outcome
from ..states import TERMINAL
from . import pg_liveness
from .base import (
    AWAITING_SQL,
    BatchClaim,
    ClaimedJob,
    CountedDown,
    CountedWrite,
    Driver,
    Encoded,
    Ended,
    FlowGroup,
    FlowHold,
    FlowPick,
    Inserted,
    LivenessToken,
    NewJob,
    Progress,
    Recorded,
    Timing,
    counter_batch,
    inserted_positions,
)

logger = logging.getLogger("django_workqueue.db")


def _prepared_cursor_class() -> Any:
    """The cursor class of ``PostgresDriver._fetchone``; None without psycopg 3 (Django also
    runs on psycopg2, which cannot bind on the server)."""
    try:  # psycopg 3 only, so imported here: Django also runs on psycopg2
        from django.db.backends.postgresql import base
        from psycopg import ClientCursor
        from psycopg.types.numeric import Int8

        server_binding: Any = base.ServerBindingCursor
    except (ImportError, ImproperlyConfigured):  # pragma: no cover - psycopg2, or no driver
        return None

    def widened(value: Any) -> Any:
        """``value`` with every int as an ``Int8``: psycopg sends an int (and a list of them)
        as the smallest type that holds it, and a prepared statement is kept per parameter
        types."""
        if type(value) is int:
            return Int8(value)
        if type(value) is list and value and type(value[0]) is int:
            return [Int8(item) for item in value]
        return value

    class PreparedCursor(server_binding):
        """Runs every statement as a server-side prepared statement (psycopg's
        ``prepare=True``), kept per connection by its text and parameter types.

        Django opens its connections with ``prepare_threshold=None`` (psycopg then prepares
        nothing, even when asked); while this cursor executes, the threshold is one no other
        statement reaches by repetition, so only the statements run here are prepared. The
        connection's other cursors (Django's client-side binding) never prepare.

        ``logged``: Django logs the statement (``DEBUG``, ``CaptureQueriesContext``), reading
        its text from ``_query``, which psycopg leaves empty after a prepared execution: it
        then gets the statement with its values, as a client-side cursor would have sent it.
        """

        logged = False
        # Statements sent around this one in the same round trip (``_prepared_in_order``):
        # the logged text is theirs and this one's, joined, as one string would have been
        # (``execute_wrapper`` sees this one's alone, and may read them here).
        around = ("", "")

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            given = params
            if isinstance(params, Mapping):
                # psycopg sends an int as the smallest type that holds it, and a prepared
                # statement is kept per parameter types: one type for every int, one statement.
                params = {k: widened(v) for k, v in params.items()}
            connection = self.connection
            threshold = connection.prepare_threshold
            if threshold is None:
                connection.prepare_threshold = _NEVER_BY_COUNT
            try:
                result = super().execute(query, params, prepare=True, **kwargs)
            finally:
                connection.prepare_threshold = threshold
            if self.logged:
                text = ClientCursor(connection).mogrify(query, given)
                self._query = _Logged(f"{self.around[0]}{text}{self.around[1]}".encode())
            return result

    return PreparedCursor


@functools.cache
def _pipelines_supported() -> bool:
    """Whether statements can be prepared and pipelined (``_prepared_in_order``): psycopg 3 on
    a libpq with pipeline mode (14 or later)."""
    if _PreparedCursor is None:
        return False
    from psycopg import Pipeline  # psycopg 3 only

    return bool(Pipeline.is_supported())


class _Logged:
    """What Django's ``last_executed_query`` reads of a psycopg cursor's ``_query``."""

    __slots__ = ("query",)

    def __init__(self, query: bytes) -> None:
        self.query = query


def _announced_pid(connection: Any) -> int:
    """The backend pid the server announced when ``connection`` (a psycopg 3 or psycopg2
    connection) opened: the server's own, or a pooler's stand-in."""
    info = getattr(connection, "info", None)
    pid = getattr(info, "backend_pid", None)  # psycopg 3 (psycopg2's info has none)
    return int(pid if pid is not None else connection.get_backend_pid())


def _client_cursor_class() -> Any:
    """psycopg 3's client-side binding cursor class; without psycopg 3 (psycopg2) an empty
    tuple, of which nothing is an instance."""
    try:  # psycopg 3 only, so imported here: Django also runs on psycopg2
        from psycopg import ClientCursor
    except ImportError:  # pragma: no cover - psycopg2
        return ()
    return ClientCursor


_ClientCursor: Any = _client_cursor_class()

# The transaction of a limited flow claim open on a connection (``flow_limits_held``), kept on
# the connection wrapper (a thread's own) while it lasts.
_HOLD = "_workqueue_flow_hold"
_SAVEPOINT = "workqueue_flow_claim"
# The limit keys a walk locked whose running jobs the next statement counts (transaction-local).
_COUNTED = "workqueue.flow_counted"


def _starts(value: Any) -> list[list[float]]:
    """A ``FlowLimit.starts`` as read (Django leaves jsonb as text)."""
    return json.loads(value) if isinstance(value, str) else value or []


class _PendingHold(FlowHold):
    """A hold whose BEGIN and COMMIT (or SAVEPOINT and RELEASE) go with its statements."""

    def __init__(self, begin: str, end: str) -> None:
        super().__init__()
        self.start, self.end = begin, end
        self.begun = self.ended = False


# A prepare threshold no statement reaches by repetition.
_NEVER_BY_COUNT = 2**62
_PreparedCursor: Any = _prepared_cursor_class()

CHANNEL = "django_workqueue"  # payload: a queue with new ready jobs
ABORT_CHANNEL = "django_workqueue_abort"  # payload: "<job id>:<abort reason>"

# lock_timeout, statement cancellation and a deadlock PostgreSQL broke by aborting this side:
# the session is fine, the statement (its transaction) can be retried.
_DEADLOCK = "40P01"
_TRANSIENT_SQLSTATES = frozenset({"55P03", "57014", _DEADLOCK})

# The database clock, unless a caller (a test) passes its own ``now`` parameter.
CLOCK = "statement_timestamp()"
NOW = f"COALESCE(%(now)s::timestamptz, {CLOCK})"
# The clock as the text of an error entry's "at": one format on every vendor (UTC, ms, "Z").
ISO_CLOCK = f"""to_char({CLOCK} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')"""
# An outcome's last progress report, stored by the same write.
_PROGRESS_FROM_V = (
    "progress_current = CASE WHEN v.has_progress THEN v.pcurrent ELSE j.progress_current END, "
    "progress_total = CASE WHEN v.has_progress THEN v.ptotal ELSE j.progress_total END, "
    "progress_message = CASE WHEN v.has_progress THEN v.pmessage ELSE j.progress_message END,"
    "progress_details = CASE WHEN v.has_progress THEN v.pdetails ELSE j.progress_details END,"
)

_TERMINAL = frozenset(status.value for status in TERMINAL)

# A worker's writes wait at most this long for a row another session holds locked; what they
# wanted is kept and written on a later pass instead of stalling the worker's control loop.
LOCK_TIMEOUT = "2s"
_IN_ERROR = 3  # libpq's PQTRANS_INERROR: a statement of the open transaction failed
# The condition that sets it, in the first CTE of a write (an uncorrelated subquery: run once,
# before the statement reads a row, so before any wait), for the rest of the transaction only
# (set_config's is_local): the outcome's workflow effects written after it in the same
# transaction are bounded too, and nothing is left on the session, which a transaction pooler
# would hand to another client.
_BOUNDED_LOCK_WAITS = f"(SELECT set_config('lock_timeout', '{LOCK_TIMEOUT}', true)) IS NOT NULL"
# The statements around one that reads ready jobs in wq_job_flow's order
# (``_fetch_in_index_order``): save the planner's settings, turn sorting off, and JIT compilation
# too, which a disabled sort's cost penalty (it stays in the total of a plan whose sort cannot
# be avoided) would otherwise start, spending a quarter of a second compiling a statement that
# runs in a millisecond; after it, put the saved settings back. All transaction-local
# (``set_config``'s is_local), in a custom variable of their own while saved.
_PLAN_SAVE = (
    "SELECT set_config('workqueue.enable_sort', current_setting('enable_sort'), true), "
    "set_config('workqueue.jit', current_setting('jit'), true)"
)
_PLAN_IN_ORDER = "SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true)"
_PLAN_RESTORE = (
    "SELECT set_config('enable_sort', current_setting('workqueue.enable_sort'), true), "
    "set_config('jit', current_setting('workqueue.jit'), true)"
)

# A prepared statement this connection made is not on the server session that runs it, or one
# of its name is there already: a pooler in transaction mode without prepared-statement support
# hands each transaction whichever server connection is free.
_PREPARED_STATEMENT_LOST = frozenset({"26000", "42P05"})

_RETURNING = (
    "id, task_name, queue, priority, attempt, max_attempts, attempts_charged, lease_seconds, "
    "deadline"
)
# What every claim (plain or batch) writes to a job it leases (``j``), and returns of it in the
# shape of ``ClaimedJob``'s parameters: the attempt starts now.
_LEASE = (
    f"status = 'running', attempt = j.attempt + 1, lease_owner = %(owner)s, started_at = {NOW}, "
    f"lease_expires_at = {NOW} + j.lease_seconds * interval '1 second', claimed_ahead = false"
)
# A claim into the worker's local buffer (``claim(ahead=True)``): leased alike, marked not begun.
_LEASE_AHEAD = _LEASE.replace("claimed_ahead = false", "claimed_ahead = true")
# Only a job never claimed before is claimed ahead (see ``Driver.claim``).
_NEVER_CLAIMED = "AND attempt = 0 "
_CLAIMED = (
    f"{', '.join('j.' + c for c in _RETURNING.split(', '))}, j.deadline < {NOW}, "
    f"jsonb_build_array(j.args, j.kwargs)::text, j.workflow_id, j.input_shape::text"
)


# The rows a write of outcomes answers for: one per outcome, not per id (a batch may hold two
# attempts of one job).
_RECORDED_FROM = "FROM v LEFT JOIN written AS w ON w.id = v.id AND w.attempt = v.attempt"


def _by_id(alias: str, rows: str) -> str:
    """A condition that reaches the jobs (``alias``) whose ids CTE ``rows`` holds through the
    primary key only: one array of ids probing it. A join on ``id`` may be planned as a scan
    of an index on ``status`` (every running job of every worker, in a fleet) or, where the
    table was small when a kept generic plan was made, of the whole table; the array's probe
    holds whatever the estimates (docs/explanation/performance.md)."""
    return f"{alias}.id = ANY (ARRAY(SELECT id FROM {rows}))"


# A worker's leases (job id, attempt), given as two arrays (``_lease_params``).
_LEASES = "(id, attempt) IN (SELECT * FROM unnest(%(ids)s::bigint[], %(attempts)s::integer[]))"


def _lease_params(owner: str, leases: Sequence[tuple[int, int]]) -> dict[str, Any]:
    return {
        "owner": owner,
        "ids": [job_id for job_id, _ in leases],
        "attempts": [attempt for _, attempt in leases],
    }


def _float8_array(values: Iterable[float]) -> str:
    """``values`` as a ``float8[]`` literal of a statement's text. ``repr`` writes the
    shortest text that reads back as the same float, and PostgreSQL reads it back exactly:
    to the last bit, as a bound parameter would be."""
    return "'{" + ",".join(map(repr, map(float, values))) + "}'::float8[]"


def _claim_order(job: ClaimedJob) -> tuple[int, int]:
    """The order a claim's jobs start in: priority first, then id."""
    return (-job.priority, job.id)


def _recorded_from(result: Iterable[Sequence[Any]]) -> Recorded:
    """A fenced write's answer (``_recorded``'s columns, or a progress write's first four).

    One loop over the rows: a worker's pass reads one per outcome on its control thread."""
    written: set[tuple[int, int]] = set()
    busy: set[int] = set()
    ended: list[Ended] = []
    timings: list[Timing] = []
    for row in result:
        if not row[3]:
            busy.add(row[0])
        if len(row) > 4 and row[4] in _TERMINAL:
            ended.append(Ended(row[0], row[4], row[5]))
        if row[2]:
            written.add((row[0], row[1]))
            if len(row) > 4:
                timings.append(Timing(row[0], row[1], row[6], row[7], row[4], row[8], row[9]))
    return Recorded(written=written, busy=busy, ended=ended, timings=timings)


class PostgresDriver(Driver):
    vendor = "postgresql"
    supports_listen_notify = True
    # psycopg 3 only: on psycopg2 (if Django runs on it) a pass keeps its transaction.
    supports_record_and_claim = _PreparedCursor is not None

    def __init__(self, alias: str) -> None:
        super().__init__(alias)
        self._insert_sql: dict[tuple[bool, bool], str] = {}
        # record_and_claim's statement and the bounds it was made for.
        self._record_and_claim_cache: tuple[Sequence[float], Sequence[object], str] | None = None

    def insert(
        self,
        job: NewJob,
        payloads: Sequence[tuple[str, str]] | Encoded,
        keys: Sequence[str | None] | None = None,
    ) -> Inserted:
        # The jobs' own values are one jsonb parameter unpacked into rows (their arguments
        # embedded as already-encoded JSON); what they share is plain parameters. One
        # statement, one round trip, any number of jobs; the same statement sends the NOTIFY,
        # which PostgreSQL delivers at commit, folding duplicates. Every parameter is cast, so
        # that the statement has one shape whatever the values (it is prepared once per
        # connection, see ``_fetchone``).
        single = not isinstance(payloads, Encoded) and len(payloads) == 1
        shape = (single, keys is not None)
        sql = self._insert_sql.get(shape)
        if sql is None:
            sql = self._insert_sql[shape] = self._insert_statement(single, keys is not None)
        params = job.params(datetime.isoformat)
        params["channel"] = CHANNEL
        if isinstance(payloads, Encoded):
            params["batch"] = payloads.text
        elif single:
            params["args"], params["kwargs"] = payloads[0]
            params["key"] = None if keys is None else keys[0]
            params["fkey"] = None if job.flow_keys is None else job.flow_keys[0]
        else:
            params["batch"] = job.batch(payloads, keys)
        ids, written, run_after, enqueued_at, deadline, status, window, _ = self._fetchone(
            sql, params
        )
        return Inserted(
            ids=ids or [], run_after=run_after, enqueued_at=enqueued_at, deadline=deadline,
            status=status, unique_window=window,
            positions=None if keys is None else inserted_positions(keys, written or []),
        )  # fmt: skip

    def _insert_statement(self, single: bool, keyed: bool) -> str:
        """The insert of ``insert``: one row given as plain parameters (``single``) or a
        batch in one jsonb parameter; ``keyed``: rows meeting a unique key are skipped. Built
        once per shape: the same text every call, as a prepared statement needs."""
        if single:  # the common single enqueue: no batch to unpack
            rows = (
                "(VALUES (%(args)s::jsonb, %(kwargs)s::jsonb, %(key)s::text, %(fkey)s::text, 1)) "
                "AS b(args, kwargs, key, fkey, n)"
            )
        else:
            rows = (
                "(SELECT e->0, e->1, e->>2, e->>3, n FROM jsonb_array_elements(%(batch)s::jsonb) "
                "WITH ORDINALITY AS e(e, n)) AS b(args, kwargs, key, fkey, n)"
            )
        # With per-row keys a conflict skips the row (any unique constraint: the active key or
        # the unique_for window); a concurrent insert of the same key is waited for, then
        # skipped if it committed. The caller finds the holders.
        on_conflict = "ON CONFLICT DO NOTHING " if keyed else ""
        # The job is scheduled when its run_after is later than the clock: claims never see it
        # until the promoter makes it ready. A unique_for window starts at a multiple of its
        # length on the database's clock (epoch seconds), so every session agrees on it.
        return (
            f"WITH inserted AS (INSERT INTO {self.table} (task_name, queue, priority, "
            f"max_attempts, lease_seconds, unique_key, unique_window, run_after, deadline, "
            f"args, kwargs, status, attempt, errors, progress_message, workflow_id, waiting_on, "
            f"prerequisites_succeeded, run_condition, input_shape, flow_key) "
            f"SELECT %(task_name)s::text, %(queue)s::text, %(priority)s::int, "
            f"%(max_attempts)s::int, %(lease_seconds)s::int, "
            f"COALESCE(b.key, %(unique_key)s::text), "
            f"to_timestamp(floor(extract(epoch FROM {CLOCK}) / %(unique_for)s::int) "
            f"  * %(unique_for)s::int), t.run_after, "
            f"COALESCE(%(deadline_at)s::timestamptz, "
            f"  {CLOCK} + make_interval(secs => %(deadline_in)s::float8)), "
            f"b.args, b.kwargs, "
            f"CASE WHEN %(waiting_on)s::int > 0 THEN 'blocked' "
            f"  WHEN t.run_after > {CLOCK} THEN 'scheduled' ELSE 'ready' END, "
            f"0, '[]'::jsonb, '', %(workflow_id)s::bigint, %(waiting_on)s::int, 0, "
            f"%(run_condition)s::text, %(input_shape)s::jsonb, b.fkey "
            f"FROM {rows} CROSS JOIN (SELECT COALESCE(%(run_at)s::timestamptz, "
            f"  {CLOCK} + make_interval(secs => %(delay)s::float8)) AS run_after) AS t "
            f"ORDER BY b.n {on_conflict}"
            f"RETURNING id, unique_key, run_after, enqueued_at, deadline, status, "
            f"unique_window), "
            f"notified AS (SELECT pg_notify(%(channel)s::text, %(queue)s::text)) "
            f"SELECT array_agg(id ORDER BY id), array_agg(unique_key ORDER BY id), "
            f"min(run_after), min(enqueued_at), min(deadline), min(status), "
            f"min(unique_window), (SELECT count(*) FROM notified) FROM inserted"
        )

    def _fetchone(self, sql: str, params: Mapping[str, Any]) -> Any:
        """Run an enqueue statement on this thread's connection and return its first row
        (prepared, see ``_prepared``)."""
        with self._prepared(sql, params) as cursor:
            return cursor.fetchone()

    def _fetchall(self, sql: str, params: Mapping[str, Any]) -> list[Any]:
        """Run a claim on this thread's connection and return its rows (prepared, see
        ``_prepared``): a worker woken by a NOTIFY waits on it before its job starts, and
        planning the claim cost more than running it (docs/explanation/performance.md)."""
        with self._prepared(sql, params) as cursor:
            return cursor.fetchall()

    @contextlib.contextmanager
    def _prepared(self, sql: str, params: Mapping[str, Any]) -> Iterator[Any]:
        """Run ``sql`` on this thread's connection and yield its cursor: with
        ``WORKQUEUE["PREPARED_STATEMENTS"]`` (and psycopg 3) on a cursor that binds its
        parameters on the server and runs each statement prepared, so the server parses and
        plans it once per connection instead of on every call; otherwise on Django's own
        cursor (client-side binding). Either way through Django's cursor wrapper: the
        statement joins the open transaction, errors are Django's, and it is logged and
        instrumented (``execute_wrapper``) like any query. Only statements whose text is the
        same on every call come here: the enqueue's insert, the plain claim, a worker's pass."""
        db = self.connection
        if not conf.PREPARED_STATEMENTS or _PreparedCursor is None:
            with db.cursor() as cursor:
                cursor.execute(sql, params)
                yield cursor
            return
        db.close_if_health_check_failed()  # as Django's cursor(): CONN_HEALTH_CHECKS
        db.ensure_connection()
        db.validate_thread_sharing()
        with db.wrap_database_errors:
            cursor = self._prepared_cursor(db)
        wrapper = db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)
        try:
            wrapper.execute(sql, params)
        except DatabaseError as exc:
            self._raise_if_prepared_lost(exc)
            raise
        yield wrapper

    def _raise_if_prepared_lost(self, exc: DatabaseError) -> None:
        if getattr(exc.__cause__, "sqlstate", None) in _PREPARED_STATEMENT_LOST:
            raise ImproperlyConfigured(
                f"a prepared statement was lost between server connections "
                f"({str(exc).strip()}): the jobs database {self.alias!r} goes through a "
                f"pooler in transaction mode without prepared-statement support (PgBouncer "
                f"before 1.21, or max_prepared_statements = 0). Set "
                f"WORKQUEUE['PREPARED_STATEMENTS'] = False, or upgrade to PgBouncer 1.22+ "
                f"with max_prepared_statements set."
            ) from exc

    def _prepared_in_order(
        self,
        sql: str,
        params: Mapping[str, Any],
        begin: Sequence[str] = (),
        end: Sequence[str] = (),
        then: str | None = None,
        *,
        in_order: bool = True,
    ) -> tuple[list[Any], list[Any]] | None:
        """The rows of ``sql`` (a statement that reads ready jobs in wq_job_flow's order, as
        ``_fetch_in_index_order``'s), and of ``then`` if given (a statement without parameters
        run after ``sql``: after the settings are put back inside a caller's transaction; in
        the flow claim's own, still with sorts and JIT off, harmless for the statements it
        sends there), sent prepared in psycopg 3's pipeline mode: one
        round trip (one Sync) for ``begin``, the settings' save and sorts off, ``sql``,
        the settings put back, ``then`` and ``end``. None without
        ``WORKQUEUE["PREPARED_STATEMENTS"]`` or psycopg 3: the caller sends its statements in
        one string, bound on the client.

        Prepared, a statement is parsed once per connection and, after its first five calls,
        runs on its kept generic plan (the statements are written for one: their lists and
        limits are uncorrelated subqueries, estimated alike by every plan): a flow claim's
        walk and claim were planned on every call, which cost as much as running them
        (docs/explanation/performance.md). A statement is planned (its custom plans, its
        generic one, again after an ANALYZE) when it runs, after the settings' statements in
        the same pipeline: always with sorting off, as before. Until the Sync the statements
        are one transaction (the implicit one, outside a transaction), so the settings end
        with it as they did. Only ``sql`` goes through Django's cursor wrapper (logged, and
        seen by ``execute_wrapper``), as the one string did; the others are the same on every
        call. In a pipeline a statement is only queued when the wrapper runs: Django's debug
        timing and an ``execute_wrapper`` see it queued (no time, no result yet), not run.
        ``in_order=False``: a statement that reads no ready jobs (a rate's starts'
        write), sent with its edges only, no settings; a statement that returns no rows
        gives an empty list."""
        if not conf.PREPARED_STATEMENTS or not _pipelines_supported():
            return None
        db = self.connection
        db.close_if_health_check_failed()  # as Django's cursor(): CONN_HEALTH_CHECKS
        db.ensure_connection()
        db.validate_thread_sharing()
        raw = db.connection
        from psycopg import Cursor  # psycopg 3 only (a _PreparedCursor exists only with it)

        with db.wrap_database_errors:
            cursor = self._prepared_cursor(db)
            side, edges = _PreparedCursor(raw), Cursor(raw)
            counted = _PreparedCursor(raw) if then is not None else None
        wrapper = db.make_debug_cursor(cursor) if db.queries_logged else db.make_cursor(cursor)
        # The settings need saving and putting back only in a caller's transaction: in the
        # pipeline's own (implicit, or the flow claim's BEGIN ... COMMIT) they end with it.
        caller = db.in_atomic_block or not db.get_autocommit()
        save = ((_PLAN_SAVE, _PLAN_IN_ORDER) if caller else (_PLAN_IN_ORDER,)) if in_order else ()
        restore = (_PLAN_RESTORE,) if caller and in_order else ()
        after = (*restore, *((then,) if then is not None else ()), *end)
        cursor.around = ("".join(f"{s}; " for s in (*begin, *save)),
                         "".join(f"; {s}" for s in after))  # fmt: skip
        try:
            with db.wrap_database_errors, raw.pipeline():
                for statement in begin:
                    edges.execute(statement)
                for statement in save:
                    side.execute(statement)
                try:
                    wrapper.execute(sql, params)
                except BaseException:
                    # Refused before it was sent (a value psycopg cannot send, an
                    # execute_wrapper that raises): the settings sent before it would outlive
                    # it in the caller's transaction. A server's error rolls them back anyway.
                    with contextlib.suppress(Exception):
                        for statement in restore:
                            side.execute(statement)
                    raise
                for statement in restore:
                    side.execute(statement)
                if counted is not None and then is not None:
                    counted.execute(then)
                for statement in end:
                    edges.execute(statement)
        except DatabaseError as exc:
            self._raise_if_prepared_lost(exc)
            raise
        finally:
            cursor.around = ("", "")
        with db.wrap_database_errors:
            rows = cursor.fetchall() if cursor.description is not None else []
            return rows, counted.fetchall() if counted is not None else []

    @staticmethod
    def _prepared_cursor(db: Any) -> Any:
        """The prepared-statement cursor of ``db``'s current psycopg connection: made once per
        connection and kept on the wrapper (a thread's own), since making one costs about as
        much Python as the statement it runs."""
        cursor, timezone = getattr(db, "_workqueue_prepared_cursor", (None, None))
        if (
            cursor is None
            or cursor.connection is not db.connection
            or cursor.closed
            or timezone != db.timezone  # TIME_ZONE changed (override_settings)
        ):
            cursor = _PreparedCursor(db.connection)
            # As Django's create_cursor: the connection's time zone, if it differs. Imported
            # here: psycopg 3 only (a _PreparedCursor exists only with psycopg 3).
            from django.db.backends.postgresql.psycopg_any import register_tzloader
            from psycopg.postgres import types
            from psycopg.pq import Format

            oid = types["timestamptz"].oid
            if db.timezone != db.connection.adapters.get_loader(oid, Format.TEXT).timezone:
                register_tzloader(db.timezone, cursor)
            db._workqueue_prepared_cursor = (cursor, db.timezone)
        cursor.logged = db.queries_logged
        return cursor

    def replace_waiting(self, job: NewJob, key: str, payload: tuple[str, str]) -> int | None:
        # Row-locking UPDATE: a claim that locked the row first makes this wait, then see the
        # job running and leave it; a claim coming second skips the locked row.
        sql = (
            f"WITH t AS (SELECT COALESCE(%(run_at)s::timestamptz, "
            f"  {CLOCK} + make_interval(secs => %(delay)s::float8)) AS run_after) "
            f"UPDATE {self.table} AS j SET args = %(args)s::jsonb, kwargs = %(kwargs)s::jsonb, "
            f"run_after = t.run_after, flow_key = COALESCE(%(fkey)s::text, j.flow_key), "
            f"deadline = COALESCE(%(deadline_at)s::timestamptz, "
            f"  {CLOCK} + make_interval(secs => %(deadline_in)s::float8), j.deadline), "
            f"status = CASE WHEN j.status IN ('ready', 'scheduled') THEN "
            f"  CASE WHEN t.run_after > {CLOCK} THEN 'scheduled' ELSE 'ready' END "
            f"  ELSE j.status END "
            f"FROM t WHERE j.task_name = %(task_name)s AND j.unique_key = %(key)s "
            f"AND j.status IN ('blocked', 'scheduled', 'ready', 'held') RETURNING j.id"
        )
        params = job.params(datetime.isoformat)
        params["key"] = key
        params["args"], params["kwargs"] = payload
        params["fkey"] = None if job.flow_keys is None else job.flow_keys[0]
        row = self._fetchone(sql, params)
        return None if row is None else row[0]

    def _fetch_in_index_order(
        self, sql: str, params: Mapping[str, Any], *, prepared: bool = False
    ) -> list[Any]:
        """The rows of ``sql``, a statement that reads ready jobs in the order of wq_job_flow
        (key after key, or a key's jobs in claim order), planned with sorting off.

        The planner picks between that index, read in order, and another index on ``status``
        (wq_job_active) read whole and then sorted, by how many ready rows the table's
        statistics promise. Statistics gathered while the table was empty or
        held finished jobs only promise about one, until autovacuum analyzes the table again,
        which may take a while (10% of its rows must change first): a burst of jobs then gets
        the sorted plan, and every step of the walk reads all the queue's ready rows (on
        PostgreSQL 15, a claim of 8 among 20,000 ready jobs on 2,000 keys: 125 ms instead of
        3). With sorts off, the ordered read is the one plan without a penalty, whatever the
        statistics.

        The settings are saved before and put back after the statement, all in one round trip
        on Django's client-side binding (one implicit transaction in autocommit), so nothing
        outlives the statement: neither on the session a transaction pooler hands on, nor in
        a caller's open transaction (a test's, around ``testing.drain``). A cursor that binds
        on the server (or psycopg2) runs one statement per call: the four go one by one, in a
        transaction (the caller's if there is one). ``prepared``: a statement whose text is the
        same on every call, run prepared in one pipeline where it can be
        (``_prepared_in_order``).
        """
        with self.connection.cursor() as cursor:
            if isinstance(cursor.cursor, _ClientCursor):
                with self._flow_edges(closing=True) as (begin, end):
                    if prepared:
                        done = self._prepared_in_order(sql, params, begin, end)
                        if done is not None:
                            return done[0]
                    statements = (*begin, _PLAN_SAVE, _PLAN_IN_ORDER, sql, _PLAN_RESTORE, *end)
                    cursor.execute("; ".join(statements), params)
                    for _ in range(len(begin) + 2):
                        cursor.nextset()
                    return cursor.fetchall()
        atomic = transaction.atomic(using=self.alias, savepoint=False)
        with atomic, self.connection.cursor() as cursor:
            cursor.execute(_PLAN_SAVE)
            cursor.execute(_PLAN_IN_ORDER)
            cursor.execute(sql, params)
            rows = cursor.fetchall()
            cursor.execute(_PLAN_RESTORE)
        return rows

    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        owner: str,
        now: datetime | None = None,
        *,
        ahead: bool = False,
    ) -> list[ClaimedJob]:
        sql = f"WITH {self._claim_ctes(ahead)} SELECT * FROM claimed"
        params = {"now": now, "limit": limit, "owner": owner, "queues": list(queues)}
        jobs = [ClaimedJob(*row) for row in self._fetchall(sql, params)]
        jobs.sort(key=_claim_order)
        return jobs

    def _claim_ctes(self, ahead: bool = False) -> str:
        """The claim's CTEs: ``picked`` and ``claimed`` (RETURNING ``ClaimedJob``'s columns).

        One LATERAL branch per queue, each walking the partial index wq_job_claim in order and
        stopping after `limit` rows; a single `queue = ANY(...)` scan would sort the whole
        ready set. Rows another worker holds are skipped, never waited for. MATERIALIZED keeps
        the candidate set an optimisation fence: computed and locked once, before the UPDATE.
        A paused queue (a Queue row with paused_at) is dropped before its branch runs: one
        primary-key probe of a tiny table per queue, in this statement, so a pause holds
        from the next claim of every worker on, with no cache to refresh or notify.

        Written to be planned once (``_prepared``): PostgreSQL keeps a prepared statement's
        generic plan once its estimated cost is no dearer than the custom plans' it made for
        the first five calls. Planned with their values, the queues and the limit made every
        custom plan look cheaper (the generic plan guesses ten queues and 10% of the ready
        rows under a ``LIMIT $n``), so each call was planned again, which cost more than
        running it (docs/explanation/performance.md, "The pass planned once"). As
        uncorrelated subqueries (``(SELECT %(limit)s)``, run once per statement) they are
        unknown to every plan, custom or generic, so both are estimated alike and the generic
        one is kept. The limit's 10% guess then overestimates ``picked``: the UPDATE reads
        its rows as one array probing the primary key, a plan that holds whatever the
        estimate, where a join could hash the whole table to meet a few dozen rows."""
        return (
            f"picked AS MATERIALIZED ("
            f"SELECT c.id FROM (SELECT u.name FROM unnest((SELECT %(queues)s::text[])) AS u(name) "
            f"WHERE NOT EXISTS (SELECT 1 FROM {self.queue_table} AS p "
            f"WHERE p.name = u.name AND p.paused_at IS NOT NULL)) AS q CROSS JOIN LATERAL ("
            f"SELECT id, priority, run_after FROM {self.table} "
            f"WHERE status = 'ready' AND flow_key IS NULL AND queue = q.name "
            f"AND run_after <= {NOW} {_NEVER_CLAIMED if ahead else ''}"
            f"ORDER BY priority DESC, run_after, id LIMIT (SELECT %(limit)s::bigint) "
            f"FOR UPDATE SKIP LOCKED) AS c "
            f"ORDER BY c.priority DESC, c.run_after, c.id LIMIT (SELECT %(limit)s::bigint)), "
            f"claimed AS (UPDATE {self.table} AS j SET {_LEASE_AHEAD if ahead else _LEASE} "
            # `status || ''`: as in claim_flow, the picked rows by primary key only.
            f"WHERE j.id = ANY (ARRAY(SELECT id FROM picked)) AND j.status || '' = 'ready' "
            f"RETURNING {_CLAIMED})"
        )

    def _flow_walk(
        self, queues: Sequence[str], after: str, limit: int
    ) -> tuple[str, str, dict[str, Any]]:
        """The walk of ``flow_keys``: its CTEs, the SELECT of its groups, its parameters."""

        # A skip scan of wq_job_flow: each step seeks the first ready row of a key greater
        # than the last one found (one index probe per key), so a claim costs the same next
        # to thousands of keys and millions of jobs as next to one. Two walks, from the cursor
        # on and then from the start up to the cursor; recursive CTEs run as their rows are
        # read, so under the LIMIT the second walks only as far as the first came short.
        # Keys compare in the database's collation, as the index orders them; with several
        # queues the walks take one key of each queue in turn.
        def walk(name: str, low: str, high: str) -> str:
            step = (
                f"SELECT flow_key, task_name FROM {self.table} WHERE status = 'ready' "
                f"AND queue = {{queue}} AND flow_key > {{low}} AND {high} "
                f"ORDER BY flow_key LIMIT 1"
            )
            return (
                f"{name}(queue, key, task, n) AS ("
                f"SELECT q.name, f.flow_key, f.task_name, 1 FROM served AS q CROSS JOIN LATERAL ("
                + step.format(queue="q.name", low=low)
                + f") AS f UNION ALL SELECT w.queue, f.flow_key, f.task_name, w.n + 1 "
                f"FROM {name} AS w CROSS JOIN LATERAL ("
                + step.format(queue="w.queue", low="w.key")
                + ") AS f WHERE w.n < %(steps)s)"
            )

        sql = (
            f"WITH RECURSIVE served AS (SELECT u.name FROM unnest((SELECT %(queues)s::text[])) "
            f"AS u(name) WHERE NOT EXISTS (SELECT 1 FROM {self.queue_table} AS p "
            f"WHERE p.name = u.name AND p.paused_at IS NOT NULL)), "
            f"{walk('ahead', '%(after)s', 'true')}, "
            f"{walk('behind', '%(first)s', 'flow_key <= %(after)s')}"
        )
        walked = (
            "SELECT queue, key, task FROM ahead UNION ALL SELECT queue, key, task FROM behind "
            "LIMIT (SELECT %(limit)s::bigint)"
        )
        params: dict[str, Any] = {"queues": list(queues), "limit": limit, "steps": limit,
                                  "after": after, "first": ""}  # fmt: skip
        return sql, walked, params

    def flow_keys(
        self, queues: Sequence[str], after: str, limit: int, *, count: int = 0
    ) -> list[FlowGroup]:
        walks, walked, params = self._flow_walk(queues, after, limit)
        rows = self._fetch_in_index_order(f"{walks} {walked}", params, prepared=True)
        return [FlowGroup(*row) for row in rows]

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
        if getattr(self.connection, _HOLD, None) is not hold:  # the generic atomic block
            return super().walk_flow_limits(hold, queues, after, limit, limited, prefix)
        # One round trip: BEGIN, the walk with the lock of its limit keys' rows (made for keys
        # seen for the first time) in one statement, and the count of their running jobs in
        # the next (see _lock_limits), which finds the keys the first locked in a
        # transaction-local setting.
        walks, walked, params = self._flow_walk(queues, after, limit)
        limits = self.connection.ops.quote_name(FlowLimit._meta.db_table)
        sql = (
            f"{walks}, walked AS MATERIALIZED (SELECT w.*, row_number() OVER () AS n "
            f"FROM ({walked}) AS w), "
            f"wanted AS MATERIALIZED (SELECT DISTINCT key, task = ANY(%(counted)s::text[]) "
            f"AS counted FROM walked WHERE task = ANY(%(limited)s::text[]) "
            f"AND starts_with(key, %(prefix)s)), "
            f"{self._lock_limits(limits, '(SELECT key FROM wanted)')}, "
            f"stash AS (SELECT set_config('{_COUNTED}', COALESCE((SELECT jsonb_agg(l.key) "
            f"FROM locked AS l JOIN wanted AS k ON k.key = l.key WHERE k.counted), "
            f"'[]')::text, true) AS done) "
            f"SELECT w.queue, w.key, w.task, l.key IS NOT NULL, l.starts, {CLOCK} "
            f"FROM walked AS w CROSS JOIN stash LEFT JOIN locked AS l ON l.key = w.key "
            f"ORDER BY w.n"
        )
        # An empty walk may never read `stash`: the setting is then unset, or empty, or a
        # previous claim's in this transaction; only the keys locked now are read from it.
        running_count = self._count_running(
            f"jsonb_array_elements_text(COALESCE(NULLIF(current_setting('{_COUNTED}', true), "
            f"''), '[]')::jsonb)"
        )
        params.update(
            limited=[name for name in limited], counted=[n for n, c in limited.items() if c],
            prefix=prefix,
        )  # fmt: skip
        with self.connection.cursor() as cursor, self._flow_edges(closing=False) as (begin, _):
            done = self._prepared_in_order(sql, params, begin, then=running_count)
            if done is not None:
                rows, counts = done
                running = dict(counts)
            else:
                statements = (*begin, _PLAN_SAVE, _PLAN_IN_ORDER, sql, _PLAN_RESTORE,
                              running_count)  # fmt: skip
                cursor.execute("; ".join(statements), params)
                for _ in range(len(begin) + 2):
                    cursor.nextset()
                rows = cursor.fetchall()
                cursor.nextset()
                cursor.nextset()
                running = dict(cursor.fetchall())
        groups = [FlowGroup(queue, key, task) for queue, key, task, *_ in rows]
        locked = {key: (_starts(starts), int(running.get(key, 0)))
                  for _, key, _, held, starts, _ in rows if held}  # fmt: skip
        hold.clock = rows[0][5] if rows else None  # a rate's clock: no round trip of its own
        return groups, locked

    @contextlib.contextmanager
    def flow_limits_held(self) -> Iterator[FlowHold]:
        # The transaction's edges travel with its statements: BEGIN in the walk's and lock's
        # round trip, COMMIT in the last statement's (the claim's, or the starts' write), so a
        # limited claim costs two round trips, not five (three with a rate). Inside a
        # caller's transaction, a savepoint the same way (the rows then stay locked until the
        # caller commits). A cursor that binds on the server sends one statement per call:
        # there, the generic atomic block.
        db = self.connection
        db.ensure_connection()
        with db.cursor() as cursor:
            client = isinstance(cursor.cursor, _ClientCursor)
        if not client or getattr(db, _HOLD, None) is not None:
            with super().flow_limits_held() as hold:
                yield hold
            return
        if db.in_atomic_block or not db.get_autocommit():
            release = f"RELEASE SAVEPOINT {_SAVEPOINT}"
            edges = (f"SAVEPOINT {_SAVEPOINT}", release,
                     f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}; {release}")  # fmt: skip
        else:
            edges = ("BEGIN", "COMMIT", "ROLLBACK")
        hold = _PendingHold(begin=edges[0], end=edges[1])
        setattr(db, _HOLD, hold)
        try:
            yield hold
            if hold.begun and not hold.ended:
                with db.cursor() as cursor:
                    cursor.execute(hold.end)
                hold.ended = True
        except BaseException:
            if hold.begun and not hold.ended:
                # The statement that failed left the transaction (savepoint) open, aborted.
                with contextlib.suppress(DatabaseError), db.cursor() as cursor:
                    cursor.execute(edges[2])
            raise
        finally:
            delattr(db, _HOLD)

    @contextlib.contextmanager
    def _flow_edges(self, closing: bool) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
        """The statements to send before and after the next one of a ``flow_limits_held``
        transaction: its BEGIN if not sent yet and, when ``closing`` and the claim is the last
        statement, its COMMIT. Nothing outside such a transaction."""
        hold = getattr(self.connection, _HOLD, None)
        alone = hold is not None and not hold.begun and closing and hold.claim_last
        if hold is None or hold.ended or alone:  # alone: the transaction's only statement
            yield (), ()
            if hold is not None and alone:
                hold.ended = True
            return
        begin = () if hold.begun else (hold.start,)
        end = (hold.end,) if closing and hold.claim_last else ()
        hold.begun = True  # sent: if the statements fail, the transaction is rolled back
        yield begin, end
        hold.ended = bool(end)

    def lock_flow_limits(
        self, keys: Sequence[str], counted: Collection[str]
    ) -> dict[str, tuple[list[list[float]], int]]:
        if not keys:
            return {}
        limits = self.connection.ops.quote_name(FlowLimit._meta.db_table)
        # The rows made for keys seen for the first time and the others locked, by one
        # statement; the running jobs counted by the next (see _lock_limits).
        lock = (
            f"WITH {self._lock_limits(limits, '(SELECT unnest(%(keys)s::text[]))')} "
            f"SELECT key, starts FROM locked"
        )
        count = self._count_running("unnest(%(counted)s::text[])")
        counted = [key for key in keys if key in counted]
        params = {"keys": list(keys), "counted": counted}
        with self.connection.cursor() as cursor, self._flow_edges(closing=False) as (begin, _):
            if isinstance(cursor.cursor, _ClientCursor):
                cursor.execute("; ".join((*begin, lock, count)), params)
                for _ in begin:
                    cursor.nextset()
                rows = cursor.fetchall()
                cursor.nextset()
                running = dict(cursor.fetchall())
            else:
                cursor.execute(lock, params)
                rows = cursor.fetchall()
                cursor.execute(count, params)
                running = dict(cursor.fetchall())
        return {key: (_starts(starts), int(running.get(key, 0))) for key, starts in rows}

    def _lock_limits(self, limits: str, keys: str) -> str:
        """The CTEs that lock the ``FlowLimit`` rows of ``keys`` (a subquery):
        ``locked(key, starts)``. Rows of keys seen for the first time are made (a conflict:
        another session made it meanwhile, and has it: the key is left alone this time), the
        others locked SKIP LOCKED. Running jobs are counted by the next statement
        (``_count_running``): its snapshot is taken after the locks, so it sees every claim of
        these keys that committed before them; this statement's own snapshot, taken before its
        first lock, could miss one committed in between."""
        return (
            f"made AS (INSERT INTO {limits} AS l (key, starts) "
            f"SELECT u.key, '[]'::jsonb FROM {keys} AS u(key) "
            f"WHERE NOT EXISTS (SELECT 1 FROM {limits} AS e WHERE e.key = u.key) "
            f"ORDER BY u.key ON CONFLICT (key) DO NOTHING RETURNING l.key, l.starts), "
            # No ORDER BY: SKIP LOCKED never waits, so the order cannot deadlock, and under
            # the walk's settings (sorts off) the order would read every row of the table.
            f"held AS (SELECT l.key, l.starts FROM {limits} AS l WHERE l.key IN {keys} "
            f"FOR UPDATE OF l SKIP LOCKED), "
            f"locked AS MATERIALIZED (SELECT key, starts FROM made "
            f"UNION ALL SELECT key, starts FROM held)"
        )

    def _count_running(self, keys: str) -> str:
        return (
            f"SELECT u.key, (SELECT count(*) FROM {self.table} AS j WHERE j.status = 'running' "
            f"AND j.flow_key IS NOT NULL AND j.flow_key = u.key) FROM {keys} AS u(key)"
        )

    def write_flow_starts(self, starts: Mapping[str, list[list[float]]]) -> None:
        if not starts:
            return
        limits = self.connection.ops.quote_name(FlowLimit._meta.db_table)
        sql = (
            f"UPDATE {limits} AS l SET starts = v.starts, updated_at = {CLOCK} "
            f"FROM jsonb_to_recordset(%(rows)s::jsonb) AS v(key text, starts jsonb) "
            f"WHERE l.key = v.key"
        )
        rows = json.dumps([{"key": key, "starts": value} for key, value in starts.items()])
        hold = getattr(self.connection, _HOLD, None)
        if hold is not None:
            hold.claim_last = True  # this write is the last statement now
        with self.connection.cursor() as cursor, self._flow_edges(closing=True) as (begin, end):
            params = {"rows": rows}
            # Prepared in one pipeline where it can be; else (and on a cursor that binds on
            # the server, one statement a call) the one string, as before.
            client = isinstance(cursor.cursor, _ClientCursor)
            if not (client and self._prepared_in_order(sql, params, begin, end, in_order=False)):
                cursor.execute("; ".join((*begin, sql, *end)), params)

    def claim_flow(
        self, picks: Sequence[FlowPick], limit: int, owner: str, now: datetime | None = None
    ) -> list[ClaimedJob]:
        if not picks:
            return []
        # One LATERAL branch per key walks wq_job_flow for that key's first `take` jobs; the
        # rounds (every key's first job, then every key's second...) make the order, so one
        # claim serves many keys before any key's second job.
        sql = (
            f"WITH want AS (SELECT * FROM jsonb_to_recordset(%(picks)s::jsonb) "
            f"  AS w(queue text, key text, take int, turn int)), "
            f"picked AS MATERIALIZED (SELECT c.id, c.round, w.turn FROM want AS w "
            f"CROSS JOIN LATERAL (SELECT s.id, row_number() OVER ("
            f"  ORDER BY s.priority DESC, s.run_after, s.id) AS round FROM ("
            f"  SELECT id, priority, run_after FROM {self.table} WHERE status = 'ready' "
            # The clock as an uncorrelated subquery too: a custom plan would read the
            # statement's clock into its estimate (every ready row due), the generic one guess a
            # third, and never look the cheaper one (docs/explanation/performance.md).
            f"  AND queue = w.queue AND flow_key = w.key AND run_after <= (SELECT {NOW}) "
            f"  ORDER BY priority DESC, run_after, id LIMIT w.take FOR UPDATE SKIP LOCKED) AS s"
            f") AS c ORDER BY c.round, w.turn LIMIT (SELECT %(limit)s::bigint)), "
            f"claimed AS (UPDATE {self.table} AS j SET {_LEASE} "
            # `status || ''`: the picked rows are reached by primary key, never through an
            # index on status (stale statistics make the planner read every ready row so).
            f"WHERE {_by_id('j', 'picked')} AND j.status || '' = 'ready' "
            f"RETURNING {_CLAIMED}, j.flow_key) "
            f"SELECT c.*, p.round, p.turn FROM claimed AS c JOIN picked AS p ON p.id = c.id"
        )
        wanted = [{"queue": p.queue, "key": p.key, "take": p.take, "turn": p.turn} for p in picks]
        params = {"now": now, "limit": limit, "owner": owner, "picks": json.dumps(wanted)}
        rows = self._fetch_in_index_order(sql, params, prepared=True)
        rows.sort(key=lambda row: (row[-2], row[-1]))
        return [ClaimedJob(*row[:-2]) for row in rows]

    def batch_backlog(
        self, groups: Sequence[tuple[str, str, int]], now: datetime | None = None
    ) -> dict[tuple[str, str], tuple[int, float]]:
        if not groups:
            return {}
        # One LATERAL branch per group, each reading at most `size` entries of wq_job_flow.
        sql = (
            f"SELECT g.queue, g.key, c.n, extract(epoch FROM {NOW} - c.oldest)::float8 "
            f"FROM unnest(%(queues)s::text[], %(keys)s::text[], %(sizes)s::int[]) "
            f"AS g(queue, key, size) CROSS JOIN LATERAL (SELECT count(*) AS n, "
            f"min(s.run_after) AS oldest FROM (SELECT run_after FROM {self.table} "
            f"WHERE status = 'ready' AND queue = g.queue AND flow_key = g.key "
            f"AND run_after <= {NOW} ORDER BY priority DESC, run_after, id LIMIT g.size) AS s) "
            f"AS c WHERE c.n > 0 AND NOT EXISTS (SELECT 1 FROM {self.queue_table} AS p "
            f"WHERE p.name = g.queue AND p.paused_at IS NOT NULL)"
        )
        params = {
            "now": now,
            "queues": [queue for queue, _, _ in groups],
            "keys": [key for _, key, _ in groups],
            "sizes": [size for _, _, size in groups],
        }
        rows = self._fetch_in_index_order(sql, params)
        return {(queue, key): (n, waited) for queue, key, n, waited in rows}

    def claim_batch(
        self,
        queue: str,
        flow_key: str,
        size: int,
        wait: float,
        owner: str,
        now: datetime | None = None,
    ) -> BatchClaim:
        # The group's first `size` ready jobs, walked in claim order on wq_job_flow and locked
        # (SKIP LOCKED: another worker's batch in the making is left alone); the gate decides
        # on those rows whether they go together now: all `size` are there, or the oldest has
        # waited `wait`. With fewer than `size`, the rows are all the group's unlocked ready
        # jobs, so their oldest is the group's. The outer SELECT returns the gate's row even
        # when the UPDATE wrote nothing: when the group will be due.
        sql = (
            f"WITH picked AS MATERIALIZED (SELECT id, run_after FROM {self.table} "
            f"WHERE status = 'ready' AND queue = %(queue)s AND flow_key = %(key)s "
            f"AND run_after <= {NOW} AND NOT EXISTS (SELECT 1 FROM {self.queue_table} AS p "
            f"WHERE p.name = %(queue)s AND p.paused_at IS NOT NULL) "
            f"ORDER BY priority DESC, run_after, id LIMIT %(size)s FOR UPDATE SKIP LOCKED), "
            f"gate AS MATERIALIZED (SELECT count(*) >= %(size)s "
            f"  OR min(run_after) <= {NOW} - make_interval(secs => %(wait)s::float8) AS due, "
            f"  extract(epoch FROM min(run_after) + make_interval(secs => %(wait)s::float8) "
            f"  - {NOW})::float8 AS due_in FROM picked), "
            f"claimed AS (UPDATE {self.table} AS j SET {_LEASE} FROM picked, gate "
            f"  WHERE j.id = picked.id AND j.status || '' = 'ready' AND gate.due "
            f"  RETURNING j.run_after AS claim_run_after, {_CLAIMED}) "
            f"SELECT gate.due, gate.due_in, claimed.* FROM gate LEFT JOIN claimed ON true"
        )
        params = {
            "now": now, "queue": queue, "key": flow_key, "size": size, "wait": float(wait),
            "owner": owner,
        }  # fmt: skip
        rows = self._fetch_in_index_order(sql, params)
        claimed = [row for row in rows if row[3] is not None]
        if not claimed:
            due, due_in = rows[0][0], rows[0][1]
            return BatchClaim(jobs=[], due_in=None if due or due_in is None else due_in)
        claimed.sort(key=lambda row: (-row[6], row[2], row[3]))  # priority, run_after, id
        return BatchClaim(jobs=[ClaimedJob(*row[3:]) for row in claimed])

    def claim_job(self, job_id: int, owner: str) -> ClaimedJob | None:
        # The plain claim's SET and RETURNING, for one row by primary key; its guard is the
        # plain claim's WHERE. Whoever locks the row first wins: a worker's claim that comes
        # second skips it (SKIP LOCKED), this UPDATE coming second waits, then sees it running.
        sql = (
            f"UPDATE {self.table} AS j SET {_LEASE} "
            f"WHERE j.id = %(id)s AND j.status = 'ready' AND j.flow_key IS NULL "
            f"AND NOT EXISTS (SELECT 1 FROM {self.queue_table} AS p "
            f"  WHERE p.name = j.queue AND p.paused_at IS NOT NULL) "
            f"RETURNING {_CLAIMED}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"id": job_id, "owner": owner, "now": None})
            row = cursor.fetchone()
        return None if row is None else ClaimedJob(*row)

    def take_claim(
        self,
        key: str,
        job_id: int | None,
        ttl: float,
        connection: BaseDatabaseWrapper | None = None,
    ) -> bool:
        # A second session inserting the same key waits for the first's transaction, then
        # takes the conflict branch, whose WHERE is checked against the row as committed: an
        # unexpired claim returns nothing, an expired one is taken over by exactly one session.
        sql = (
            f"INSERT INTO {self.claim_table} AS c (key, job_id, claimed_at, expires_at) "
            f"VALUES (%(key)s, %(job_id)s, {CLOCK}, "
            f"  {CLOCK} + make_interval(secs => %(ttl)s::float8)) "
            f"ON CONFLICT (key) DO UPDATE SET job_id = EXCLUDED.job_id, "
            f"claimed_at = EXCLUDED.claimed_at, expires_at = EXCLUDED.expires_at "
            f"WHERE c.expires_at <= {CLOCK} RETURNING c.key"
        )
        with (connection or self.connection).cursor() as cursor:
            cursor.execute(sql, {"key": key, "job_id": job_id, "ttl": ttl})
            return cursor.fetchone() is not None

    def began(self, owner: str, leases: Sequence[tuple[int, int]]) -> set[int]:
        if not leases:
            return set()
        # As renew_leases: only rows nobody else has locked (SKIP LOCKED); one a session holds
        # keeps its mark until the caller's next pass.
        sql = (
            f"WITH free AS MATERIALIZED (SELECT id FROM {self.table} "
            f"  WHERE status = 'running' AND lease_owner = %(owner)s AND claimed_ahead "
            f"  AND {_LEASES} ORDER BY id FOR UPDATE SKIP LOCKED) "
            f"UPDATE {self.table} AS j SET claimed_ahead = false, started_at = {CLOCK} "
            f"FROM free WHERE j.id = free.id RETURNING j.id"
        )
        params = _lease_params(owner, leases)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {job_id for (job_id,) in cursor.fetchall()}

    def renew_leases(
        self, owner: str, leases: Sequence[tuple[int, int]]
    ) -> tuple[dict[int, bool], set[int]]:
        if not leases:
            return {}, set()
        # `held` reads the leases as committed; only rows nobody else has locked are extended
        # (SKIP LOCKED). A held row that is locked (a session's open transaction touched it)
        # is still ours: it is reported held, and locked so that it is tried again soon; it
        # is never mistaken for a lost lease, and never lets one locked row stall this
        # worker's heartbeat.
        sql = (
            f"WITH held AS MATERIALIZED (SELECT id, cancel_requested_at FROM {self.table} "
            f"  WHERE status = 'running' AND lease_owner = %(owner)s AND {_LEASES}), "
            f"free AS MATERIALIZED (SELECT j.id FROM {self.table} AS j JOIN held ON j.id = held.id "
            f"  ORDER BY j.id FOR UPDATE OF j SKIP LOCKED), "
            f"renewed AS (UPDATE {self.table} AS j "
            f"  SET lease_expires_at = {CLOCK} + j.lease_seconds * interval '1 second' "
            f"  FROM free WHERE j.id = free.id AND j.status = 'running' "
            f"  AND j.lease_owner = %(owner)s RETURNING j.id, j.cancel_requested_at) "
            f"SELECT held.id, COALESCE(renewed.cancel_requested_at, held.cancel_requested_at) "
            f"  IS NOT NULL, renewed.id IS NULL FROM held LEFT JOIN renewed ON renewed.id = held.id"
        )
        params = _lease_params(owner, leases)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        return {job_id: cancel for job_id, cancel, _ in rows}, {
            job_id for job_id, _, locked in rows if locked
        }

    def bound_lock_waits(self, seconds: float | None = None) -> str | None:
        bound = LOCK_TIMEOUT if seconds is None else f"{round(seconds * 1000)}ms"
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)",
                [bound],
            )
            previous: str = cursor.fetchone()[0]
        return previous

    def restore_lock_waits(self, previous: str | None) -> None:
        if previous is not None:
            with self.connection.cursor() as cursor:
                cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])

    def transaction_failed(self) -> bool:
        raw = self.connection.connection
        if raw is None:
            return False
        info = getattr(raw, "info", None)  # psycopg 3
        if info is not None:
            return bool(info.transaction_status == _IN_ERROR)
        return bool(raw.get_transaction_status() == _IN_ERROR)  # psycopg2: the same number

    @contextlib.contextmanager
    def pipelined(self) -> Iterator[object]:
        # psycopg 3's pipeline mode (psycopg2 has none: one by one). Its end sends a Sync and
        # reads the answers left, outside Django's cursor: errors are made Django's here, as a
        # cursor's are, so that callers tell a lost connection or a lock from a refusal.
        db = self.connection
        db.ensure_connection()
        pipeline = getattr(db.connection, "pipeline", None)
        if pipeline is None:
            yield None
            return
        with db.wrap_database_errors, pipeline() as opened:
            yield opened

    def name_session(self, name: str, connection: BaseDatabaseWrapper | None = None) -> None:
        # pg_stat_activity.application_name then says which worker a backend serves (set_config:
        # SET takes no statement parameters). PostgreSQL keeps the first 63 bytes. Only on a
        # server session of this connection's own: a pooler (PgBouncer) answers the startup
        # with a backend key of its own, not the server's pid, and under transaction pooling
        # the name would stay on the server connection for whichever client gets it next.
        db = connection or self.connection
        db.ensure_connection()
        with db.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('application_name', %s, false) WHERE pg_backend_pid() = %s",
                [name, _announced_pid(db.connection)],
            )

    def record_many(
        self, owner: str, outcomes: Sequence[Outcome], *, skip_locked: bool = False
    ) -> Recorded:
        if not outcomes:
            return Recorded(written=set(), busy=set())
        sql = f"WITH {self._record_ctes(skip_locked)} SELECT {self._recorded} {_RECORDED_FROM}"
        return self._fenced_write(sql, outcomes, owner)

    def _record_ctes(self, skip_locked: bool, outside_workflows: bool = False) -> str:
        """The outcomes' write as CTEs: ``v`` (the batch), ``flows`` and ``free`` (the rows
        it may touch, ``_unheld``), ``written`` (the fenced UPDATE, RETURNING what the stats
        and the workflow effects read). All outcomes arrive as one jsonb parameter unpacked
        into rows, so one statement (one round trip) completes a whole batch while each row
        keeps its own fence. Every value was decided by the outcome; the CASEs only pick
        which decided value applies."""
        cancel = "j.cancel_requested_at IS NOT NULL"
        return (
            f"v AS MATERIALIZED (SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) AS r("
            f"  id bigint, attempt integer, status text, cancel_status text, finished boolean, "
            f"  result text, has_error boolean, etype text, emessage text, etraceback text, "
            f"  delay double precision, charge_attempt integer, charge_crash integer, "
            f"  has_progress boolean, "
            f"  pcurrent bigint, ptotal bigint, pmessage text, pdetails jsonb) "
            f"  WHERE {_BOUNDED_LOCK_WAITS}), "
            f"{self._unheld(skip_locked, outside_workflows)}, "
            f"written AS (UPDATE {self.table} AS j SET "
            f"status = CASE WHEN {cancel} THEN v.cancel_status ELSE v.status END, "
            f"finished_at = CASE WHEN v.finished OR {cancel} THEN {CLOCK} END, "
            f"result = COALESCE(v.result::jsonb, j.result), "
            f"errors = CASE WHEN v.has_error THEN j.errors || jsonb_build_array(jsonb_build_object("
            f"  'attempt', j.attempt, 'at', {ISO_CLOCK}, 'type', v.etype, 'message', v.emessage, "
            f"  'traceback', v.etraceback, 'worker', %(owner)s::text)) ELSE j.errors END, "
            f"run_after = CASE WHEN v.delay IS NOT NULL "
            f"  THEN {CLOCK} + make_interval(secs => v.delay) ELSE j.run_after END, "
            f"attempts_charged = j.attempts_charged + COALESCE(v.charge_attempt, 0), "
            f"crashes_charged = j.crashes_charged + COALESCE(v.charge_crash, 0), "
            f"{_PROGRESS_FROM_V} "
            f"lease_owner = NULL, lease_expires_at = NULL "
            f"FROM v JOIN free ON free.id = v.id "
            f"WHERE j.id = v.id AND j.attempt = v.attempt AND j.lease_owner = %(owner)s "
            # `status || ''`: each row by its primary key, never every running job by status.
            f"AND j.status || '' = 'running' "
            f"RETURNING j.id, j.attempt, j.status, j.workflow_id, "
            # Whether the row took the status a requested cancellation picks (the statistics'
            # upsert reads it): the status written differs from the status decided.
            f"j.queue, j.task_name, j.status <> v.status AS cancelled, "
            f"  EXTRACT(EPOCH FROM {CLOCK} - j.started_at)::float8 AS run_seconds, "
            f"  EXTRACT(EPOCH FROM j.started_at - j.run_after)::float8 AS wait_seconds) "
        )

    def write_progress(
        self, owner: str, reports: Sequence[Progress], *, skip_locked: bool = False
    ) -> Recorded:
        if not reports:
            return Recorded(written=set(), busy=set())
        sql = (
            f"WITH v AS MATERIALIZED (SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) AS r("
            f"  id bigint, attempt integer, pcurrent bigint, ptotal bigint, pmessage text, "
            f"  pdetails jsonb) WHERE {_BOUNDED_LOCK_WAITS}), "
            f"free AS MATERIALIZED ({self._lockable(skip_locked)}), "
            f"written AS (UPDATE {self.table} AS j SET "
            f"progress_current = v.pcurrent, progress_total = v.ptotal, "
            f"progress_message = v.pmessage, progress_details = v.pdetails "
            f"FROM v JOIN free ON free.id = v.id "
            f"WHERE j.id = v.id AND j.attempt = v.attempt AND j.lease_owner = %(owner)s "
            f"AND j.status = 'running' RETURNING j.id, j.attempt) "
            f"SELECT v.id, v.attempt, (v.id, v.attempt) IN (SELECT id, attempt FROM written), "
            f"{self._settled} FROM v"
        )
        return self._fenced_write(sql, reports, owner)

    def _lockable(self, skip_locked: bool) -> str:
        """The rows of batch ``v`` the write may touch: with ``skip_locked``, those no other
        session holds locked (never waited for); otherwise all of them (waited for)."""
        if not skip_locked:
            return "SELECT id FROM v"
        return (
            f"SELECT j.id FROM {self.table} AS j WHERE {_by_id('j', 'v')} "
            f"ORDER BY j.id FOR UPDATE OF j SKIP LOCKED"
        )

    def _unheld(self, skip_locked: bool, outside_workflows: bool = False) -> str:
        """The ``free`` rows of outcome batch ``v`` (see ``_lockable``), after the batch's
        workflow rows: the lock order of workflow/locks.py (workflow rows, then job rows, in
        id order), so the workflow effects written after it in this transaction find them
        held already. With ``skip_locked``, neither is waited for: a job whose row, or whose
        workflow's row, another session holds is left for later (db/locking.py: a locked
        workflow row keeps only its own jobs' outcomes back, never the batch). ``FOR NO KEY
        UPDATE``, as ``lock_workflows`` takes them: a job inserted into the workflow (its
        foreign key's ``KEY SHARE``) does not wait for a worker's write."""
        flows = Workflow._meta.db_table
        skip = " SKIP LOCKED" if skip_locked else ""
        workflows = (
            f"flows AS MATERIALIZED (SELECT w.id FROM {flows} AS w WHERE w.id IN "
            f"  (SELECT j.workflow_id FROM {self.table} AS j WHERE {_by_id('j', 'v')}) "
            f"  ORDER BY w.id FOR NO KEY UPDATE OF w{skip})"
        )
        if not skip_locked:
            # The rows are waited for. count(*) reads the whole of flows (a CTE nothing reads
            # is never run) before the UPDATE takes its first job row.
            return (
                f"{workflows}, free AS MATERIALIZED (SELECT v.id FROM v, "
                f"  (SELECT count(*) FROM flows) AS held)"
            )
        # ``outside_workflows``: a row that joined a workflow is not free either (a job that
        # was running when ``using(depends_on=...)`` named it joins one: record_and_claim,
        # which writes no workflow effects, keeps its outcome for a pass that does).
        in_flow = "FALSE" if outside_workflows else "j.workflow_id IN (SELECT id FROM flows)"
        return (
            f"{workflows}, "
            f"free AS MATERIALIZED (SELECT j.id FROM {self.table} AS j WHERE {_by_id('j', 'v')} "
            f"  AND (j.workflow_id IS NULL OR {in_flow}) "
            f"  ORDER BY j.id FOR UPDATE OF j SKIP LOCKED)"
        )

    @property
    def _recorded(self) -> str:
        """What a write of outcomes (``_record_ctes``) answers, the columns ``_recorded_from``
        reads, from ``_RECORDED_FROM``."""
        return (
            f"v.id, v.attempt, w.id IS NOT NULL, {self._settled}, w.status, w.workflow_id, "
            f"w.queue, w.task_name, w.run_seconds, w.wait_seconds"
        )

    @property
    def _settled(self) -> str:
        # Settled: the write tried the row, or the row no longer exists (a deleted job is not
        # busy: it must not be retried forever). A scalar subquery, one primary-key probe per
        # outcome: a NOT EXISTS may be planned as a hashed subplan reading the whole primary
        # key, as the pass's generic plan did (docs/explanation/performance.md).
        return (
            f"(v.id IN (SELECT id FROM free) "
            f"OR (SELECT true FROM {self.table} AS g WHERE g.id = v.id) IS NULL)"
        )

    def _fenced_write(
        self, sql: str, rows: Sequence[Outcome] | Sequence[Progress], owner: str
    ) -> Recorded:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"batch": self.batch(rows), "owner": owner})
            return _recorded_from(cursor.fetchall())

    def record_and_claim(
        self, owner: str, write: CountedWrite, queues: Sequence[str], limit: int
    ) -> tuple[Recorded, list[ClaimedJob]]:
        sql = self._record_and_claim_sql(write.bounds, write.counters)
        params = self._record_and_claim_params(owner, write, queues, limit)
        with self._prepared(sql, params) as cursor:  # planned for its first 5 calls only
            rows = cursor.fetchall()
        # Each row is the write's (kind 'w', `_recorded`'s ten columns) or the claim's
        # (kind 'c', `ClaimedJob`'s after them): one loop sorts them.
        written: list[Any] = []
        jobs: list[ClaimedJob] = []
        for row in rows:
            if row[0] == "w":
                written.append(row[1:11])
            else:
                jobs.append(ClaimedJob(*row[11:]))
        jobs.sort(key=_claim_order)
        return _recorded_from(written), jobs

    def _record_and_claim_params(
        self, owner: str, write: CountedWrite, queues: Sequence[str], limit: int
    ) -> dict[str, Any]:
        return {
            "batch": self.batch(write.outcomes), "owner": owner, "shard": write.shard,
            # The counted outcomes' columns go as comma-joined text, split on the server:
            # psycopg dumps a list element by element in Python (a regex for each string), which
            # cost the control thread about a third of its time per job (issue 32). Counter
            # names are identifiers (stats/counters.py): no comma, never ''.
            "ids": ",".join([str(row[0]) for row in write.counted]),
            "attempts": ",".join([str(row[1]) for row in write.counted]),
            "names": ",".join([row[2] or "" for row in write.counted]),
            "cancel_names": ",".join([row[3] or "" for row in write.counted]),
            "now": None, "limit": limit, "queues": list(queues),
        }  # fmt: skip

    def _record_and_claim_sql(
        self, bounds: Sequence[float], counters: Sequence[tuple[str | None, str | None]]
    ) -> str:
        """``record_and_claim``'s statement, made once per duration classes' lower bounds
        (``histogram.lower_bounds()``, the same tuple on every pass) and counters
        (``stats.counters.COUNTERS``): the same text on every pass, as a prepared statement
        needs, and no text to build on the control thread.

        The bounds are a literal of the statement (``_float8_array``), not a parameter:
        psycopg dumped a list of floats element by element in Python on every pass (issue
        32)."""
        cached = self._record_and_claim_cache
        if cached is not None and (
            (cached[0] is bounds and cached[1] is counters)
            or (cached[0] == bounds and cached[1] == counters)
        ):
            return cached[2]
        literal = _float8_array(bounds)
        # Three parts in one statement, one snapshot: rows the write finishes are `running` in
        # it, so the claim (which reads `ready` rows) never touches one, and no row is updated
        # twice. The statistics' upsert reads the rows the write returned: counted iff
        # written, and committed with them. Which counter an attempt adds to is decided above
        # (`counted`: one row per outcome, the ending of each status its row may take); here
        # the ending its row took is picked, each of `counters` made a row of it (a VALUES
        # list per written job: no row per counter travels), and a duration classed as
        # `counters.duration_class` does (`width_bucket` over the lower bounds of
        # `histogram.bucket`'s classes, where it is >= 0). Rows are upserted in key order, as
        # `count_stats` does. The last SELECT answers both the write (kind 'w', `_recorded`'s
        # columns) and the claim (kind 'c', `ClaimedJob`'s).
        seconds = {"run": "w.run_seconds", "wait": "w.wait_seconds"}
        made = ", ".join(
            "({}, {})".format(
                "e.ending" if name is None else f"'{name}'",
                "0"
                if measure is None
                else f"CASE WHEN {seconds[measure]} >= 0 "
                f"THEN width_bucket({seconds[measure]}, {literal}) END",
            )
            for name, measure in counters
        )
        counted = (
            f"counted AS (INSERT INTO {self.stats_table} AS c "
            f"  (minute, queue, task_name, name, bucket, shard, count) "
            f"SELECT date_trunc('minute', {CLOCK}), s.queue, s.task_name, s.name, s.bucket, "
            f"  %(shard)s::smallint, count(*) FROM (SELECT w.queue, w.task_name, x.name, "
            f"  x.bucket::smallint AS bucket FROM written AS w "
            f"  JOIN unnest(string_to_array(%(ids)s, ',')::bigint[], "
            f"    string_to_array(%(attempts)s, ',')::integer[], "
            f"    string_to_array(%(names)s, ',', ''), string_to_array(%(cancel_names)s, ',', '')) "
            f"    AS n(id, attempt, name, cancel_name) ON n.id = w.id AND n.attempt = w.attempt "
            f"  CROSS JOIN LATERAL (SELECT CASE WHEN w.cancelled THEN n.cancel_name "
            f"    ELSE n.name END AS ending) AS e "
            f"  CROSS JOIN LATERAL (VALUES {made}) AS x(name, bucket) "
            f"  WHERE e.ending IS NOT NULL) AS s "
            f"WHERE s.bucket IS NOT NULL "
            f"GROUP BY s.queue, s.task_name, s.name, s.bucket "
            f"ORDER BY s.queue, s.task_name, s.name, s.bucket "
            f"ON CONFLICT (minute, queue, task_name, name, bucket, shard) "
            f"DO UPDATE SET count = c.count + EXCLUDED.count)"
        )
        sql = (
            f"WITH {self._record_ctes(skip_locked=True, outside_workflows=True)}, {counted}, "
            f"{self._claim_ctes()} "
            f"SELECT 'w', {self._recorded}, claimed.* "
            f"{_RECORDED_FROM} LEFT JOIN claimed ON false "
            f"UNION ALL SELECT 'c', {', '.join(['NULL'] * 10)}, claimed.* FROM claimed"
        )
        self._record_and_claim_cache = (bounds, counters, sql)
        return sql

    def count_stats(self, counters: Sequence[tuple[str, str, str, int, int, int]]) -> None:
        if not counters:
            return
        table = self.stats_table
        sql = (
            f"INSERT INTO {table} AS c (minute, queue, task_name, name, bucket, shard, count) "
            f"SELECT date_trunc('minute', {CLOCK}), r.queue, r.task_name, r.name, r.bucket, "
            f"r.shard, r.count FROM jsonb_to_recordset(%(batch)s::jsonb) AS r(queue text, "
            f"task_name text, name text, bucket smallint, shard smallint, count bigint) "
            f"ORDER BY r.queue, r.task_name, r.name, r.bucket, r.shard "
            f"ON CONFLICT (minute, queue, task_name, name, bucket, shard) "
            f"DO UPDATE SET count = c.count + EXCLUDED.count"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"batch": counter_batch(counters)})

    def count_down(self, counts: Sequence[tuple[int, int, int]]) -> list[CountedDown]:
        if not counts:
            return []
        # One statement for every dependent, however many: each row's counters change
        # relative to what they are (the row lock serialises two prerequisites ending at once,
        # and the second sees the first's count), and only while the row still waits.
        # The rows are locked in id order first (the lock order of workflow/locks.py, after the
        # workflows' and the ending jobs' rows), not in whatever order the UPDATE's plan visits
        # them.
        sql = (
            f"WITH v AS (SELECT * FROM jsonb_to_recordset(%(batch)s::jsonb) "
            f"  AS r(id bigint, n integer, s integer)), "
            f"locked AS MATERIALIZED (SELECT j.id FROM {self.table} AS j JOIN v ON j.id = v.id "
            f"  WHERE j.status IN ({AWAITING_SQL}) ORDER BY j.id FOR UPDATE OF j) "
            f"UPDATE {self.table} AS j SET waiting_on = j.waiting_on - v.n, "
            f"prerequisites_succeeded = j.prerequisites_succeeded + v.s "
            f"FROM v JOIN locked ON locked.id = v.id "
            f"WHERE j.id = v.id AND j.status IN ({AWAITING_SQL}) "
            f"RETURNING j.id, j.waiting_on, j.prerequisites_succeeded, j.run_condition, "
            f"j.workflow_id, j.run_after <= {CLOCK}, j.queue, j.status = 'held'"
        )
        batch = json.dumps([{"id": i, "n": n, "s": ok} for i, n, ok in counts])
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"batch": batch})
            return [CountedDown(*row) for row in cursor.fetchall()]

    def estimate_count(self, queryset: QuerySet[Any]) -> int | None:
        # The whole table: the row count ANALYZE and autovacuum keep in pg_class (-1 or 0
        # before the first ANALYZE: then there is no estimate). A filter: the planner's own
        # row estimate for the query, which costs a plan, not a scan.
        if not queryset.query.where:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass",
                    [queryset.model._meta.db_table],
                )
                row = cursor.fetchone()
            return int(row[0]) if row and row[0] > 0 else None
        try:
            sql, params = queryset.order_by().values("pk").query.sql_with_params()
        except EmptyResultSet:  # a filter that matches nothing (.none(), pk__in=[])
            return 0
        with self.connection.cursor() as cursor:
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            (plan,) = cursor.fetchone()
        if isinstance(plan, str):
            plan = json.loads(plan)
        return int(plan[0]["Plan"]["Plan Rows"])

    def now(self) -> datetime:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            value: datetime = cursor.fetchone()[0]
            return value

    def promote(self, limit: int, now: datetime | None = None) -> list[str]:
        # wq_job_scheduled is ordered by run_after: the scan stops at the first job not due,
        # so a pass costs the same next to a million future jobs as next to none.
        sql = (
            f"WITH due AS MATERIALIZED (SELECT id FROM {self.table} "
            f"  WHERE status = 'scheduled' AND run_after <= {NOW} "
            f"  ORDER BY run_after LIMIT %(limit)s FOR UPDATE SKIP LOCKED), "
            f"promoted AS (UPDATE {self.table} AS j SET status = 'ready' FROM due "
            f"  WHERE j.id = due.id AND j.status = 'scheduled' RETURNING j.queue), "
            f"notified AS (SELECT pg_notify(%(channel)s, q.queue) "
            f"  FROM (SELECT DISTINCT queue FROM promoted) AS q) "
            f"SELECT queue, (SELECT count(*) FROM notified) FROM promoted"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": now, "limit": limit, "channel": CHANNEL})
            return [row[0] for row in cursor.fetchall()]

    def notify(self, queues: Iterable[str]) -> None:
        names = sorted(set(queues))
        if names:
            with self.connection.cursor() as cursor:
                cursor.execute(
                    "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q", [CHANNEL, names]
                )

    def notify_abort(self, job_id: int, reason: str) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [ABORT_CHANNEL, f"{job_id}:{reason}"])

    def notify_standby_free(self) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, pg_liveness.STANDBY_FREE])

    def is_lock_timeout(self, exc: BaseException) -> bool:
        return getattr(exc.__cause__, "sqlstate", None) in _TRANSIENT_SQLSTATES

    def is_deadlock(self, exc: BaseException) -> bool:
        return getattr(exc.__cause__, "sqlstate", None) == _DEADLOCK

    def listener(
        self,
        on_ready: Callable[[str | None], None],
        on_abort: Callable[[int, str], None],
        name: str = "",
        on_standby: Callable[[], None] = lambda: None,
    ) -> Listener:
        listener = Listener(
            listen_params(self.connection, conf.LISTEN_DSN), on_ready, on_abort, name,
            standbys=int(conf.MAINTAINER_STANDBYS), on_standby=on_standby,
        )  # fmt: skip
        listener.start()
        return listener

    def gone_workers(self) -> Any:
        return pg_liveness.gone_workers()

    def trusted_liveness(self) -> Any:
        return pg_liveness.trusted()

    def worker_watch(self) -> pg_liveness.SessionWatch | None:
        if not conf.LISTEN_NOTIFY:  # no direct connection is asked for: leases only
            return None
        try:
            import psycopg  # noqa: F401 - the optional postgres extra: is it installed?
        except ImportError:
            return None
        return pg_liveness.SessionWatch(listen_params(self.connection, conf.LISTEN_DSN))

    # --- configuration: system checks and start-up errors ----------------------------------------

    @classmethod
    def check_settings(cls, alias: str, settings_dict: Mapping[str, Any]) -> list[CheckMessage]:
        if not conf.LISTEN_NOTIFY:
            return []
        try:  # imported here: Django also runs on psycopg2; the listener needs psycopg 3
            import psycopg  # noqa: F401
        except ImportError as exc:
            return [
                checks.Warning(
                    f"The jobs database {alias!r} is PostgreSQL and WORKQUEUE['LISTEN_NOTIFY'] "
                    f"is on, but psycopg 3 cannot be imported ({type(exc).__name__}: {exc}): "
                    f"workers cannot listen for NOTIFY and find new jobs only by polling.",
                    hint="Install psycopg 3 (pip install 'psycopg[binary]', or "
                    "'django-workqueue[postgres]'), or set WORKQUEUE['LISTEN_NOTIFY'] = False "
                    "to poll on purpose.",
                    id="django_workqueue.W008",
                )
            ]
        return []

    # SQLSTATE classes no wait cures: 28 (the role or password is rejected) and 3D (no such
    # database). A connection the server refuses carries no SQLSTATE in psycopg, only the
    # server's message: these are PostgreSQL's English texts (under another lc_messages, the
    # worker waits, as for a database that is down).
    _AUTH_SQLSTATE, _NO_DATABASE_SQLSTATE = "28", "3D"
    _AUTH_MESSAGES = ("authentication failed", "no pg_hba.conf entry")

    def incurable_connection_error(self, exc: BaseException) -> str | None:
        sqlstate = getattr(exc.__cause__, "sqlstate", None) or ""
        text = str(exc).strip()
        reason = text.splitlines()[-1].strip() if text else type(exc).__name__
        alias, name = self.alias, self.connection.settings_dict.get("NAME")
        entry = f"DATABASES[{alias!r}]"
        if sqlstate.startswith(self._NO_DATABASE_SQLSTATE) or (
            'database "' in text and "does not exist" in text
        ):
            return (
                f"database {name!r} does not exist on the server ({reason}); create it (e.g. "
                f"createdb {name}) and run 'manage.py migrate --database {alias}', or correct "
                f"{entry}['NAME']"
            )
        no_role = 'role "' in text and "does not exist" in text
        if (
            sqlstate.startswith(self._AUTH_SQLSTATE)
            or no_role
            or any(message in text for message in self._AUTH_MESSAGES)
        ):
            return (
                f"the server refused the role or password for database {name!r} ({reason}); "
                f"correct {entry}['USER'] and ['PASSWORD'], or the server's pg_hba.conf"
            )
        return None


LISTEN_TURN_SECONDS = 1.0
"""The listener's turn: it waits at most this long for a notification before it tends its
standby slot and answers doubts about its session (``Listener.doubt``)."""

_LISTEN_KEEPALIVES = {
    "keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
}  # fmt: skip


def listen_params(db: BaseDatabaseWrapper, dsn: str | None) -> dict[str, Any]:
    """psycopg's connection parameters for a LISTEN on ``db``'s database: those of ``dsn``
    (``WORKQUEUE["LISTEN_DSN"]``), and for every one it leaves out ``db``'s own (so that
    ``"host=db-primary port=5432"`` reaches the jobs database's name, user and password on the
    server itself when ``db`` goes through a pooler)."""
    params = db.get_connection_params()
    for key in ("cursor_factory", "context", "prepare_threshold"):
        params.pop(key, None)
    if dsn:
        from psycopg.conninfo import conninfo_to_dict  # psycopg 3 only: see Listener.run

        params.update(conninfo_to_dict(dsn))
    # A connection that dies without a word (a NAT or firewall dropping it) fails within about
    # a minute instead of the system's two hours: until then the worker believes it hears
    # NOTIFY and polls only every LISTEN_POLL_INTERVAL. Settings of the DSN or of the
    # database's OPTIONS win.
    for key, value in _LISTEN_KEEPALIVES.items():
        params.setdefault(key, value)
    return params


class Listener(threading.Thread):
    """LISTEN on a dedicated autocommit connection, outside Django's per-thread connections.

    It hears two channels: new ready jobs of a queue, and requests to abort a running job. It
    reconnects with backoff when the connection drops and then calls ``on_ready(None)``,
    so the worker polls once for anything announced while it was deaf (an abort missed then is
    found by the heartbeat). Polling stays on regardless. Its session holds the worker's
    liveness key (``held()``, None while it is down or in doubt; see ``pg_liveness``).
    ``name``, if given, is the connection's application_name (the worker's session name).

    A session the server ended while no packet could reach this host (a partition: the
    server's keepalives gave up on it) looks open from here until this end sends something,
    and its key is free on the server meanwhile: the maintainer would take the worker for
    dead and reap every job it claims. So whoever has reason to think the session may be gone
    (the worker's own connection was lost, or its jobs were taken from it) calls ``doubt()``:
    the key counts as not held until a round trip on this connection has proven the session,
    or a new session has taken the key again.
    """

    def __init__(
        self,
        params: dict[str, Any],
        on_ready: Callable[[str | None], None],
        on_abort: Callable[[int, str], None],
        name: str = "",
        *,
        standbys: int = 0,
        on_standby: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(name="workqueue-listener", daemon=True)
        # The worker's name wins over an application_name of the settings or of LISTEN_DSN.
        self.params = {**params, "application_name": name} if name else params
        self.on_ready = on_ready
        self.on_abort = on_abort
        self.stopping = threading.Event()
        self.connected = threading.Event()
        self.connection: Any = None
        self.liveness: LivenessToken | None = None
        """The liveness key this listener's session took; kept after a disconnect, so that
        the reconnect takes the same one again."""
        self._doubt_lock = threading.Lock()
        self._doubts = 0  # doubt() calls so far
        self._proven = 0  # of which a round trip (or a new session) has answered this many
        self.standbys = standbys
        self.on_standby = on_standby
        """Called (on this thread) when ``standby`` changes."""
        self.standby: int | None = None
        """The standby slot this listener's session holds (``pg_liveness.take_standby``)."""
        self._standby_lock = threading.Lock()
        self._standby_wanted = standbys > 0
        self._standby_due = False  # a slot to try or to give up at the next turn
        # While run() runs, a socket pair: stop() writes to one end to wake _wait, which
        # selects on the other.
        self._waker: tuple[socket.socket, socket.socket] | None = None

    def run(self) -> None:
        waker = socket.socketpair()
        try:
            for end in waker:
                end.setblocking(False)
            self._waker = waker  # before the first look at `stopping`: see stop()
            self._serve(waker[0])
        finally:
            self.connected.clear()
            self._waker = None
            for end in waker:
                end.close()

    def _serve(self, woken: socket.socket) -> None:
        """Listen, and reconnect after a lost session, until ``stop()``."""
        import psycopg  # imported here: psycopg 3 only (Django also runs on psycopg2)

        backoff = 0.1
        while not self.stopping.is_set():
            try:
                doubts = self._doubts  # a new session answers the doubts raised before it
                self.connection = psycopg.connect(**self.params, autocommit=True)
                with self.connection, selectors.DefaultSelector() as selector:
                    selector.register(self.connection.fileno(), selectors.EVENT_READ)
                    selector.register(woken, selectors.EVENT_READ)
                    # The worker's liveness: held as long as this session lives (pg_liveness).
                    wanted = self.liveness.value if self.liveness else None
                    self.liveness = pg_liveness.hold(self.connection, wanted)
                    self._proven = doubts
                    self.connection.execute(f"LISTEN {CHANNEL}")
                    # A slot, once this session hears of slots freed (none is missed between).
                    with self._standby_lock:
                        self._standby_due = self._standby_wanted
                    self._tend_standby(listening=False)
                    self.connection.execute(f"LISTEN {ABORT_CHANNEL}")
                    self.connected.set()
                    self.on_ready(None)
                    while not self.stopping.is_set():
                        self._tend_standby()  # the connection is free between two waits
                        self._prove()
                        # What came meanwhile, held by psycopg or waiting on the socket.
                        for notice in self.connection.notifies(timeout=0):
                            self._dispatch(notice.channel, notice.payload)
                        backoff = 0.1  # a whole turn on this session: it works
                        if not self._turn_due():
                            self._wait(selector, woken)
                    self.want_standby(False)
                    self._tend_standby()  # a slot given up on the way out: another takes it
            except Exception as exc:
                self.connected.clear()
                self._lost_standby()
                if self.stopping.is_set():
                    break
                # Deaf now: the worker must poll at POLL_INTERVAL, not sleep out the long poll
                # it chose while it could hear (and it polls once more when this reconnects).
                self.on_ready(None)
                logger.warning("LISTEN connection lost (%s); reconnecting in %.1fs", exc, backoff)
                self.stopping.wait(backoff)
                backoff = min(backoff * 2, 5.0)

    def _turn_due(self) -> bool:
        """Whether the next turn has work at once: a standby slot to tend (asked for, or one
        heard to be free) or a doubt to answer."""
        return self._standby_due or self._doubts != self._proven

    def _wait(self, selector: selectors.BaseSelector, woken: socket.socket) -> None:
        """Until the session has something to read, another thread pokes this one (``stop``,
        ``doubt``, ``want_standby``), or a turn has passed (``LISTEN_TURN_SECONDS``). psycopg's
        own wait for notifications (``notifies(timeout=)``) cannot be woken from another
        thread: a worker that stopped waited up to a whole turn for this thread (a second, at
        every stop of a worker that held a standby slot). A selector, not ``select.select``:
        a process with many files open gives the session a descriptor above 1023."""
        for key, _ in selector.select(LISTEN_TURN_SECONDS):
            if key.fileobj is woken:
                with contextlib.suppress(OSError):
                    woken.recv(64)

    def _poke(self) -> None:
        """Wake the listener's wait (any thread); a listener not running has no waker."""
        waker = self._waker
        if waker is not None:
            with contextlib.suppress(OSError):  # run() has just closed it: it has ended
                waker[1].send(b"\0")

    def held(self) -> LivenessToken | None:
        """The liveness key this listener's session holds now, or None: no session, no key,
        or a doubt not yet answered (any thread)."""
        if not self.connected.is_set() or self._proven != self._doubts:
            return None
        return self.liveness

    def doubt(self) -> None:
        """The session may be gone unseen: ``held()`` is None until a round trip on it (at the
        next turn, which this wakes) or a new session answers (any thread)."""
        with self._doubt_lock:
            self._doubts += 1
        self._poke()

    def _prove(self) -> None:
        """Answer the doubts raised so far with a round trip: a session the server ended
        fails it, and this listener reconnects and takes its key again."""
        doubts = self._doubts
        if doubts != self._proven:
            self.connection.execute("SELECT 1")
            self._proven = doubts

    def want_standby(self, wanted: bool) -> None:
        """Hold a standby slot (at the next turn, if one is free) or give it up (any thread)."""
        with self._standby_lock:
            self._standby_wanted = wanted and self.standbys > 0
            # Due whatever ``standby`` says now: a turn may be at the server, taking or giving
            # up a slot, and end holding what was just unwished. The next turn compares.
            self._standby_due = True
        self._poke()

    def _tend_standby(self, listening: bool = True) -> None:
        """Take a free slot or give the held one up, if asked: one statement (and, once
        ``listening``, a LISTEN again, so that pg_stat_activity still shows a listener)."""
        with self._standby_lock:
            due, wanted = self._standby_due, self._standby_wanted
            self._standby_due = False
        if not due:
            return
        held = self.standby
        if wanted and held is None:
            self.standby = pg_liveness.take_standby(self.connection, self.standbys)
        elif not wanted and held is not None:
            pg_liveness.release_standby(self.connection, held, CHANNEL)
            self.standby = None
        else:
            return  # it holds what is wished
        if listening and not self.stopping.is_set():
            self.connection.execute(f"LISTEN {ABORT_CHANNEL}")
        if self.standby != held:
            logger.debug("standby slot: %s -> %s", held, self.standby)
            self.on_standby()

    def _lost_standby(self) -> None:
        """The session ended, and its slot with it."""
        if self.standby is not None:
            self.standby = None
            self.on_standby()

    def _dispatch(self, channel: str, payload: str) -> None:
        if payload == pg_liveness.STANDBY_FREE:
            with self._standby_lock:  # try at the next turn, if this worker wants one
                self._standby_due |= self._standby_wanted and self.standby is None
            return
        if channel != ABORT_CHANNEL:
            self.on_ready(payload)
            return
        job_id, _, reason = payload.partition(":")
        try:
            self.on_abort(int(job_id), reason)
        except ValueError:
            logger.warning("ignored a malformed abort notification %r", payload)

    def stop(self) -> None:
        """Stop listening: the thread leaves its wait at once and, holding a standby slot,
        gives it up (with the NOTIFY that lets another worker take it) before it ends."""
        self.stopping.set()
        # Poked after `stopping` is set: a run() that had no waker yet sees `stopping` before
        # it waits. No cancel here: the release of the standby slot may be running, and a
        # cancelled NOTIFY is never sent (``cancel`` is for a thread that did not end).
        self._poke()

    def cancel(self) -> None:
        """Cancel what the stopped thread's session runs, if it did not end in time (a
        statement stuck on the server)."""
        connection = self.connection
        if connection is not None:
            with contextlib.suppress(Exception):  # best effort on the way out
                connection.cancel_safe()
