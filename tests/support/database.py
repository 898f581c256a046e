"""The database as tests read it: its clock, rows read back, leases forced past their end, a
LISTEN of the wake-up channel, and another session's work on a thread."""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connection, connections, transaction

from django_workqueue.models import Job
from testproject.testapp.models import LedgerEntry

THIS_DATABASES_LOCKS = (
    " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
"""A filter of ``pg_locks`` to this database's advisory locks (they are per database, but
``pg_locks`` shows the whole server's, and other suites may share the server)."""


def db_now() -> dt.datetime:
    """The database's clock (the one every lease and schedule is compared with)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT now()")
            return cursor.fetchone()[0]
        cursor.execute("SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')")
        return dt.datetime.fromisoformat(cursor.fetchone()[0]).replace(tzinfo=dt.UTC)


def parse_at(value: str) -> dt.datetime:
    """An error entry's ``at`` (ISO text written by the database) as an aware datetime."""
    parsed = dt.datetime.fromisoformat(value)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def fresh(job: Job) -> Job:
    job.refresh_from_db()
    return job


def row_snapshot(job: Job | int) -> dict[str, Any]:
    """Every column of a job row, to prove that nothing changed it."""
    job_id = job.pk if isinstance(job, Job) else job
    return Job.objects.filter(pk=job_id).values().get()


def ledger(job: Job | int) -> list[tuple[int, str]]:
    """(attempt, note) of every ledger entry of ``job``, in the order they were written."""
    job_id = job.pk if isinstance(job, Job) else job
    rows = LedgerEntry.objects.filter(job_id=job_id).order_by("id")
    return list(rows.values_list("attempt", "note"))


def ledger_with_pids(job: Job) -> list[tuple[int, str, int]]:
    """(attempt, note, pid of the worker process) of every ledger entry of ``job``, in order."""
    rows = LedgerEntry.objects.filter(job_id=job.pk).order_by("id")
    return list(rows.values_list("attempt", "note", "pid"))


def ledger_order() -> list[int]:
    """Job ids in the order their bodies ran (one ledger entry per attempt)."""
    return list(LedgerEntry.objects.order_by("id").values_list("job_id", flat=True))


@contextmanager
def expire_and_reap(job: Job) -> Iterator[None]:
    """Force ``job``'s lease into the past and reap it, in one transaction.

    One transaction, so a heartbeat of the worker that runs the job cannot renew the lease
    between the UPDATE and the reaper; the worker's renewal then finds the row reaped.
    """
    from django_workqueue.maintenance import reaper

    with transaction.atomic():
        past = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
        updated = Job.objects.filter(pk=job.pk, status="running").update(lease_expires_at=past)
        assert updated == 1, f"job {job.pk} was not running"
        assert reaper.run_once() == 1
        yield


@contextmanager
def listening() -> Iterator[Any]:
    """A psycopg connection of its own (autocommit) that LISTENs on the wake-up channel of the
    test database; ``.notifies(timeout=…)`` yields what it hears. PostgreSQL only."""
    import psycopg

    from django_workqueue.conf import workqueue_settings
    from django_workqueue.db.postgresql import CHANNEL, listen_params

    # As a worker's listener: straight to the server when the suite goes through a pooler.
    params = listen_params(connection, workqueue_settings.LISTEN_DSN)
    with psycopg.connect(**params, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        yield listener


def sessions_waiting_for_a_lock() -> int:
    """How many sessions of the test database wait for a row's or a table's lock now (not
    a would-be maintainer blocked on its holder's advisory lock). PostgreSQL only."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND wait_event <> 'advisory'"
        )
        return cursor.fetchone()[0]


def in_another_session(body: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException]]:
    """Run ``body`` on a thread (its own connection); return the thread and what it raised."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            body()
        except BaseException as exc:
            failures.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, failures
