"""Locked rows: what every writer does when a row it must write is locked by another session.

One policy (DESIGN.md §3.8), called by every writer:

- **Workers' writes never wait for another session** (the completer, ``atomic=True`` bodies,
  skip-queue and ``drain``, the reaper, the release at shutdown). A row another session holds
  never charges an attempt, never drops an outcome, never turns a success into a failure, and
  never holds up an unrelated row: the writer skips that row (``Driver.record_many`` with
  ``skip_locked``: the job's row, and its workflow's, taken ``SKIP LOCKED``, the workflow's
  first), keeps its outcome and tries that row again within ``LOCKED_RETRY_SECONDS``. A lock
  met further on (a dependent's row) or a deadlock ends the write's transaction after the
  bounded wait of ``Driver.bound_lock_waits``; the writer then writes each row alone
  (``write_apart``), so only the locked row's outcome waits.
- **A written body is never run again for a lock** (``retry_in_place``): an ``atomic=True``
  body's success is written in a savepoint of the body's transaction; when a lock stops it,
  only the savepoint is rolled back (the body's writes stay, uncommitted) and the write is
  tried again, so the body's writes and its success still commit together, or neither does.
  Skip-queue retries its outcome the same way, its lease kept renewed meanwhile.
- **Operations wait a bounded time** (``operation``): ``OPERATION_LOCK_WAIT`` seconds for a
  row another session holds, then ``RowLocked``, which names the problem and the fix; nothing
  of the operation is kept. A deadlock the database broke is tried again.

On SQLite there are no row locks: one writer at a time, waited for by ``busy_timeout``. A
worker's write that waited it out ("database is locked") is a lock timeout too: its outcomes
are kept, whole, for the next pass (nothing is charged), and an operation raises
``RowLocked``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TypeVar

from django.db import DatabaseError, transaction

from ..exceptions import RowLocked
from ..outcomes import Outcome
from . import driver_for
from .base import Driver, Ended, Recorded, Timing

logger = logging.getLogger("django_workqueue.db")

T = TypeVar("T")
R = TypeVar("R")

LOCKED_RETRY_SECONDS = 0.25
"""How soon a write that found its row locked by another session is tried again (a lease
renewal, an outcome, a reaped lease, an ``atomic=True`` success)."""

OPERATION_LOCK_WAIT = 5.0
"""How long an operation (``cancel_job``, ``release_job``, ``redrive``...) waits for a row
another session holds before it raises ``RowLocked``."""


def is_locked(driver: Driver, exc: BaseException) -> bool:
    """Whether ``exc`` means a row (SQLite: the database) that another session holds stopped the
    write: a lock wait that timed out, or a deadlock the database broke by aborting this side.
    Nothing of the write's transaction (or savepoint) was kept; it may be tried again."""
    return isinstance(exc, DatabaseError) and driver.is_lock_timeout(exc)


def row_locked(driver: Driver, exc: BaseException) -> bool:
    """Whether a lock on some rows stopped a write (``is_locked``) where writing its rows apart
    lets the others through: not on SQLite, where the whole database was locked (every write
    waits for it; the outcomes are kept whole for the next pass)."""
    return driver.supports_row_locks and is_locked(driver, exc)


def write_apart(
    driver: Driver, items: Sequence[T], write: Callable[[Sequence[T]], R]
) -> tuple[list[R], list[T]]:
    """``write(items)`` (its own transaction); if a lock stopped it, ``write([item])`` for each
    item alone, so that a locked row holds up only its own item. Returns the writes' results and
    the items a lock stopped even alone: the caller keeps those and tries them again soon.
    Other errors propagate."""
    try:
        return [write(items)], []
    except DatabaseError as exc:
        if not row_locked(driver, exc):
            raise
        if len(items) == 1:
            return [], list(items)
        logger.info("a row another session holds stopped a write of %d rows: %s", len(items), exc)
    results: list[R] = []
    kept: list[T] = []
    for item in items:
        try:
            results.append(write([item]))
        except DatabaseError as exc:
            if not is_locked(driver, exc):
                raise
            kept.append(item)
    return results, kept


def retry_in_place(
    driver: Driver,
    outcomes: Sequence[Outcome],
    write: Callable[[Sequence[Outcome]], Recorded],
    what: str,
    *,
    until: float | None = None,
    pause: Callable[[float], object] = time.sleep,
) -> Recorded:
    """``write(outcomes)`` (``release.record`` with ``skip_locked``: a transaction, or a
    savepoint of the caller's), then again for those whose row another session held (``busy``,
    or a lock that stopped the write: rolled back, the savepoint only inside a caller's
    transaction), every ``LOCKED_RETRY_SECONDS``, until none is left or the monotonic ``until``
    passes. The caller's work before it (an ``atomic=True`` body) is never redone. Returns what
    was written; ``busy`` holds the ids still locked at ``until``. Other errors propagate."""
    written: set[tuple[int, int]] = set()
    ended: list[Ended] = []
    timings: list[Timing] = []
    left = list(outcomes)
    warned = False
    while True:
        try:
            recorded = write(left)
        except DatabaseError as exc:
            if not is_locked(driver, exc):
                raise
            problem: object = exc
        else:
            written |= recorded.written
            ended += recorded.ended
            timings += recorded.timings
            left = [outcome for outcome in left if outcome.job_id in recorded.busy]
            problem = "the row is locked"
        if not left or (until is not None and time.monotonic() >= until):
            busy = {outcome.job_id for outcome in left}
            return Recorded(written=written, busy=busy, ended=ended, timings=timings)
        if not warned:
            warned = True
            logger.warning(
                "%s: another session holds a row the outcome must write (%s); trying again "
                "every %s s until it is free", what, problem, LOCKED_RETRY_SECONDS,
            )  # fmt: skip
        pause(LOCKED_RETRY_SECONDS)


def operation(alias: str, what: str, write: Callable[[], R]) -> R:
    """Run an operation's ``write`` (one transaction that ends or changes jobs) with its waits
    for rows other sessions hold bounded by ``OPERATION_LOCK_WAIT``: past it, ``RowLocked``.
    A deadlock the database broke by aborting this side is tried again (twice): nothing of it
    was kept. Operations take rows in the lock order of workflow/locks.py (workflows, jobs,
    dependents), as every completion does; a dependent in another workflow than its
    prerequisite is the one case outside it."""
    driver = driver_for(alias)
    for attempt in range(1, 4):
        try:
            with transaction.atomic(using=alias), _bounded(driver):
                return write()
        except DatabaseError as exc:
            if not is_locked(driver, exc):
                raise
            if driver.is_deadlock(exc) and attempt < 3:
                logger.info("%s: %s; trying again", what, exc)
                continue
            raise RowLocked(
                f"{what}: a row it must change is held by another database session for more "
                f"than {OPERATION_LOCK_WAIT:g} s ({_summary(exc)}), so nothing was changed. A "
                f"transaction that has not ended holds it (a view, a shell or a script inside "
                f"transaction.atomic(), a long migration): let it commit or roll back, then try "
                f"again."
            ) from exc
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _bounded(driver: Driver) -> Iterator[None]:
    previous = driver.bound_lock_waits(OPERATION_LOCK_WAIT)
    yield
    driver.restore_lock_waits(previous)  # the caller's transaction goes on as it was


def _summary(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
