"""Tasks that exist only for tests that need a behaviour the test app's tasks do not have (a
backoff to measure, a body that holds its first attempt, a probe of the slot's connection).

Importing this module registers them, so workers in this process can run them; workers in
subprocesses cannot (they run the test app's tasks).
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

from django.db import connection, transaction

from django_workqueue import task
from testproject.testapp.models import Effect, LedgerEntry


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


# --- workflows -----------------------------------------------------------------------------------


def _described(context: Any) -> list[list[Any]]:
    return [[d.task_name, d.status, d.result] for d in context.dependencies]


@task
def gather(context: Any, value: Any = None) -> dict[str, Any]:
    """A chain step that returns the value it received and its prerequisites (task name,
    status, result), in declared order."""
    return {"value": value, "dependencies": _described(context)}


@task(max_attempts=2, backoff=0)
def adds_then_fails_once(context: Any, count: int) -> int:
    """Adds ``count`` doubling steps at run time on every attempt; attempt 1 then fails."""
    from testproject.testapp.tasks import double

    for n in range(count):
        context.add(double.s(n))
    if context.attempt == 1:
        raise ValueError("failed after adding steps")
    return context.attempt


@task
def graph_node(*previous: Any, label: int = 0) -> int:
    """A job of the workflow property test: no worker runs it (operations end it). It takes
    any previous step's value; its label names its job in the graph the test drew."""
    return label


# --- unique jobs and per-task deadlines (tests/integration/test_unique_jobs.py) -------------


@task(unique_on=("customer_id",))
def sync_customer(customer_id: int, full: bool = False) -> None:
    pass


@task(unique_on=("customer_id", "region"))
def sync_region(customer_id: int, region: str = "eu") -> None:
    pass


@task(unique_on=lambda args, kwargs: f"day-{args[0]}")
def daily_report(day: str, recipients: Any = None) -> None:
    pass


@task(unique_on=("customer_id",), on_conflict="replace")
def debounced_sync(customer_id: int, note: str = "") -> None:
    pass


@task(unique_for=3600)
def rebuild_sitemap() -> None:
    pass


@task(unique_on=("customer_id",), unique_for=3600)
def throttled_mail(customer_id: int, text: str = "") -> None:
    pass


#: Attempts that ran the body of ``retries_past_its_deadline``, by job id.
expiring_attempts: dict[int, list[int]] = {}


@task(expires_after=3600, max_attempts=3)
def retries_past_its_deadline(context: Any) -> None:
    from django_workqueue import Retry

    expiring_attempts.setdefault(context.job_id, []).append(context.attempt)
    raise Retry(delay=7200)  # the retry is due after the deadline


@task(max_attempts=3)
def interrupted_by_ctrl_c() -> None:
    """Its process receives a Ctrl-C while it runs (on the main thread: a test's ``drain``)."""
    signal.raise_signal(signal.SIGINT)  # the KeyboardInterrupt is raised right after this


@task(api=True, unique_on=("email",))
def welcome_mail(email: str, plan: str = "free") -> None:
    """One welcome mail per address, open to the HTTP API (tests of the API's key namespace)."""
