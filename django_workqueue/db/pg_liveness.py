"""PostgreSQL liveness: a worker is alive while its LISTEN session holds its advisory lock.

Each worker's LISTEN connection (direct to the server, never through a pooler in transaction
mode: ``WORKQUEUE["LISTEN_DSN"]``) takes a session-level advisory lock, in *shared* mode, on a
key of its own, and the worker records the key in its ``WorkerProcess`` row. When the process
dies the server ends the session and drops the lock, so:

* the reaper reads which registered keys no session holds (``pg_locks``, one subquery of the
  query it runs anyway) and takes their jobs back at once, whatever their lease. A key counts
  only if its session took it since the server last started (``WorkerProcess.liveness_since``,
  the server's clock at the take): a restart ends every session, the live workers' too, and
  their keys prove nothing until they take them again (``_TRUSTED``, the one home of the rule);
* a worker waiting to take over the maintenance lease blocks on the holder's key in *exclusive*
  mode on a connection of its own (``SessionWatch``): granted the moment the holder's session
  ends, at no cost while it waits. Only shared holds count as alive, so a watcher that holds
  the key for the moment between its grant and its unlock never makes a dead worker look alive.

A watch is a connection, so only a few workers keep one: the *standbys*, at most
``WORKQUEUE["MAINTAINER_STANDBYS"]``. A worker is one while its LISTEN session holds one of
that many standby keys (``take_standby``: one statement, at start-up or when told a slot is
free; the key dies with the session). A standby that becomes the maintainer gives its key up
(``release_standby``) with a NOTIFY (``STANDBY_FREE``) that makes the others try once; so do a
worker that stops and the maintainer that finds a dead worker. Nothing polls for a free slot.
"""

from __future__ import annotations

import logging
import random
import threading
from typing import Any

from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from ..models import WorkerProcess
from .base import LivenessToken, WorkerWatch

logger = logging.getLogger("django_workqueue.db")

LOCK_CLASS = 0x57514C56
"""The first half of every liveness key (``pg_advisory_lock(int, int)``): keeps the keys apart
from the application's own advisory locks."""

_KEYS = (1, 2**31 - 1)  # the second half: a positive int4, as pg_locks shows it (objid)

STANDBY_CLASS = 0x57514C53
"""The first half of the standby keys; the second is the slot, 0 to MAINTAINER_STANDBYS - 1."""

STANDBY_FREE = "workqueue:standby-free"
"""The payload of the NOTIFY (on the ready-jobs channel) that says a standby slot may be free."""


def hold(connection: Any, wanted: str | None = None) -> LivenessToken | None:
    """Take a liveness key on ``connection`` (a psycopg connection in autocommit): ``wanted``
    again after a reconnect if it is free, else a fresh one; return it with when it was taken
    (the server's clock), or None if none could be had (the worker then relies on leases)."""
    for attempt in range(5):
        key = int(wanted) if wanted and not attempt else random.randint(*_KEYS)
        # Exclusive first: fails if any session holds the key (a collision, or a watcher still
        # on it), so that no two live workers ever share one. Then the shared hold that
        # watchers wait on, and the exclusive one is let go.
        [taken] = connection.execute(
            "SELECT pg_try_advisory_lock(%s, %s)", (LOCK_CLASS, key)
        ).fetchone()
        if taken:
            [taken_at] = connection.execute(
                "SELECT statement_timestamp() FROM pg_advisory_lock_shared(%s, %s)",
                (LOCK_CLASS, key),
            ).fetchone()
            connection.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, key))
            return LivenessToken(value=str(key), taken_at=taken_at)
    logger.warning("no liveness key could be taken: this worker's crash waits for its leases")
    return None


def take_standby(connection: Any, slots: int) -> int | None:
    """Take the first free of ``slots`` standby keys on ``connection`` (one statement; held
    until released or the session ends); return its slot, or None if all are taken."""
    if slots <= 0:
        return None
    # The filter runs row by row and LIMIT stops at the first lock granted: at most one taken.
    row = connection.execute(
        "SELECT slot FROM generate_series(0, %s) AS slot"
        " WHERE pg_try_advisory_lock(%s, slot) LIMIT 1",
        (slots - 1, STANDBY_CLASS),
    ).fetchone()
    return None if row is None else int(row[0])


def release_standby(connection: Any, slot: int, channel: str) -> None:
    """Give standby ``slot`` up and say so on ``channel`` (one statement: the NOTIFY is sent at
    its commit, after the unlock, so whoever hears it finds the key free)."""
    connection.execute(
        "SELECT pg_advisory_unlock(%s, %s), pg_notify(%s, %s)",
        (STANDBY_CLASS, slot, channel, STANDBY_FREE),
    )


# When a key proves its worker's death once no session holds it: the row shows a key, taken
# since the server last started. A key taken before then was dropped with every session at
# the restart (or the crash): until its worker, alive, takes it again, no session holding it
# says nothing, and the worker's jobs wait for their leases. Columns of WorkerProcess,
# unqualified: the only table of the query (trusted()) or of the subquery (gone_workers()).
_TRUSTED = "liveness <> '' AND liveness_since > pg_postmaster_start_time()"


def trusted() -> RawSQL:
    """The ``WorkerProcess`` rows whose key proves their worker's death once no session holds
    it (a condition, for ``filter()`` or ``annotate()``)."""
    return RawSQL(_TRUSTED, (), output_field=BooleanField())  # noqa: S611 - constant SQL


def gone_workers() -> RawSQL:
    """The ids of registered workers whose trusted liveness key (``trusted``) no session holds
    in shared mode: a subquery, for ``id__in=`` or ``lease_owner__in=``."""
    table = WorkerProcess._meta.db_table
    return RawSQL(  # noqa: S611 - the table name is ours, the key class a parameter
        f"SELECT id FROM {table} w WHERE {_TRUSTED} AND NOT EXISTS ("
        " SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted"
        " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        " AND l.classid = %s AND l.objsubid = 2 AND l.mode = 'ShareLock'"
        " AND l.objid::text = w.liveness)",
        (LOCK_CLASS,),
    )


class SessionWatch(WorkerWatch):
    """Blocks on a worker's liveness key, on a direct connection of its own, until the worker's
    session ends. One connection per watching worker, idle while the holder lives."""

    def __init__(self, params: dict[str, Any]) -> None:
        self.params = params
        self.connection: Any = None
        self._lock = threading.Lock()
        self._interrupted = False
        self._busy = False
        self._woken = threading.Event()

    def wait_gone(self, worker: Any) -> bool:
        import psycopg  # the optional postgres extra: loaded only on PostgreSQL

        with self._lock:
            if self._interrupted:
                self._interrupted = False
                return False
            self._busy = True
        try:
            if not worker.liveness:  # leases only: nothing to wait on until the holder changes
                self._woken.wait()
                return False
            if self.connection is None or self.connection.closed:
                self.connection = psycopg.connect(**self.params, autocommit=True)
            with self._lock:
                if self._interrupted:
                    return False
            # An interrupt between the check above and the server starting this statement is
            # missed: the watch then stays on this worker until it dies (leases cover the rest).
            self.connection.execute(
                "SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, int(worker.liveness))
            )
            self.connection.execute(
                "SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, int(worker.liveness))
            )
            return True
        except psycopg.errors.QueryCanceled:
            return False
        except psycopg.Error as exc:  # the connection is lost: the caller waits and tries again
            # Info, not a warning: on a full server this repeats (with back-off) and costs
            # only the speed of a takeover, which then waits for the maintenance lease.
            logger.info("liveness watch: no connection (%s)", exc)
            self.close()
            return False
        finally:
            with self._lock:
                self._busy = self._interrupted = False
                self._woken.clear()

    def interrupt(self) -> None:
        with self._lock:
            self._interrupted = True
            self._woken.set()
            running = self.connection if self._busy else None
        if running is not None:
            try:
                running.cancel_safe()
            except Exception as exc:  # the wait ends anyway when its connection fails
                logger.debug("could not cancel a liveness watch: %s", exc)

    def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception as exc:
                logger.debug("could not close a liveness watch: %s", exc)
