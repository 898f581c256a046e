"""Helpers shared by the worker, lease, claim and atomic integration tests.

The tasks defined here exist only for tests that need a behaviour the test app's tasks do not
have (a backoff to measure, a body that holds its first attempt, a probe of the slot's
connection). Importing this module registers them, so workers in this process can run them.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.test import override_settings

from django_workqueue import task
from django_workqueue.models import Job
from django_workqueue.worker.runner import Worker
from testproject.testapp.models import Effect, LedgerEntry

# --- reading state ------------------------------------------------------------------------


def ledger(job: Job | int) -> list[tuple[int, str]]:
    """(attempt, note) of every ledger entry of ``job``, in the order they were written."""
    job_id = job.pk if isinstance(job, Job) else job
    rows = LedgerEntry.objects.filter(job_id=job_id).order_by("id")
    return list(rows.values_list("attempt", "note"))


def ledger_order() -> list[int]:
    """Job ids in the order their bodies ran (one ledger entry per attempt)."""
    return list(LedgerEntry.objects.order_by("id").values_list("job_id", flat=True))


def fresh(job: Job) -> Job:
    job.refresh_from_db()
    return job


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


def row_snapshot(job_id: int) -> dict[str, Any]:
    """Every column of a job row, to prove that nothing changed it."""
    return Job.objects.filter(pk=job_id).values().get()


def workqueue_settings(**overrides: Any) -> override_settings:
    """``override_settings`` for a few WORKQUEUE keys, keeping the test project's others."""
    return override_settings(WORKQUEUE={**settings.WORKQUEUE, **overrides})


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


def join_slots(worker: Worker, timeout: float = 20.0) -> None:
    """Wait for a stopped worker's slot threads, which may outlive ``run()`` past the grace.

    A slot still busy after the worker returned would otherwise write into the next test's
    tables (and on PostgreSQL keep a connection to the test database open).
    """
    for slot in worker._slots:
        slot.join(timeout)
        assert not slot.is_alive(), f"{slot.name} did not finish"


# --- test-only tasks ----------------------------------------------------------------------


@task(max_attempts=3, backoff=30)
def fails_with_backoff(context: Any) -> None:
    raise ValueError(f"failure on attempt {context.attempt}")


#: What attempt 1 of ``hold_first_attempt`` saw when it stopped waiting, by job id.
first_attempt_results: dict[int, dict[str, Any]] = {}


@task(max_attempts=3, lease_seconds=2)
def hold_first_attempt(context: Any) -> str:
    """Attempt 1 waits until its worker cancels it, then still returns (a late write)."""
    LedgerEntry.objects.create(job_id=context.job_id, attempt=context.attempt, pid=0, note="start")
    if context.attempt == 1:
        cancelled = context.cancelled.wait(10)
        first_attempt_results[context.job_id] = {
            "cancelled": cancelled,
            "lease_lost": context.lease_lost,
        }
        LedgerEntry.objects.create(job_id=context.job_id, attempt=1, pid=0, note="late")
        return "late result of attempt 1"
    return f"attempt {context.attempt}"


@task(max_attempts=3, backoff=0)
def leaks_transaction(context: Any) -> str:
    """Leaves an atomic block open on its slot's connection (a buggy task)."""
    transaction.atomic().__enter__()
    return "leaked"


@task
def reports_twice(context: Any) -> int:
    """Reports progress, works a moment, reports its last step and returns at once."""
    context.set_progress(1, 2, "halfway")
    time.sleep(0.005)  # the work between two reports
    context.set_progress(2, 2, "done")
    return 2


@task
def connection_state() -> dict[str, Any]:
    """How the slot's connection looks when a job starts."""
    return {
        "in_atomic_block": connection.in_atomic_block,
        "autocommit": connection.get_autocommit(),
        "thread": threading.current_thread().name,
    }


class Gate:
    """Lets a test pause a task body at a known point: the body ``arrive()``s and waits."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.released = threading.Event()

    def arrive(self) -> None:
        self.reached.set()
        assert self.released.wait(20), "the test never opened the gate"


#: Gates by job id, opened by tests; a job without a gate runs straight through.
gates: dict[int, Gate] = {}


@task(atomic=True, max_attempts=3)
def atomic_gated_effect(context: Any, value: str = "") -> str:
    """Writes an Effect in the completion transaction, then waits at its gate (if any)."""
    Effect.objects.create(job_id=context.job_id, attempt=context.attempt, value=value)
    gate = gates.get(context.job_id)
    if gate is not None:
        gate.arrive()
    return value


@task(max_attempts=1)
def returns_nul() -> str:
    """Returns text PostgreSQL cannot store (a NUL character)."""
    return "a\x00b"


@task(max_attempts=1)
def raises_unstorable(context: Any) -> None:
    """Reports progress and fails with messages holding a NUL and a lone surrogate."""
    context.set_progress(1, 2, "row\x00one")
    raise ValueError("bad\x00byte and \ud800 surrogate")
