"""The heartbeat: one statement renews every lease this process holds.

A job whose row did not renew is no longer this worker's: its ``context.cancelled`` fires with
the reason (``completed_elsewhere`` if it was finished outside this worker, ``deleted`` if its row
is gone, ``lease_lost`` if it was reaped and belongs to another attempt) and its outcome will be
fenced out. The same pass sees ``cancel_requested_at`` and fires cooperative cancellation.
A row another session holds locked is skipped, not waited for, and tried again within
``LOCKED_RETRY_SECONDS``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..conf import workqueue_settings as conf
from ..context import AbortReason, JobContext
from ..db import Driver
from ..db.locking import LOCKED_RETRY_SECONDS
from ..states import TERMINAL

logger = logging.getLogger("django_workqueue.worker")

# A renewal that found some of its rows locked by another session (PostgreSQL, which skips them
# rather than wait) is tried again this soon (db/locking.py: every writer's retry). At the usual
# interval, a third of the lease, two such misses in a row would cost a lease.


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
        """Renew at a third of the shortest lease, and at least every HEARTBEAT_INTERVAL; with
        no lease to renew, beat every IDLE_HEARTBEAT_INTERVAL (the registry row only)."""
        shortest = min((r.context.job.lease_seconds for r in running.values()), default=None)
        interval = float(conf.HEARTBEAT_INTERVAL)
        if shortest is None:
            return max(interval, float(conf.IDLE_HEARTBEAT_INTERVAL))
        return min(interval, shortest / 3)

    def schedule(self, running: Mapping[int, RunningJob], now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.next_renewal = min(self.next_renewal, now + self.interval(running))

    def due(self, now: float) -> bool:
        return now >= self.next_renewal

    def renew(self, running: Mapping[int, RunningJob]) -> bool:
        """Renew all leases in ``running``; mark lost leases and requested cancellations;
        return whether a lease was lost to another attempt (the job reaped).

        If the statement fails, the renewal stays due: the control loop retries it after its
        error backoff instead of a whole interval later (a lease outlives only as many missed
        renewals as fit in it)."""
        started = time.monotonic()
        leases = [(job_id, r.context.job.attempt) for job_id, r in running.items()]
        renewed, locked = self.driver.renew_leases(self.owner, leases) if leases else ({}, set())
        interval = self.interval(running)
        if locked:  # rows another session holds locked: try again soon, not a third later
            interval = min(interval, LOCKED_RETRY_SECONDS)
        self.next_renewal = started + interval
        lost = [job_id for job_id, item in running.items()
                 if job_id not in renewed and not item.context.finished
                 and not item.context.lease_lost]  # fmt: skip
        reasons = self._why_lost(lost)
        for job_id, reason in reasons.items():
            context = running[job_id].context
            if context.abort(reason):
                logger.warning(
                    "job %s attempt %s: no longer this worker's (%s); cancelling it here",
                    job_id, context.attempt, reason,
                )  # fmt: skip
        for job_id, cancel_requested in renewed.items():
            item = running.get(job_id)
            if not cancel_requested or item is None or item.context.finished:
                continue
            if item.context.abort(AbortReason.CANCEL_REQUESTED):
                logger.info("job %s: cancellation requested", job_id)
        return AbortReason.LEASE_LOST in reasons.values()

    def _why_lost(self, ids: list[int]) -> dict[int, AbortReason]:
        """Why each job in ``ids`` was not renewed (one query, only when some were lost)."""
        if not ids:
            return {}
        try:
            states = self.driver.lease_states(ids)
        except Exception:  # the reason is for the task and the log; the loss is certain
            return dict.fromkeys(ids, AbortReason.LEASE_LOST)
        reasons = {}
        for job_id in ids:
            if job_id not in states:
                reasons[job_id] = AbortReason.DELETED
            elif states[job_id][0] in TERMINAL:
                reasons[job_id] = AbortReason.COMPLETED_ELSEWHERE
            else:
                reasons[job_id] = AbortReason.LEASE_LOST
        return reasons
