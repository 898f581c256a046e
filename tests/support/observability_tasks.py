"""Tasks for the observability tests (progress, stats); importing this module registers them
for workers in this process."""

from __future__ import annotations

import threading
from typing import Any

from django_workqueue import Discard, task

gate = threading.Event()
"""``waits_for_gate`` runs until the test sets this."""


@task
def reports_often(context: Any, times: int) -> int:
    """Reports progress ``times`` times in a tight loop, with details."""
    for n in range(1, times + 1):
        context.set_progress(n, times, f"row {n}", details={"row": n, "last": [n, "ok"]})
    return times


@task
def waits_for_gate(context: Any) -> str:
    """Holds its slot until ``gate`` is set (or the job is told to stop)."""
    while not gate.wait(0.01):
        context.raise_if_cancelled()
    return "opened"


@task(max_attempts=2)
def fails(context: Any) -> None:
    raise ValueError("always")


@task(max_attempts=3)
def discards(context: Any) -> None:
    raise Discard("not worth retrying")
