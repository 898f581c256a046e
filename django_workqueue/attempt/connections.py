"""The worker's database connections: named after the worker, told apart (a lost connection
from a refused statement), and tidied between jobs as Django tidies a request's."""

from __future__ import annotations

import logging
import threading
from typing import Any

from django.db import InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.signals import connection_created

from ..db import Driver

logger = logging.getLogger("django_workqueue.worker")

# The worker each thread (control, slots) serves (``serving.worker``), so that every connection
# the thread opens to the jobs database is named after it.
serving = threading.local()


def _name_new_connection(sender: object, connection: BaseDatabaseWrapper, **kwargs: Any) -> None:
    worker = getattr(serving, "worker", None)
    if worker is None or connection.alias != worker.alias:
        return
    try:  # the connection that was just opened, which need not be the thread's own
        worker.driver.name_session(worker.session_name, connection)
    except Exception as exc:  # a name is for dashboards: it must never fail a connect
        logger.debug("worker %s: could not name a session: %s", worker.id, exc)


connection_created.connect(_name_new_connection, dispatch_uid="django_workqueue.worker.name")


def is_transient(exc: BaseException) -> bool:
    """Worth retrying as it was: a lost connection or a lock wait that timed out."""
    return isinstance(exc, OperationalError | InterfaceError)


def is_connection_error(driver: Driver, exc: BaseException) -> bool:
    """Whether ``exc`` means the connection is gone (or the database is down or locked), as
    opposed to the database refusing one statement or a lock wait timing out."""
    return isinstance(exc, OperationalError | InterfaceError) and not driver.is_lock_timeout(exc)


def close_unusable_connections() -> None:
    """Close this thread's connections that no longer answer (after a database restart)."""
    for conn in connections.all(initialized_only=True):
        if conn.connection is not None and not conn.is_usable():
            conn.close()


def tidy_connections(own: str | None = None) -> None:
    """Treat each job like a request: drop broken connections and roll back leftovers.

    Unlike a web request, a worker keeps its healthy connections between jobs even with
    ``CONN_MAX_AGE = 0`` (one per slot thread, the budget of concurrency + a few); a positive
    ``CONN_MAX_AGE`` still caps their age. ``own``: the worker's database (``_wrappers``).
    """
    for conn in _wrappers(own):
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


def _wrappers(own: str | None) -> Any:
    """This thread's connection wrappers, as ``connections.all(initialized_only=True)``.

    In a project of one database, the worker's own (``own``), its wrapper is looked up once
    and made if this thread has none yet: the worker loads that backend anyway, and asking
    first whether the thread has one costs a second look-up in Django's per-thread store and
    a raised AttributeError, for every job (issue 32: the engine's per-job budget). With more
    databases, a database this thread never used is never loaded here (a configured backend
    a project does not use may not even import), as in Django's own request cycle."""
    if own is not None and len(connections.settings) == 1 and own in connections.settings:
        return (connections[own],)
    return connections.all(initialized_only=True)
