"""SQLite, the embedded default: one host, one writer at a time, polling for wake-ups.

Each statement here is a single ``UPDATE … RETURNING`` in autocommit: SQLite takes the write
lock when the statement starts (waiting up to ``busy_timeout``), so a claim reads and writes
under one lock and two workers can never claim the same row. The database clock is the host's
clock (SQLite has no server), read by SQLite itself as ``strftime(…, 'now')``.
"""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core import checks
from django.core.checks import CheckMessage
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import process_identity
from ..models import FlowLimit, WorkerProcess
from ..outcomes import Outcome
from ..states import TERMINAL
from .base import (
    ACTIVE_STATUSES,
    AWAITING_SQL,
    ActiveCount,
    BatchClaim,
    ClaimedJob,
    CountedDown,
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
    WorkerWatch,
    counter_batch,
    inserted_positions,
)

_TERMINAL = frozenset(status.value for status in TERMINAL)

# Django stores datetimes on SQLite as UTC text 'YYYY-MM-DD HH:MM:SS[.ffffff]', which sorts in
# time order; SQLite's own clock is written in the same shape. `%%` escapes DB-API formatting.
_FORMAT = "'%%Y-%%m-%%d %%H:%%M:%%f'"
NOW = f"COALESCE(:now, strftime({_FORMAT}, 'now'))"
# The clock as the text of an error entry's "at": one format on every vendor (UTC, ms, "Z").
_ISO_NOW = "strftime('%%Y-%%m-%%dT%%H:%%M:%%fZ', 'now')"
_CLOCK = f"strftime({_FORMAT}, 'now')"


def _from_now(seconds: str) -> str:
    return f"strftime({_FORMAT}, 'now', printf('%%+.6f seconds', {seconds}))"


_RETURNING = (
    "id, task_name, queue, priority, attempt, max_attempts, attempts_charged, lease_seconds, "
    "deadline"
)
# What every claim (plain or batch) writes to a job it leases, and returns of it (read back by
# ``_claimed``): the attempt starts now.
_LEASE = (
    f"status = 'running', attempt = attempt + 1, lease_owner = :owner, started_at = {NOW}, "
    f"lease_expires_at = strftime({_FORMAT}, {NOW}, '+' || lease_seconds || ' seconds'), "
    f"claimed_ahead = 0"
)
# A claim into the worker's local buffer (``claim(ahead=True)``): leased alike, marked not begun.
_LEASE_AHEAD = _LEASE.replace("claimed_ahead = 0", "claimed_ahead = 1")
_CLAIMED = (
    f"{_RETURNING}, deadline < {NOW}, json_array(json(args), json(kwargs)), workflow_id, "
    f"input_shape"
)


def _leases(owner: str, leases: Sequence[tuple[int, int]]) -> tuple[str, dict[str, Any]]:
    """``(id, attempt) IN (VALUES ...)`` over a worker's leases, and its parameters (with
    ``:owner``)."""
    pairs = ", ".join(f"(:i{n}, :a{n})" for n in range(len(leases)))
    params: dict[str, Any] = {"owner": owner}
    for n, (job_id, attempt) in enumerate(leases):
        params[f"i{n}"] = job_id
        params[f"a{n}"] = attempt
    return f"(id, attempt) IN (VALUES {pairs})", params


class SQLiteDriver(Driver):
    vendor = "sqlite"
    supports_listen_notify = False
    supports_separate_commit = False
    supports_row_locks = False
    supports_capped_flow_claim = True

    def __init__(self, alias: str) -> None:
        super().__init__(alias)
        # The flow statements' text by shape (queues, picks, caps...): built once, not at
        # every claim (tens of microseconds of a claim of a fraction of a millisecond).
        self._statements: dict[tuple[Any, ...], str] = {}

    def _remember(self, shape: tuple[Any, ...], sql: str) -> str:
        if len(self._statements) >= 256:  # shapes mixing capped and other picks are many
            self._statements.clear()
        self._statements[shape] = sql
        return sql

    def is_lock_timeout(self, exc: BaseException) -> bool:
        # SQLITE_BUSY (and its extended codes): the write lock was not free within
        # busy_timeout; SQLITE_LOCKED: a conflict inside one shared-cache connection.
        code = getattr(exc.__cause__, "sqlite_errorcode", None)
        return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)

    def _now_param(self, now: datetime | None) -> str | None:
        return None if now is None else self.connection.ops.adapt_datetimefield_value(now)

    def insert(
        self,
        job: NewJob,
        payloads: Sequence[tuple[str, str]] | Encoded,
        keys: Sequence[str | None] | None = None,
    ) -> Inserted:
        # The jobs' own values are one JSON parameter unpacked by json_each; what they share is
        # plain parameters. One statement inserts any number of jobs. With per-row keys, a row
        # meeting a unique constraint is skipped (``WHERE true`` lets SQLite tell the upsert
        # clause from a join's ON).
        on_conflict = "" if keys is None else "ON CONFLICT DO NOTHING "
        # The job is scheduled when its run_after is later than the clock: claims never see it
        # until the promoter makes it ready. A unique_for window starts at a multiple of its
        # length on the database's clock (epoch seconds).
        sql = (
            f"INSERT INTO {self.table} (task_name, queue, priority, max_attempts, lease_seconds, "
            f"unique_key, unique_window, run_after, deadline, args, kwargs, status, attempt, "
            f"errors, progress_message, workflow_id, waiting_on, prerequisites_succeeded, "
            f"run_condition, input_shape, flow_key) "
            f"SELECT :task_name, :queue, :priority, :max_attempts, :lease_seconds, "
            f"COALESCE(json_extract(value, '$[2]'), :unique_key), "
            f"CASE WHEN :unique_for IS NOT NULL THEN strftime({_FORMAT}, "
            f"  CAST(strftime('%%s', 'now') AS INTEGER) / :unique_for * :unique_for, "
            f"  'unixepoch') END, "
            f"t.run_after, "
            f"COALESCE(:deadline_at, CASE WHEN :deadline_in IS NOT NULL "
            f"  THEN {_from_now(':deadline_in')} END), "
            f"json_extract(value, '$[0]'), json_extract(value, '$[1]'), "
            f"CASE WHEN :waiting_on > 0 THEN 'blocked' "
            f"  WHEN t.run_after > {_CLOCK} THEN 'scheduled' ELSE 'ready' END, 0, '[]', '', "
            f":workflow_id, :waiting_on, 0, :run_condition, :input_shape, "
            f"json_extract(value, '$[3]') "
            f"FROM json_each(:batch), "
            f"(SELECT COALESCE(:run_at, {_from_now(':delay')}) AS run_after) AS t "
            f"WHERE true ORDER BY key {on_conflict}"
            f"RETURNING id, unique_key, run_after, enqueued_at, deadline, status, unique_window"
        )
        params = job.params(self.connection.ops.adapt_datetimefield_value)
        if isinstance(payloads, Encoded):
            params["batch"] = payloads.text
        else:
            params["batch"] = job.batch(payloads, keys)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = sorted(cursor.fetchall())  # RETURNING order is unspecified; ids ascend
        positions = None if keys is None else inserted_positions(keys, [r[1] for r in rows])
        if not rows:
            return Inserted(
                ids=[], run_after=None, enqueued_at=None, deadline=None,  # type: ignore[arg-type]
                status="", positions=positions,
            )  # fmt: skip
        _, _, run_after, enqueued_at, deadline, status, window = rows[0]
        return Inserted(
            ids=[row[0] for row in rows],
            run_after=_parse(run_after),  # type: ignore[arg-type]
            enqueued_at=_parse(enqueued_at),  # type: ignore[arg-type]
            deadline=_parse(deadline),
            status=status,
            unique_window=_parse(window),
            positions=positions,
        )

    def replace_waiting(self, job: NewJob, key: str, payload: tuple[str, str]) -> int | None:
        # One statement under SQLite's write lock: a claim cannot come between the check of
        # the status and the write.
        run_after = f"COALESCE(:run_at, {_from_now(':delay')})"
        sql = (
            f"UPDATE {self.table} SET args = json(:args), kwargs = json(:kwargs), "
            f"run_after = {run_after}, flow_key = COALESCE(:fkey, flow_key), "
            f"deadline = COALESCE(:deadline_at, CASE WHEN :deadline_in IS NOT NULL "
            f"  THEN {_from_now(':deadline_in')} END, deadline), "
            f"status = CASE WHEN status IN ('ready', 'scheduled') THEN "
            f"  CASE WHEN {run_after} > {_CLOCK} THEN 'scheduled' ELSE 'ready' END "
            f"  ELSE status END "
            f"WHERE task_name = :task_name AND unique_key = :key "
            f"AND status IN ('blocked', 'scheduled', 'ready', 'held') RETURNING id"
        )
        params = job.params(self.connection.ops.adapt_datetimefield_value)
        params["key"] = key
        params["args"], params["kwargs"] = payload
        params["fkey"] = None if job.flow_keys is None else job.flow_keys[0]
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return None if row is None else row[0]

    def claim(
        self,
        queues: Sequence[str],
        limit: int,
        owner: str,
        now: datetime | None = None,
        *,
        ahead: bool = False,
    ) -> list[ClaimedJob]:
        # One bounded subquery per queue, each walking wq_job_claim in order and stopping after
        # `limit` rows; one `queue IN (...)` scan would sort the whole ready set under the write
        # lock. `+status`: the unary plus keeps SQLite from reaching the rows to update through
        # the index on status (wq_job_status_finished), which visits every ready row; the rows
        # are the subquery's few ids, looked up by primary key.
        # A paused queue (a Queue row with paused_at) contributes nothing: its branch's
        # NOT EXISTS does not depend on the row, so SQLite evaluates it once per claim.
        order = "ORDER BY priority DESC, run_after, id LIMIT :limit"
        per_queue = [
            f"SELECT * FROM (SELECT id, priority, run_after FROM {self.table} "
            f"INDEXED BY wq_job_claim WHERE status = 'ready' AND flow_key IS NULL "
            f"AND queue = :q{i} AND run_after <= {NOW} {'AND attempt = 0 ' if ahead else ''}"
            f"AND NOT EXISTS (SELECT 1 FROM {self.queue_table} "
            f"WHERE name = :q{i} AND paused_at IS NOT NULL) {order})"
            for i in range(len(queues))
        ]
        picked = (
            per_queue[0]
            if len(per_queue) == 1
            else f"SELECT id FROM ({' UNION ALL '.join(per_queue)}) {order}"
        )
        sql = (
            f"UPDATE {self.table} SET {_LEASE_AHEAD if ahead else _LEASE} "
            f"WHERE id IN (SELECT id FROM ({picked})) AND +status = 'ready' RETURNING {_CLAIMED}"
        )
        params: dict[str, Any] = {"now": self._now_param(now), "limit": limit, "owner": owner}
        params.update((f"q{i}", queue) for i, queue in enumerate(queues))
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        jobs = [_claimed(row) for row in rows]
        jobs.sort(key=lambda j: (-j.priority, j.id))
        return jobs

    def flow_keys(
        self, queues: Sequence[str], after: str, limit: int, *, count: int = 0
    ) -> list[FlowGroup]:
        # The generic walk's skip scan of wq_job_flow, each walk in one statement (a recursive
        # CTE, one index probe per key): from the cursor on, then, only when that came short,
        # from the first key up to the cursor. Keys compare as the index orders them (BINARY:
        # UTF-8 bytes, the order of Python's str); with several queues, the keys of all in
        # (key, queue) order.
        ahead = self._walk_keys(queues, after, None, limit, count)
        if len(ahead) < limit and after:
            ahead += self._walk_keys(queues, "", after, limit, count)[: limit - len(ahead)]
        return [FlowGroup(queue, key, task, ready) for queue, key, task, ready in ahead]

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
        # One statement walks the keys, reads the limit keys' rows and counts their running
        # jobs. For a claim of keys with a rate, inside the claim's transaction, begun first
        # (otherwise ``hold`` begins nothing: the claim counts again, see claim_flow, and
        # this count only sizes the takes): BEGIN IMMEDIATE takes the
        # database's write lock, so from the count to the claim's COMMIT no other connection
        # writes, and what was counted is what the claim admits against: a limit is never
        # over-admitted. (Under transaction_mode DEFERRED, warned against by check_settings,
        # the walk reads a snapshot and the claim's write fails with "database is locked" if
        # another connection committed since: an error, never an over-admission.)
        # That lock, not a row, is what serialises the claimers of a key here (SQLite has no
        # row locks), so a key needs no row to be claimed under its limits: a key without one
        # has no recorded starts, and rows are written only with a rate's starts
        # (write_flow_starts).
        hold.begin()
        counted = [name for name, counts in limited.items() if counts]
        look = {"limited": json.dumps(list(limited)), "counted": json.dumps(counted),
                "prefix": prefix}  # fmt: skip
        rows = self._walk_keys(queues, after, None, limit, count, look)
        if len(rows) < limit and after:
            rows += self._walk_keys(queues, "", after, limit, count, look)[: limit - len(rows)]
        locked = {key: (json.loads(starts) if starts else [], int(running))
                  for _, key, _, _, is_limit, starts, running in rows if is_limit}  # fmt: skip
        return [FlowGroup(*row[:4]) for row in rows], locked

    def lock_flow_limits(
        self, keys: Sequence[str], counted: Collection[str]
    ) -> dict[str, tuple[list[list[float]], int]]:
        # After a walk alone (flow/claim.py), inside the transaction begun just before: the
        # rows there are and the running jobs, under the write lock, as walk_flow_limits reads
        # them; no row is made.
        if not keys:
            return {}
        limits = self.connection.ops.quote_name(FlowLimit._meta.db_table)
        sql = (
            f"SELECT u.value, l.starts, CASE WHEN u.value IN (SELECT value FROM "
            f"json_each(:counted)) THEN {self._running('u.value')} ELSE 0 END "
            f"FROM json_each(:keys) AS u LEFT JOIN {limits} AS l ON l.key = u.value"
        )
        params = {"keys": json.dumps(list(keys)), "counted": json.dumps(list(counted))}
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        return {key: (json.loads(starts) if starts else [], int(n)) for key, starts, n in rows}

    def _running(self, key: str) -> str:
        """The running jobs of the flow key ``key`` (an SQL expression), on wq_job_flow_running
        (named: without statistics SQLite would read every running job through the index on
        status, and test each one's key)."""
        return (
            f"(SELECT count(*) FROM {self.table} AS j INDEXED BY wq_job_flow_running "
            f"WHERE j.status = 'running' "
            f"AND j.flow_key IS NOT NULL AND j.flow_key = {key})"
        )

    def write_flow_starts(self, starts: Mapping[str, list[list[float]]]) -> None:
        # One upsert: a key's row is made by its first starts (walk_flow_limits makes none).
        if not starts:
            return
        limits = self.connection.ops.quote_name(FlowLimit._meta.db_table)
        rows = ", ".join(f"(:k{i}, json(:s{i}), {_CLOCK})" for i in range(len(starts)))
        params: dict[str, Any] = {}
        for i, (key, value) in enumerate(starts.items()):
            params[f"k{i}"], params[f"s{i}"] = key, json.dumps(value)
        with self.connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {limits} (key, starts, updated_at) VALUES {rows} "
                f"ON CONFLICT (key) DO UPDATE SET starts = excluded.starts, "
                f"updated_at = excluded.updated_at",
                params,
            )

    def _walk_keys(
        self,
        queues: Sequence[str],
        low: str,
        high: str | None,
        limit: int,
        count: int = 0,
        look: Mapping[str, str] | None = None,
    ) -> list[Any]:
        """The walk's rows (queue, key, task, ready jobs counted up to ``count``, or None if
        ``count`` is 0); with ``look`` (``walk_flow_limits``) each also says whether it is a
        limit key, and has the key's limit row's starts (None: no row) and its running jobs
        (counted for tasks with ``concurrency=`` only)."""
        if not queues or limit <= 0:
            return []
        shape = ("walk", len(queues), high is None, count > 0, look is not None)
        sql = self._statements.get(shape) or self._remember(shape, self._walk_sql(*shape[1:]))
        params: dict[str, Any] = {"low": low, "high": high, "limit": limit, **(look or {})}
        if count > 0:
            params["count"] = count
        params.update((f"q{i}", queue) for i, queue in enumerate(queues))
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        rows.sort(key=lambda row: (row[1], row[0]))
        return rows[:limit]

    def _walk_sql(self, queues: int, unbounded: bool, count: bool, look: bool) -> str:
        ready = (
            f"FROM {self.table} INDEXED BY wq_job_flow WHERE status = 'ready' "
            f"AND flow_key IS NOT NULL AND queue = {{queue}}"
        )
        bound = "" if unbounded else " AND flow_key <= :high"
        step = f"SELECT flow_key {ready} AND flow_key > {{low}}{bound} ORDER BY flow_key LIMIT 1"
        served = " UNION ALL ".join(f"SELECT :q{i}" for i in range(queues))
        # The count reads at most `count` entries of the key's (covering) index range.
        counted = (
            f"(SELECT count(*) FROM (SELECT 1 {ready.format(queue='w.queue')} "
            f"AND flow_key = w.key LIMIT :count))"
            if count
            else "NULL"
        )
        # With the look, MATERIALIZED: each walked key's task is read once, not once for
        # every expression naming it (without, it is named once, and a table of the walked
        # rows costs more than it saves).
        walked = (
            f"walked AS {'MATERIALIZED ' if look else ''}(SELECT w.queue, w.key, "
            f"(SELECT task_name "
            f"{ready.format(queue='w.queue')} AND flow_key = w.key LIMIT 1) AS task, "
            f"{counted} AS ready FROM walk AS w WHERE w.key IS NOT NULL)"
        )
        select = "SELECT queue, key, task, ready FROM walked"
        if look:
            limits = self.connection.ops.quote_name(FlowLimit._meta.db_table)
            select = (
                f"SELECT g.queue, g.key, g.task, g.ready, g.is_limit, l.starts, CASE WHEN "
                f"g.is_limit AND g.task IN (SELECT value FROM json_each(:counted)) "
                f"THEN {self._running('g.key')} ELSE 0 END "
                f"FROM (SELECT *, task IN (SELECT value FROM json_each(:limited)) "
                f"AND substr(key, 1, length(:prefix)) = :prefix AS is_limit FROM walked) AS g "
                f"LEFT JOIN {limits} AS l ON g.is_limit AND l.key = g.key"
            )
        return (
            f"WITH RECURSIVE served(name) AS ({served}), walk(queue, key, n) AS ("
            f"SELECT s.name, ({step.format(queue='s.name', low=':low')}), 1 FROM served AS s "
            f"WHERE NOT EXISTS (SELECT 1 FROM {self.queue_table} AS p "
            f"WHERE p.name = s.name AND p.paused_at IS NOT NULL) "
            f"UNION ALL SELECT w.queue, ({step.format(queue='w.queue', low='w.key')}), w.n + 1 "
            f"FROM walk AS w WHERE w.key IS NOT NULL AND w.n < :limit), {walked} {select}"
        )

    def claim_flow(
        self, picks: Sequence[FlowPick], limit: int, owner: str, now: datetime | None = None
    ) -> list[ClaimedJob]:
        if not picks:
            return []
        # One bounded subquery per key, walking wq_job_flow in that key's claim order; the
        # rounds (every key's first job, then every key's second...) make the order. When the
        # takes add up to no more than the limit (the claimer gave each key its share of the
        # rounds), every job picked is claimed, and the rounds need no ranking here: a window
        # function per key costs more than the rest of the claim.
        ranked = sum(pick.take for pick in picks) > limit
        # A pick with a cap takes no more than its key's room, counted here: this statement
        # holds the write lock from its first read to its end (autocommitted, it is its own
        # transaction), so the count is what it admits against, with no BEGIN IMMEDIATE around
        # the walk. Picks of one key (its jobs in several queues) share the room: each is
        # bounded by what the earlier ones may take.
        taken: dict[str, int] = {}
        caps: dict[int, int] = {}
        for i, pick in enumerate(picks):
            if pick.cap is not None:
                caps[i] = pick.cap - taken.get(pick.key, 0)
                taken[pick.key] = taken.get(pick.key, 0) + pick.take
        capped = tuple(i in caps for i in range(len(picks)))
        shape = ("claim_flow", ranked, capped)
        sql = self._statements.get(shape) or self._remember(
            shape, self._claim_flow_sql(ranked, capped)
        )
        params: dict[str, Any] = {"now": self._now_param(now), "owner": owner}
        if ranked:
            params["limit"] = limit
        for i, pick in enumerate(picks):
            params.update({f"q{i}": pick.queue, f"k{i}": pick.key, f"n{i}": pick.take})
            if ranked:
                params[f"t{i}"] = pick.turn
            if i in caps:
                params[f"c{i}"] = caps[i]
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            rows = cursor.fetchall()
        jobs = [_claimed(row) for row in rows]
        # RETURNING comes in no particular order: put the rounds back (within a key, claim
        # order by priority then id; then each key's turn).
        turns: dict[tuple[str, str | None], int] = {(p.queue, p.key): p.turn for p in picks}
        jobs.sort(key=lambda j: (turns[(j.queue, j.flow_key)], -j.priority, j.id))
        rounds: dict[str | None, int] = {}
        ordered = []
        for job in jobs:
            rounds[job.flow_key] = rounds.get(job.flow_key, 0) + 1
            ordered.append((rounds[job.flow_key], turns[(job.queue, job.flow_key)], job))
        ordered.sort(key=lambda entry: entry[:2])
        return [job for _, _, job in ordered]

    def _claim_flow_sql(self, ranked: bool, capped: Sequence[bool]) -> str:
        per_key = [
            (
                f"SELECT id, row_number() OVER (ORDER BY priority DESC, run_after, id) AS round, "
                f":t{i} AS turn FROM "
                if ranked
                else "SELECT id FROM "
            )
            + f"(SELECT id, priority, run_after FROM {self.table} "
            f"INDEXED BY wq_job_flow WHERE status = 'ready' AND flow_key IS NOT NULL "
            f"AND queue = :q{i} AND flow_key = :k{i} AND run_after <= {NOW} "
            f"ORDER BY priority DESC, run_after, id LIMIT "
            + (
                f"max(0, min(:n{i}, :c{i} - {self._running(f':k{i}')})))"
                if capped[i]
                else f":n{i})"
            )
            for i in range(len(capped))
        ]
        picked = (
            f"SELECT id FROM (SELECT id, round, turn FROM ({' UNION ALL '.join(per_key)}) "
            f"ORDER BY round, turn LIMIT :limit)"
            if ranked
            else " UNION ALL ".join(per_key)
        )
        return (
            f"UPDATE {self.table} SET {_LEASE} WHERE id IN ({picked}) AND +status = 'ready' "
            f"RETURNING {_CLAIMED}, flow_key"
        )

    def batch_backlog(
        self, groups: Sequence[tuple[str, str, int]], now: datetime | None = None
    ) -> dict[tuple[str, str], tuple[int, float]]:
        if not groups:
            return {}
        # One bounded branch per group, each reading at most `size` entries of wq_job_flow.
        branches = [
            f"SELECT :q{i}, :k{i}, count(*), "
            f"(julianday({NOW}) - julianday(min(run_after))) * 86400.0 FROM (SELECT run_after "
            f"FROM {self.table} INDEXED BY wq_job_flow WHERE status = 'ready' AND queue = :q{i} "
            f"AND flow_key = :k{i} AND run_after <= {NOW} AND NOT EXISTS (SELECT 1 FROM "
            f"{self.queue_table} WHERE name = :q{i} AND paused_at IS NOT NULL) "
            f"ORDER BY priority DESC, run_after, id LIMIT :s{i})"
            for i in range(len(groups))
        ]
        params: dict[str, Any] = {"now": self._now_param(now)}
        for i, (queue, key, size) in enumerate(groups):
            params.update({f"q{i}": queue, f"k{i}": key, f"s{i}": size})
        with self.connection.cursor() as cursor:
            cursor.execute(" UNION ALL ".join(branches), params)
            return {(q, k): (n, waited) for q, k, n, waited in cursor.fetchall() if n}

    def claim_batch(
        self,
        queue: str,
        flow_key: str,
        size: int,
        wait: float,
        owner: str,
        now: datetime | None = None,
    ) -> BatchClaim:
        # The group's first `size` ready jobs in claim order, on wq_job_flow. A look without
        # the write lock first: an idle or filling group (the usual case) costs one read. The
        # claim then decides again under the write lock, in its one statement, so a batch
        # another worker took meanwhile is never claimed half.
        picked = (
            f"SELECT id, run_after FROM {self.table} INDEXED BY wq_job_flow "
            f"WHERE status = 'ready' AND queue = :queue AND flow_key = :key "
            f"AND run_after <= {NOW} AND NOT EXISTS (SELECT 1 FROM {self.queue_table} "
            f"WHERE name = :queue AND paused_at IS NOT NULL) "
            f"ORDER BY priority DESC, run_after, id LIMIT :size"
        )
        due = (
            f"count(*) >= :size OR min(run_after) <= "
            f"strftime({_FORMAT}, {NOW}, printf('%%+.6f seconds', -:wait))"
        )
        params: dict[str, Any] = {
            "now": self._now_param(now), "queue": queue, "key": flow_key, "size": size,
            "wait": float(wait), "owner": owner,
        }  # fmt: skip
        look = (
            f"WITH picked AS ({picked}) SELECT {due}, "
            f"(julianday(min(run_after)) - julianday({NOW})) * 86400.0 + :wait FROM picked"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(look, params)
            is_due, due_in = cursor.fetchone()
            if not is_due:
                return BatchClaim(jobs=[], due_in=due_in)
            cursor.execute(
                f"WITH picked AS ({picked}) UPDATE {self.table} SET {_LEASE} "
                f"WHERE id IN (SELECT id FROM picked WHERE (SELECT {due} FROM picked)) "
                f"AND +status = 'ready' RETURNING run_after, {_CLAIMED}",
                params,
            )
            rows = cursor.fetchall()
        rows.sort(key=lambda row: (-row[4], row[0], row[1]))  # priority, run_after, id
        return BatchClaim(jobs=[_claimed(row[1:]) for row in rows])

    def claim_job(self, job_id: int, owner: str) -> ClaimedJob | None:
        # The plain claim's SET and RETURNING for one row by primary key, under the write lock.
        sql = (
            f"UPDATE {self.table} SET {_LEASE} "
            f"WHERE id = :id AND status = 'ready' AND flow_key IS NULL "
            f"AND NOT EXISTS (SELECT 1 FROM {self.queue_table} AS p "
            f"  WHERE p.name = {self.table}.queue AND p.paused_at IS NOT NULL) "
            f"RETURNING {_CLAIMED}"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"id": job_id, "owner": owner, "now": None})
            row = cursor.fetchone()
        return None if row is None else _claimed(row)

    def take_claim(
        self,
        key: str,
        job_id: int | None,
        ttl: float,
        connection: BaseDatabaseWrapper | None = None,
    ) -> bool:
        # One statement under the write lock: the insert, or the take-over of an expired
        # claim (the upsert's WHERE), or nothing. RETURNING gives a row only for the first two.
        sql = (
            f"INSERT INTO {self.claim_table} (key, job_id, claimed_at, expires_at) "
            f"VALUES (:key, :job_id, {_CLOCK}, {_from_now(':ttl')}) "
            f"ON CONFLICT (key) DO UPDATE SET job_id = excluded.job_id, "
            f"claimed_at = excluded.claimed_at, expires_at = excluded.expires_at "
            f"WHERE {self.claim_table}.expires_at <= {_CLOCK} RETURNING key"
        )
        with (connection or self.connection).cursor() as cursor:
            cursor.execute(sql, {"key": key, "job_id": job_id, "ttl": ttl})
            return cursor.fetchone() is not None

    def began(self, owner: str, leases: Sequence[tuple[int, int]]) -> set[int]:
        # No row locks: the statement waits for the write lock, so no row is ever skipped.
        if not leases:
            return set()
        leased, params = _leases(owner, leases)
        sql = (
            f"UPDATE {self.table} SET claimed_ahead = 0, started_at = {_CLOCK} "
            f"WHERE status = 'running' AND lease_owner = :owner AND claimed_ahead "
            f"AND {leased} RETURNING id"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {job_id for (job_id,) in cursor.fetchall()}

    def renew_leases(
        self, owner: str, leases: Sequence[tuple[int, int]]
    ) -> tuple[dict[int, bool], set[int]]:
        # No row locks: the statement waits for the write lock, so no row is ever skipped.
        if not leases:
            return {}, set()
        leased, params = _leases(owner, leases)
        sql = (
            f"UPDATE {self.table} SET lease_expires_at = "
            f"strftime({_FORMAT}, 'now', '+' || lease_seconds || ' seconds') "
            f"WHERE status = 'running' AND lease_owner = :owner AND {leased} "
            # The column itself, not `cancel_requested_at IS NOT NULL`: SQLite 3.40 folds that
            # expression to true in a RETURNING clause, cancelling every renewed job.
            f"RETURNING id, cancel_requested_at"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return {job_id: cancel is not None for job_id, cancel in cursor.fetchall()}, set()

    def record_many(
        self, owner: str, outcomes: Sequence[Outcome], *, skip_locked: bool = False
    ) -> Recorded:
        # SQLite has no row locks: the statement waits for the write lock, so nothing is busy.
        if not outcomes:
            return Recorded(written=set(), busy=set())
        # All outcomes arrive as one JSON parameter unpacked by json_each, so one statement
        # completes a whole batch while each row keeps its own fence. Every value was decided
        # by the outcome; the CASEs only pick which decided value applies.
        t = self.table
        cancel = f"{t}.cancel_requested_at IS NOT NULL"
        sql = (
            f"WITH v AS (SELECT {_columns(_OUTCOME_FIELDS)} FROM json_each(:batch)) "
            f"UPDATE {t} SET "
            f"status = CASE WHEN {cancel} THEN v.cancel_status ELSE v.status END, "
            f"finished_at = CASE WHEN v.finished OR {cancel} THEN {_CLOCK} END, "
            f"result = COALESCE(v.result, {t}.result), "
            f"errors = CASE WHEN v.has_error THEN json_insert({t}.errors, '$[#]', "
            f"  json_object('attempt', {t}.attempt, 'at', {_ISO_NOW}, "
            f"  'type', v.etype, 'message', v.emessage, 'traceback', v.etraceback, "
            f"  'worker', :owner)) "
            f"  ELSE {t}.errors END, "
            f"run_after = CASE WHEN v.delay IS NOT NULL THEN "
            f"  strftime({_FORMAT}, 'now', printf('%%+.6f seconds', v.delay)) "
            f"  ELSE {t}.run_after END, "
            f"attempts_charged = {t}.attempts_charged + COALESCE(v.charge_attempt, 0), "
            f"crashes_charged = {t}.crashes_charged + COALESCE(v.charge_crash, 0), "
            f"progress_current = CASE WHEN v.has_progress THEN v.pcurrent "
            f"  ELSE {t}.progress_current END, "
            f"progress_total = CASE WHEN v.has_progress THEN v.ptotal ELSE {t}.progress_total END, "
            f"progress_message = CASE WHEN v.has_progress THEN v.pmessage "
            f"  ELSE {t}.progress_message END, "
            f"progress_details = CASE WHEN v.has_progress THEN v.pdetails "
            f"  ELSE {t}.progress_details END, "
            f"lease_owner = NULL, lease_expires_at = NULL "
            f"FROM v WHERE {t}.id = v.id AND {t}.attempt = v.attempt "
            f"AND {t}.lease_owner = :owner AND {t}.status = 'running' "
            f"RETURNING {t}.id, {t}.attempt, {t}.status, {t}.workflow_id, {t}.queue, "
            f"{t}.task_name, (julianday('now') - julianday({t}.started_at)) * 86400.0, "
            f"(julianday({t}.started_at) - julianday({t}.run_after)) * 86400.0"
        )
        return self._fenced_write(sql, outcomes, owner)

    def write_progress(
        self, owner: str, reports: Sequence[Progress], *, skip_locked: bool = False
    ) -> Recorded:
        if not reports:
            return Recorded(written=set(), busy=set())
        t = self.table
        sql = (
            f"WITH v AS (SELECT {_columns(_PROGRESS_FIELDS)} FROM json_each(:batch)) "
            f"UPDATE {t} SET progress_current = v.pcurrent, progress_total = v.ptotal, "
            f"progress_message = v.pmessage, progress_details = v.pdetails "
            f"FROM v WHERE {t}.id = v.id AND {t}.attempt = v.attempt "
            f"AND {t}.lease_owner = :owner AND {t}.status = 'running' "
            f"RETURNING {t}.id, {t}.attempt"
        )
        return self._fenced_write(sql, reports, owner)

    def _fenced_write(
        self, sql: str, rows: Sequence[Outcome] | Sequence[Progress], owner: str
    ) -> Recorded:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"batch": self.batch(rows), "owner": owner})
            result = cursor.fetchall()
        return Recorded(
            written={(row[0], row[1]) for row in result},
            busy=set(),
            ended=[
                Ended(row[0], row[2], row[3])
                for row in result
                if len(row) > 2 and row[2] in _TERMINAL
            ],
            timings=[
                Timing(row[0], row[1], row[4], row[5], row[2], row[6], row[7])
                for row in result
                if len(row) > 2
            ],
        )

    def active_counts(self, now: datetime) -> list[ActiveCount]:
        # SQLite uses a partial index only for a condition written as the index's own (literal
        # values, not parameters), and with its statistics it would rather scan the table than
        # search the status index for five statuses: hence the literal list and INDEXED BY.
        statuses = ", ".join(f"'{status}'" for status in ACTIVE_STATUSES)
        due = "status = 'ready' AND run_after <= :now"
        sql = (
            f"SELECT queue, task_name, status, COUNT(*), SUM({due}), "
            f"MIN(CASE WHEN {due} THEN run_after END) "
            f"FROM {self.table} INDEXED BY wq_job_active WHERE status IN ({statuses}) "
            f"GROUP BY queue, task_name, status"
        )
        stamp = self.connection.ops.adapt_datetimefield_value(now)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": stamp})
            rows = cursor.fetchall()
        return [
            ActiveCount(queue, task, status, n, int(due_n or 0), _parse(oldest))
            for queue, task, status, n, due_n, oldest in rows
        ]

    def count_stats(self, counters: Sequence[tuple[str, str, str, int, int, int]]) -> None:
        if not counters:
            return
        table = self.stats_table
        fields = ("queue", "task_name", "name", "bucket", "shard", "count")
        # "WHERE true": SQLite's parser would take ON CONFLICT for a join's ON otherwise.
        sql = (
            f"INSERT INTO {table} (minute, queue, task_name, name, bucket, shard, count) "
            f"SELECT strftime('%%Y-%%m-%%d %%H:%%M:00', 'now'), {_columns(fields)} "
            f"FROM json_each(:batch) WHERE true "
            f"ON CONFLICT (minute, queue, task_name, name, bucket, shard) "
            f"DO UPDATE SET count = count + excluded.count"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"batch": counter_batch(counters)})

    def count_down(self, counts: Sequence[tuple[int, int, int]]) -> list[CountedDown]:
        if not counts:
            return []
        # One statement for every dependent, under the write lock; only waiting rows count.
        t = self.table
        sql = (
            f"WITH v AS (SELECT json_extract(value, '$[0]') AS id, "
            f"  json_extract(value, '$[1]') AS n, json_extract(value, '$[2]') AS s "
            f"  FROM json_each(:batch)) "
            f"UPDATE {t} SET waiting_on = {t}.waiting_on - v.n, "
            f"prerequisites_succeeded = {t}.prerequisites_succeeded + v.s "
            f"FROM v WHERE {t}.id = v.id AND {t}.status IN ({AWAITING_SQL}) "
            f"RETURNING {t}.id, {t}.waiting_on, {t}.prerequisites_succeeded, {t}.run_condition, "
            f"{t}.workflow_id, {t}.run_after <= {_CLOCK}, {t}.queue, {t}.status = 'held'"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"batch": json.dumps([list(row) for row in counts])})
            return [
                CountedDown(pk, waiting, ok, condition, workflow, bool(due), queue, bool(held))
                for pk, waiting, ok, condition, workflow, due, queue, held in cursor.fetchall()
            ]

    def promote(self, limit: int, now: datetime | None = None) -> list[str]:
        # wq_job_scheduled is ordered by run_after: the scan stops at the first job not due.
        sql = (
            f"UPDATE {self.table} SET status = 'ready' WHERE id IN (SELECT id FROM {self.table} "
            f"INDEXED BY wq_job_scheduled WHERE status = 'scheduled' AND run_after <= {NOW} "
            f"ORDER BY run_after LIMIT :limit) AND +status = 'scheduled' RETURNING queue"
        )
        with self.connection.cursor() as cursor:
            cursor.execute(sql, {"now": self._now_param(now), "limit": limit})
            return [row[0] for row in cursor.fetchall()]

    def now(self) -> datetime:
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT {_CLOCK}", ())  # params: `%%` unescaped
            return datetime.fromisoformat(cursor.fetchone()[0]).replace(tzinfo=UTC)

    # --- liveness: one host by definition, so a worker's pid tells ---------------------------

    def gone_workers(self) -> list[str]:
        rows = (
            WorkerProcess.objects.using(self.alias)
            .filter(host=socket.gethostname())
            .filter(self.trusted_liveness())
        )
        return [
            worker_id
            for worker_id, pid, token in rows.values_list("id", "pid", "liveness")
            if process_identity.is_gone(pid, token)
        ]

    def liveness_token(self) -> LivenessToken | None:
        token = process_identity.own_token()
        return None if token is None else LivenessToken(value=token)

    def worker_watch(self) -> PidWatch:
        return PidWatch()

    # --- configuration: system checks and start-up errors ----------------------------------------

    @classmethod
    def check_settings(cls, alias: str, settings_dict: Mapping[str, Any]) -> list[CheckMessage]:
        options = settings_dict.get("OPTIONS") or {}
        messages: list[CheckMessage] = []
        init = str(options.get("init_command", "")).replace(" ", "").lower()
        if "journal_mode=wal" not in init:
            messages.append(
                checks.Warning(
                    f"SQLite database {alias!r} is not in WAL mode: workers and web requests "
                    f"will block each other and see 'database is locked'.",
                    hint='Add OPTIONS["init_command"] = "PRAGMA journal_mode=WAL; PRAGMA '
                    'synchronous=NORMAL; PRAGMA busy_timeout=5000".',
                    id="django_workqueue.W003",
                )
            )
        if str(options.get("transaction_mode", "")).upper() != "IMMEDIATE":
            messages.append(
                checks.Warning(
                    f"SQLite database {alias!r} starts transactions DEFERRED: a transaction "
                    f"that reads and then writes can fail with 'database is locked' under load.",
                    hint='Add OPTIONS["transaction_mode"] = "IMMEDIATE".',
                    id="django_workqueue.W004",
                )
            )
        return messages

    def incurable_connection_error(self, exc: BaseException) -> str | None:
        if getattr(exc.__cause__, "sqlite_errorcode", None) != sqlite3.SQLITE_CANTOPEN:
            return None
        name = str(self.connection.settings_dict.get("NAME"))
        where = f"correct DATABASES[{self.alias!r}]['NAME']"
        directory = Path(name).parent
        if not directory.is_dir():
            return (
                f"the directory {str(directory)!r} of database file {name!r} does not exist; "
                f"create it and run 'manage.py migrate --database {self.alias}', or {where}"
            )
        return (
            f"database file {name!r} cannot be opened ({exc}); check that this user may read "
            f"and write it and its directory, or {where}"
        )


_OUTCOME_FIELDS = (
    "id", "attempt", "status", "cancel_status", "finished", "result", "has_error", "etype",
    "emessage", "etraceback", "delay", "charge_attempt", "charge_crash", "has_progress",
    "pcurrent", "ptotal", "pmessage", "pdetails",
)  # fmt: skip
_PROGRESS_FIELDS = ("id", "attempt", "pcurrent", "ptotal", "pmessage", "pdetails")


def _columns(fields: Iterable[str]) -> str:
    return ", ".join(f"json_extract(value, '$.{name}') AS {name}" for name in fields)


def _claimed(row: Sequence[Any]) -> ClaimedJob:
    """A ``ClaimedJob`` from a claim's ``RETURNING {_CLAIMED}`` row."""
    return ClaimedJob(*row[:8], _parse(row[8]), *row[9:])  # type: ignore[call-arg]


def _parse(value: Any) -> datetime | None:
    """A UTC datetime from what SQLite returns: text, or a naive datetime (Django's converter)."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


class PidWatch(WorkerWatch):
    """Looks at a worker's pid on this host every ``INTERVAL`` (no query: the kernel answers)."""

    INTERVAL = 0.2

    def __init__(self) -> None:
        self._interrupted = threading.Event()

    def wait_gone(self, worker: Any) -> bool:
        if worker.host != socket.gethostname() or not worker.liveness:
            self._interrupted.wait()  # not ours to see: until the holder changes
        while not self._interrupted.is_set():
            if process_identity.is_gone(worker.pid, worker.liveness):
                return True
            self._interrupted.wait(self.INTERVAL)
        self._interrupted.clear()
        return False

    def interrupt(self) -> None:
        self._interrupted.set()
