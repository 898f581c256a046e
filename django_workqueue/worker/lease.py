"""The heartbeat: one statement renews every lease this process holds.

A job whose row did not renew has lost its lease (it was reaped while this worker stalled, or
released): its ``context.cancelled`` fires and its outcome will be fenced out. The same pass sees
``cancel_requested_at`` and fires cooperative cancellation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..conf import workqueue_settings as conf
from ..context import JobContext
from ..db import Driver

logger = logging.getLogger("django_workqueue.worker")


@dataclass(slots=True)
class RunningJob:
    context: JobContext
    started: float = field(default_factory=time.monotonic)
    timeout: float | None = None
    is_async: bool = False


class LeaseKeeper:
    def __init__(self, driver: Driver, owner: str) -> None:
        self.driver = driver
        self.owner = owner
        # An idle worker still beats (its WorkerProcess row shows it alive).
        self.next_renewal = time.monotonic() + float(conf.HEARTBEAT_INTERVAL)

    def interval(self, running: Mapping[int, RunningJob]) -> float:
        """Renew at a third of the shortest lease, and at least every HEARTBEAT_INTERVAL."""
        shortest = min((r.context.job.lease_seconds for r in running.values()), default=None)
        interval = float(conf.HEARTBEAT_INTERVAL)
        return interval if shortest is None else min(interval, shortest / 3)

    def schedule(self, running: Mapping[int, RunningJob], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.next_renewal = min(self.next_renewal, now + self.interval(running))

    def due(self, now: float) -> bool:
        return now >= self.next_renewal

    def renew(self, running: Mapping[int, RunningJob]) -> None:
        """Renew all leases in ``running``; mark lost leases and requested cancellations.

        If the statement fails, the renewal stays due: the control loop retries it after its
        error backoff instead of a whole interval later (a lease outlives only as many missed
        renewals as fit in it)."""
        started = time.monotonic()
        leases = [(job_id, r.context.job.attempt) for job_id, r in running.items()]
        renewed = self.driver.renew(self.owner, leases) if leases else {}
        self.next_renewal = started + self.interval(running)
        for job_id, item in running.items():
            context = item.context
            if context.finished:  # recorded its outcome while we were renewing
                continue
            if job_id not in renewed:
                if not context.lease_lost:
                    logger.warning(
                        "job %s attempt %s: lease lost (reaped or released); cancelling it here",
                        job_id, context.attempt,
                    )  # fmt: skip
                context.lease_lost = True
                context.cancelled.set()
            elif renewed[job_id] and not context.cancel_requested:
                logger.info("job %s: cancellation requested", job_id)
                context.cancel_requested = True
                context.cancelled.set()
