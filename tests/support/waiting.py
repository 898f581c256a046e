"""Wait on conditions, never on fixed sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from django_workqueue.worker.runner import Worker

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T], timeout: float = 20.0, interval: float = 0.02, message: str = ""
) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message or condition}")
        time.sleep(interval)


def join_slots(worker: Worker, timeout: float = 20.0) -> None:
    """Wait for a stopped worker's slot threads, which may outlive ``run()`` past the grace.

    A slot still busy after the worker returned would otherwise write into the next test's
    tables (and on PostgreSQL keep a connection to the test database open).
    """
    for slot in worker._slots:
        slot.join(timeout)
        assert not slot.is_alive(), f"{slot.name} did not finish"
