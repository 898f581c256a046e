"""The flow claim: jobs with a ``flow_key`` (limits and fairness), claimed key by key.

A worker whose tasks use ``concurrency=``, ``rate=`` or ``fair_key=`` runs this claim next to
the plain one. Each call:

1. walks the flow keys with ready jobs from a rotating cursor (``Driver.flow_keys``: one index
   probe per key, at most ``limit + 8`` keys, however many there are);
2. for the limit keys among them, in one transaction: locks their ``FlowLimit`` rows, made on
   a key's first claim (``SKIP LOCKED``: a key another worker is claiming right now is left to
   it this time), counts the key's running jobs and its starts within the rate's period, and
   so knows how many jobs each key may start;
3. claims in rounds (``Driver.claim_flow``): every key's first job in turn from the cursor,
   then every key's second job… — one tenant's 10,000 jobs cannot stand before another's 10;
4. appends this claim's starts to the rate-limited keys' rows, and commits.

Counting under the row lock makes limits exact: every claimer of a key holds its lock while it
counts and claims, and commits before the next can count. A crashed worker's running jobs count
until the reaper ends their lease, so its slots come back with its leases, never later.
A claim that involves no limit key (fairness alone) takes no transaction: ``claim_flow`` is one
statement.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import Count

from ..db import ClaimedJob, Driver, FlowGroup, FlowPick
from ..models import FlowLimit, Job
from ..registry import TaskSpec, find_task, registered_tasks
from ..states import Status
from .keys import LIMIT

# Keys walked per claim beyond the jobs wanted: room for keys at their limit.
_EXTRA_KEYS = 8


class FlowClaimer:
    """Claims flow-controlled jobs for one worker; keeps its rotation cursor between claims."""

    def __init__(self, driver: Driver, owner: str) -> None:
        self.driver = driver
        self.owner = owner
        self.cursor = ""  # the last key served: the next claim starts after it
        self.retry_at: float | None = None
        """Monotonic time at which a rate limit that held jobs back frees a start, if any."""

    def claim(
        self, queues: Sequence[str], limit: int, now: datetime | None = None
    ) -> list[ClaimedJob]:
        self.retry_at = None
        if limit <= 0:
            return []
        groups = self.driver.flow_keys(queues, self.cursor, limit + _EXTRA_KEYS)
        if not groups:
            return []
        limits = {g.key: spec for g in groups if (spec := _limited(g)) is not None}
        if limits:
            with transaction.atomic(using=self.driver.alias):
                jobs = self._claim_limited(groups, limits, limit, now)
        else:
            jobs = self._claim(groups, {}, limit, now)
        if jobs:
            self.cursor = jobs[-1].flow_key or ""
        return jobs

    def _claim(
        self,
        groups: list[FlowGroup],
        room: dict[str, int],
        limit: int,
        now: datetime | None,
    ) -> list[ClaimedJob]:
        picks = [
            FlowPick(g.queue, g.key, min(limit, room.get(g.key, limit)), turn)
            for turn, g in enumerate(groups)
            if room.get(g.key, limit) > 0
        ]
        return self.driver.claim_flow(picks, limit, self.owner, now)

    def _claim_limited(
        self,
        groups: list[FlowGroup],
        limits: dict[str, TaskSpec],
        limit: int,
        now: datetime | None,
    ) -> list[ClaimedJob]:
        alias = self.driver.alias
        keys = sorted(limits)
        locked = self._lock(keys)
        missing = [key for key in keys if key not in locked]
        if missing:  # new keys get their row; a key another worker holds is skipped again
            FlowLimit.objects.using(alias).bulk_create(
                [FlowLimit(key=key) for key in missing], ignore_conflicts=True
            )
            locked.update(self._lock(missing))
        running = dict(
            Job.objects.using(alias)
            .filter(status=Status.RUNNING, flow_key__in=list(locked))
            .values_list("flow_key")
            .annotate(n=Count("id"))
            .values_list("flow_key", "n")
        )
        rated = [key for key in locked if limits[key].rate is not None]
        if rated and now is None:
            # The starts are stamped with this clock, and the claim uses it as the jobs'
            # started_at: the limit's timeline and the jobs' are one.
            now = self.driver.now()
        clock = now.timestamp() if rated and now is not None else 0.0
        room: dict[str, int] = {}
        kept: dict[str, list[list[float]]] = {}  # rated keys: their starts still in the period
        for key, spec in limits.items():
            row = locked.get(key)
            if row is None:  # another worker is claiming this key right now
                room[key] = 0
                continue
            free = limit
            if spec.concurrency is not None:
                free = min(free, spec.concurrency - running.get(key, 0))
            if spec.rate is not None:
                recent = kept[key] = _recent(row.starts, clock, spec.rate.period)
                free = min(free, spec.rate.count - int(sum(n for _, n in recent)))
                if free <= 0 and recent:
                    self._held_until(recent[0][0] + spec.rate.period - clock)
            room[key] = max(0, free)
        jobs = self._claim(groups, room, limit, now)
        started: dict[str, int] = {}
        for job in jobs:
            if job.flow_key in rated:
                started[job.flow_key] = started.get(job.flow_key, 0) + 1
        for key in rated:  # a few keys: one small write each, only when something changed
            count = started.get(key, 0)
            if count or len(kept[key]) != len(locked[key].starts):
                starts = kept[key] + ([[clock, count]] if count else [])
                FlowLimit.objects.using(alias).filter(key=key).update(starts=starts)
        return jobs

    def _lock(self, keys: list[str]) -> dict[str, FlowLimit]:
        rows = (
            FlowLimit.objects.using(self.driver.alias)
            .filter(key__in=keys)
            .order_by("key")
            .select_for_update(skip_locked=True)
        )
        return {row.key: row for row in rows}

    def _held_until(self, seconds: float) -> None:
        at = time.monotonic() + max(0.0, seconds)
        self.retry_at = at if self.retry_at is None else min(self.retry_at, at)


def uses_flow_claim() -> bool:
    """Whether a task registered in this process has limits or a fairness key."""
    return any(
        spec.concurrency is not None or spec.rate is not None or spec.fair_key is not None
        for spec in (task.spec for task in registered_tasks().values())
    )


def _limited(group: FlowGroup) -> TaskSpec | None:
    """The task whose limits apply to a ``limit:`` key (None for a tenant's key, or a task this
    process does not know: its jobs are claimed, and fail as unregistered)."""
    if not group.key.startswith(LIMIT):
        return None
    task = find_task(group.task_name)
    if task is None or (task.spec.concurrency is None and task.spec.rate is None):
        return None
    return task.spec


def _recent(starts: list[list[float]], clock: float, period: float) -> list[list[float]]:
    """The starts still inside the rate's period ``(clock - period, clock]``."""
    return [[at, n] for at, n in starts if at > clock - period]
