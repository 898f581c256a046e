"""Tasks for the realtime tests; importing this module registers them for workers in this
process."""

from __future__ import annotations

import threading
from typing import Any

from django_workqueue import task

steps = threading.Semaphore(0)
"""``reports_in_steps`` takes one permit after each report: the test releases one each time it
has seen a report arrive, so every report is seen before the next is made."""


@task(max_attempts=1)
def reports_in_steps(context: Any, count: int, secret: str = "") -> int:
    """Reports ``count`` steps (each message quoting ``token=<secret>``), waiting for the test
    after each."""
    for n in range(1, count + 1):
        context.set_progress(n, count, f"step {n} token={secret}", details={"step": n})
        if not steps.acquire(timeout=30):
            raise TimeoutError(f"nobody saw step {n}")
    return count
