"""The flow claim: jobs with a ``flow_key`` (limits and fairness), claimed key by key.

A worker whose tasks use ``concurrency=``, ``rate=`` or ``fair_key=`` runs this claim next to
the plain one. Each call:

1. walks the flow keys with ready jobs from a rotating cursor (``Driver.flow_keys``: one index
   probe per key, at most ``limit + 8`` keys, however many there are);
2. for the limit keys among them, in one transaction (``Driver.flow_limits_held``): locks
   their ``FlowLimit`` rows, made on a key's first claim (``SKIP LOCKED``: a key another
   worker is claiming right now is left to it this time), counts the key's running jobs and
   its starts within the rate's period, and so knows how many jobs each key may start. While
   walks meet limit keys, the walk and the lock are one call (``Driver.walk_flow_limits``):
   on PostgreSQL one round trip, with the transaction's BEGIN; on SQLite one statement
   under the write lock BEGIN IMMEDIATE took first, which serialises every claimer (no row
   locks there: a key's row is made only for a rate's starts). Where the claim counts each
   key's running jobs itself (``supports_capped_flow_claim``: SQLite, whose autocommitted
   claim holds the write lock for its statement), a claim of ``concurrency=`` keys takes no
   transaction: the walk's count sizes the takes, the claim's caps them;
3. claims in rounds (``Driver.claim_flow``): every key's first job in turn from the cursor,
   then every key's second job… — one tenant's 10,000 jobs cannot stand before another's 10.
   Where the walk counted each key's ready jobs (SQLite), each key's take is cut to its share
   of the rounds first (``_shares``), and the claim needs no ranking; where it did not
   (PostgreSQL), to what the rounds can give a key known to have one (``_first_rounds``);
4. appends this claim's starts to the rate-limited keys' rows, and commits.

Counting under the row lock makes limits exact: every claimer of a key holds its lock while it
counts and claims, and commits before the next can count. A crashed worker's running jobs count
until the reaper ends their lease, so its slots come back with its leases, never later.
On PostgreSQL a limited claim is two round trips: BEGIN, the walk, the lock and the count;
then the claim and COMMIT (a rate's starts are written with the COMMIT after the claim: three).
A worker that knows no limited task takes no transaction: the walk, then ``claim_flow``.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from ..db import ClaimedJob, Driver, FlowGroup, FlowHold, FlowPick
from ..registry import TaskSpec, find_task, registered_tasks
from .keys import BATCH, LIMIT

# Keys walked per claim beyond the jobs wanted: room for keys at their limit. At most
# _MAX_KEYS a claim (SQLite allows 500 terms in one compound SELECT).
_EXTRA_KEYS = 8
_MAX_KEYS = 256


class FlowClaimer:
    """Claims flow-controlled jobs for one worker; keeps its rotation cursor between claims."""

    def __init__(self, driver: Driver, owner: str) -> None:
        self.driver = driver
        self.owner = owner
        self.cursor = ""  # the last key walked: the next claim starts after it
        self.retry_at: float | None = None
        """Monotonic time at which a rate limit that held jobs back frees a start, if any."""
        self._limits_met = True  # whether the last walk met limit keys (at first: assume so)
        self._rates_met = False  # whether it met keys with a rate (their starts are written)
        self.held = False
        """Whether a claim since ``begin_pass`` left ready jobs of a key at its limit (or
        claimed by another worker at the same moment): work remains that a later claim may
        take."""

    def begin_pass(self) -> None:
        """Forget what earlier passes found: ``held`` and ``retry_at`` then sum up the claims
        of one pass (one per queue with per-queue slots), each adding to them."""
        self.retry_at = None
        self.held = False

    def claim(
        self, queues: Sequence[str], limit: int, now: datetime | None = None
    ) -> list[ClaimedJob]:
        if limit <= 0:
            return []
        steps = min(limit + _EXTRA_KEYS, _MAX_KEYS)
        limited = _limited_tasks()
        if limited and self._limits_met:
            # The last walk met limit keys: walk and lock them together (PostgreSQL: one
            # round trip, BEGIN included). Where the claim counts each key's running jobs
            # itself (SQLite), and the last walk met no rate, the walk's count only sizes the
            # takes: it is read before any transaction, and the claim caps them.
            capped = self.driver.supports_capped_flow_claim and not self._rates_met
            with self.driver.flow_limits_held() as hold:
                walked, locked = self.driver.walk_flow_limits(
                    FlowHold() if capped else hold,
                    queues,
                    self.cursor,
                    steps,
                    limited,
                    LIMIT,
                    count=limit,
                )
                jobs = self._claim_walked(walked, limit, now, hold, locked, capped=capped)
        else:
            # Otherwise walk alone first: a walk that meets only tenants' keys (fairness)
            # takes no transaction and carries no lock; limit keys it meets are locked after.
            walked = self.driver.flow_keys(queues, self.cursor, steps, count=limit)
            with self.driver.flow_limits_held() as hold:
                jobs = self._claim_walked(walked, limit, now, hold)
        met = {g.task_name for g in walked if g.task_name in limited and g.key.startswith(LIMIT)}
        self._limits_met = bool(met)
        self._rates_met = any(_has_rate(name) for name in met)
        # Full: the next claim starts after the last key served. Short (keys at their limit,
        # or too few): after the last key walked, so that a claim never walks the same full
        # keys again while keys further on have room.
        if len(jobs) == limit:
            self.cursor = jobs[-1].flow_key or ""
        elif walked:
            self.cursor = walked[-1].key
        return jobs

    def _claim_walked(
        self,
        walked: list[FlowGroup],
        limit: int,
        now: datetime | None,
        hold: FlowHold,
        locked: dict[str, tuple[list[list[float]], int]] | None = None,
        *,
        capped: bool = False,
    ) -> list[ClaimedJob]:
        groups = [g for g in walked if _claimable(g)]
        limits = {g.key: spec for g in groups if (spec := _limited(g)) is not None}
        if not groups:
            return []
        if not limits:
            hold.claim_last = True
            return self._claim(groups, {}, limit, now)
        if capped and any(spec.rate is not None for spec in limits.values()):
            # A rate's starts are read and written in the claim's transaction: count again in
            # it (this once; the next claim begins it before its walk).
            locked, capped = None, False
        if locked is None:  # walked alone: lock now (PostgreSQL: BEGIN goes with the lock)
            hold.begin()
            keys = sorted(limits)
            counted = {key for key in keys if limits[key].concurrency is not None}
            locked = self.driver.lock_flow_limits(keys, counted)
        held = {key: row for key, row in locked.items() if key in limits}
        return self._claim_limited(hold, groups, limits, held, limit, now, capped=capped)

    def _claim(
        self,
        groups: list[FlowGroup],
        room: dict[str, int],
        limit: int,
        now: datetime | None,
        caps: dict[str, int] | None = None,
    ) -> list[ClaimedJob]:
        # A key may have ready jobs in several queues (``using(queue=...)``): its room is
        # shared among its groups, in the order walked, never given to each. ``caps``: the
        # keys' concurrency, for a claim that counts their running jobs itself.
        caps = caps or {}
        left = dict(room)
        picks = []
        bound: dict[str, int] = {}  # keys whose room, not this claim's size, set their take
        for turn, group in enumerate(groups):
            take = min(limit, left.get(group.key, limit))
            if take <= 0:
                self.held = True
                continue
            if group.key in left:
                left[group.key] -= take
                if take < limit:
                    bound[group.key] = bound.get(group.key, 0) + take
            picks.append(FlowPick(group.queue, group.key, take, turn, caps.get(group.key)))
        ready = [groups[pick.turn].ready for pick in picks]
        counted = None not in ready
        shares = _shares(picks, ready, limit) if counted else _first_rounds(picks, limit)
        jobs = self.driver.claim_flow(shares or picks, limit, self.owner, now)
        # Fewer jobs than the walk counted (SQLite): another worker claimed some since (or some
        # are not due yet). The rest of the rounds, as the claim would have taken them. Not
        # where the walk counted nothing (PostgreSQL): the first rounds' cut loses jobs only
        # if a key it kept lost its last one to another worker since the walk, and the claim
        # may have committed, letting go of its limits' rows (a second claim could exceed a
        # limit, and its failure would lose the jobs claimed): the claim comes short, and
        # the next takes the rest.
        short = shares and len(jobs) < min(limit, sum(pick.take for pick in shares))
        if short and not counted:
            # Jobs may wait that this claim left: the worker polls soon, not at its long
            # listening interval (``held``, as for jobs a limit holds back).
            given = {job.flow_key for job in jobs}
            self.held |= any(pick.key not in given for pick in shares)
        elif short:
            got = Counter((job.queue, job.flow_key) for job in jobs)
            rest = [
                FlowPick(p.queue, p.key, p.take - got[(p.queue, p.key)], p.turn, p.cap)
                for p in picks
                if p.take > got[(p.queue, p.key)]
            ]
            jobs += self.driver.claim_flow(rest, limit - len(jobs), self.owner, now)
        if bound and not self.held:
            # A key that filled its room may have more ready jobs behind it, which start when
            # one of its running jobs ends, on any worker: that is announced by nothing.
            taken = Counter(job.flow_key for job in jobs)
            self.held = any(taken[key] >= take for key, take in bound.items())
        return jobs

    def _claim_limited(
        self,
        hold: FlowHold,
        groups: list[FlowGroup],
        limits: dict[str, TaskSpec],
        locked: dict[str, tuple[list[list[float]], int]],
        limit: int,
        now: datetime | None,
        *,
        capped: bool = False,
    ) -> list[ClaimedJob]:
        # ``locked``: the rows the walk locked (made for keys seen for the first time), their
        # starts and their keys' running jobs.
        rated = [key for key in locked if limits[key].rate is not None]
        if rated and now is None:
            # The starts are stamped with this clock, and the claim uses it as the jobs'
            # started_at: the limit's timeline and the jobs' are one. (PostgreSQL read it with
            # the locks.)
            now = hold.clock or self.driver.now()
        clock = now.timestamp() if rated and now is not None else 0.0
        room: dict[str, int] = {}
        kept: dict[str, list[list[float]]] = {}  # rated keys: their starts still in the period
        for key, spec in limits.items():
            row = locked.get(key)
            if row is None:  # another worker is claiming this key right now
                room[key] = 0
                continue
            starts, running = row
            free = limit
            if spec.concurrency is not None:
                free = min(free, spec.concurrency - running)
            if spec.rate is not None:
                recent = kept[key] = _recent(starts, clock, spec.rate.period)
                free = min(free, spec.rate.count - int(sum(n for _, n in recent)))
                if free <= 0 and recent:
                    self._held_until(recent[0][0] + spec.rate.period - clock)
            room[key] = max(0, free)
        # No starts to write after the claim: the claim may end the transaction (its COMMIT in
        # the same round trip).
        hold.claim_last = not rated
        caps = None
        if capped:  # no rate here (_claim_walked): every limit has a concurrency
            caps = {key: spec.concurrency for key, spec in limits.items()
                    if spec.concurrency is not None}  # fmt: skip
        jobs = self._claim(groups, room, limit, now, caps)
        started: dict[str, int] = {}
        for job in jobs:
            if job.flow_key in rated:
                started[job.flow_key] = started.get(job.flow_key, 0) + 1
        changed = {}
        for key in rated:  # written only when something changed
            count = started.get(key, 0)
            if count or len(kept[key]) != len(locked[key][0]):
                changed[key] = _stamped(kept[key], clock, count, limits[key].rate.period)  # type: ignore[union-attr]
        self.driver.write_flow_starts(changed)
        return jobs

    def _held_until(self, seconds: float) -> None:
        at = time.monotonic() + max(0.0, seconds)
        self.retry_at = at if self.retry_at is None else min(self.retry_at, at)


def uses_flow_claim() -> bool:
    """Whether a task registered in this process has limits or a fairness key."""
    return any(
        spec.concurrency is not None or spec.rate is not None or spec.fair_key is not None
        for spec in (task.spec for task in registered_tasks().values())
    )


def _limited_tasks() -> dict[str, bool]:
    """The registered tasks with limits: {name: whether it has ``concurrency=`` (its running
    jobs are counted)}."""
    return {
        name: task.spec.concurrency is not None
        for name, task in registered_tasks().items()
        if task.spec.concurrency is not None or task.spec.rate is not None
    }


def _has_rate(task_name: str) -> bool:
    task = find_task(task_name)
    return task is not None and task.spec.rate is not None


def _claimable(group: FlowGroup) -> bool:
    """Whether this worker claims the group here: not a task it does not know (another worker
    may know its limits), not a batch task's items (``flow/batches.py`` claims those). A key
    its task no longer declares (the option was removed after the job was enqueued) is
    claimed without limits, so that such a backlog is never stranded."""
    task = find_task(group.task_name)
    if task is None:
        return False
    return not (group.key.startswith(BATCH) and task.spec.batch_size is not None)


def _limited(group: FlowGroup) -> TaskSpec | None:
    """The task whose limits apply to a ``limit:`` key (None for a tenant's key, or a key its
    task no longer limits)."""
    if not group.key.startswith(LIMIT):
        return None
    task = find_task(group.task_name)
    if task is None or (task.spec.concurrency is None and task.spec.rate is None):
        return None
    return task.spec


def _shares(picks: list[FlowPick], ready: list[int | None], limit: int) -> list[FlowPick]:
    """The picks with each take cut to the jobs the claim's rounds give it (every key's first
    job in turn, then every key's second…, up to ``limit``), from the ready jobs the walk
    counted for each (up to ``limit``): their takes then add up to what the claim takes, and
    it needs no ranking. Empty if the walk counted none (or found none of them ready)."""
    if not picks or any(n is None for n in ready):
        return []
    have = [min(pick.take, n or 0) for pick, n in zip(picks, ready, strict=True)]
    given = [0] * len(picks)
    total = 0
    for round_ in range(1, limit + 1):
        before = total
        for i, n in enumerate(have):
            if total == limit:
                break
            if n >= round_:
                given[i] += 1
                total += 1
        if total in (before, limit):
            break
    return [
        FlowPick(pick.queue, pick.key, n, pick.turn, pick.cap)
        for pick, n in zip(picks, given, strict=True)
        if n
    ]


def _first_rounds(picks: list[FlowPick], limit: int) -> list[FlowPick]:
    """The picks with each take cut to what the claim's rounds can give it where the walk
    counted no ready jobs (PostgreSQL), knowing only that each walked key had one: the first
    round gives one job to each of the first ``limit`` picks, every later round at most
    ``limit - len(picks)`` to each. A claim of 8 over 16 keys reads (and locks) 8 rows, not
    128. A key that lost its jobs since the walk (another worker) makes the claim come short,
    and it is not made up: ``FlowClaimer._claim`` marks jobs as held back, so the worker polls
    soon and its next claim takes the rest."""
    most = 1 + max(0, limit - len(picks))
    return [
        FlowPick(pick.queue, pick.key, min(pick.take, most), pick.turn, pick.cap)
        for pick in picks[:limit]
    ]


def _recent(starts: list[list[float]], clock: float, period: float) -> list[list[float]]:
    """The starts still inside the rate's period ``(clock - period, clock]``."""
    return [[at, n] for at, n in starts if at > clock - period]


def _stamped(
    starts: list[list[float]], clock: float, count: int, period: float
) -> list[list[float]]:
    """The starts with this claim's added. Claims less than a hundredth of the period apart
    share one entry, stamped with the later time (a start counted a little longer than it
    happened: never more starts than the rate), so a busy key's row holds at most about a
    hundred entries whatever its rate."""
    if not count:
        return starts
    if starts and clock - starts[-1][0] < period / 100:
        return [*starts[:-1], [clock, starts[-1][1] + count]]
    return [*starts, [clock, count]]
