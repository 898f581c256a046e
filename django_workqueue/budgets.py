"""Attempts, decided once: which ending spends which budget, when a budget is spent, what a
redrive gives back, and how an attempt is shown.

A job keeps four numbers, each with one meaning:

- ``attempt`` counts claims. Every claim bumps it and every write of a worker is fenced by
  it; it decides nothing else (a claim given back at shutdown is a claim all the same).
- ``attempts_charged`` counts the body's attempts against ``max_attempts`` since the last
  redrive. An attempt whose body ran to an ending (a success, a failure, ``Retry``, a discard)
  spends one; the job is dead-lettered when a failure spends the last.
- ``crashes_charged`` counts crashes against the crash budget (``crash_budget``): a worker
  seen gone by liveness, or a lease that ran out. A poison pill that takes its worker down
  every time still ends in the dead-letter queue, and a task of one body attempt (the
  ``django.tasks`` default) survives a worker's crash.
- ``redriven_attempts`` counts the body's attempts charged before the redrives, for display
  only: "attempt 1 of 5 (3 before the redrive)".

What is not the body's doing spends neither budget: a snooze, a release at shutdown (or a
process stopped with the worker), a row another session holds locked, an idle pool child's
death, a claimed job that never began. ``max_attempts`` is the task's budget and is never
rewritten by an ending or a redrive.
"""

from __future__ import annotations

import enum
from typing import Any

from django.db.models import F

from .conf import workqueue_settings as conf
from .states import TERMINAL


class Charge(enum.Enum):
    """Which budget an ending spends."""

    NOTHING = "nothing"
    ATTEMPT = "attempt"
    CRASH = "crash"


_CHARGES = {
    "succeeded": Charge.ATTEMPT,
    "retry": Charge.ATTEMPT,
    "discard": Charge.ATTEMPT,
    "cancelled": Charge.ATTEMPT,
    "lease_expired": Charge.CRASH,
    "snooze": Charge.NOTHING,
    "release": Charge.NOTHING,
}


def charge_of(kind: str) -> Charge:
    """The budget an ending of ``kind`` (an ``OutcomeKind``) spends."""
    return _CHARGES[kind]


def crash_budget(max_attempts: int) -> int:
    """How many crashes a job survives less one: ``WORKQUEUE["MAX_CRASHES"]``, or its own
    ``max_attempts`` where that is larger (a task trusted with many attempts keeps them when
    its workers are the ones that fail)."""
    return max(int(conf.MAX_CRASHES), max_attempts)


def spent(
    charge: Charge, *, max_attempts: int, attempts_charged: int, crashes_charged: int
) -> bool:
    """Whether an ending that spends ``charge`` spends the last of its budget (the counts are
    those before the ending): the job is then dead-lettered instead of retried."""
    if charge is Charge.ATTEMPT:
        return attempts_charged + 1 >= max_attempts
    if charge is Charge.CRASH:
        return crashes_charged + 1 >= crash_budget(max_attempts)
    return False


def charged_columns(charge: Charge) -> dict[str, int]:
    """What the outcome's row adds to each budget's column (``Outcome.row``)."""
    if charge is Charge.ATTEMPT:
        return {"charge_attempt": 1}
    if charge is Charge.CRASH:
        return {"charge_crash": 1}
    return {}


def fresh_budget(max_attempts: int | None = None) -> dict[str, Any]:
    """The column updates of a redrive: both budgets afresh, the body attempts charged so far
    kept for display; ``max_attempts`` rewritten only when an operator asks for another
    budget."""
    updates: dict[str, Any] = {
        "attempts_charged": 0,
        "crashes_charged": 0,
        "redriven_attempts": F("redriven_attempts") + F("attempts_charged"),
    }
    if max_attempts is not None:
        updates["max_attempts"] = max_attempts
    return updates


def attempt_number(status: str, attempts_charged: int) -> int:
    """The body attempt a job is at: the one that ended it (finished), or the one running or
    next to run (not finished)."""
    if status in TERMINAL:
        return attempts_charged
    return attempts_charged + 1


def describe(
    *,
    status: str,
    attempts_charged: int,
    max_attempts: int,
    redriven_attempts: int = 0,
    short: bool = False,
) -> str:
    """The attempt as an operator reads it everywhere (admin, API, CLI, explain); ``short``
    for a table's column.

    >>> describe(status="running", attempts_charged=0, max_attempts=5, redriven_attempts=3)
    'attempt 1 of 5 (3 before the redrive)'
    >>> describe(status="ready", attempts_charged=1, max_attempts=5, short=True)
    '2/5'
    """
    number = attempt_number(status, attempts_charged)
    if short:
        before = f" (+{redriven_attempts})" if redriven_attempts else ""
        return f"{number}/{max_attempts}{before}"
    text = f"attempt {number} of {max_attempts}"
    if redriven_attempts:
        text += f" ({redriven_attempts} before the redrive)"
    return text


def describe_job(job: Any, *, short: bool = False) -> str:
    """``describe`` for a ``Job`` (or any object with its fields)."""
    return describe(
        status=job.status, attempts_charged=job.attempts_charged, max_attempts=job.max_attempts,
        redriven_attempts=job.redriven_attempts, short=short,
    )  # fmt: skip
