"""The reaper: running jobs whose lease expired, or whose worker is gone (liveness, see
``liveness.py``: once confirmed, whatever the lease), go back to ready, or end once their attempts
are spent (or ``cancelled`` if cancellation was requested).

A crashed attempt counts as an attempt, so a job that kills its worker every time (a poison
pill) ends in the dead-letter queue instead of looping; a job claimed ahead into a worker's
buffer that never began goes back uncharged (``lease_expired``). A recovered job keeps its
run_after: it goes back to its place in the queue, not behind the backlog. What the expiry
means is an ``Outcome`` (``LEASE_EXPIRED``), decided in ``outcomes.py`` and written by the same
fenced statement as every other ending.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from collections.abc import Callable, Collection
from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Case, When
from django.db.models.functions import Now

from .. import signalling, wakeup
from ..conf import workqueue_settings as conf
from ..db import Driver, Ended, Expired, Recorded, Timing, driver_for, locking
from ..db.base import lease_ran_out, reapable, spare
from ..models import Job, WorkerProcess
from ..outcomes import Outcome, OutcomeKind
from ..states import Status
from ..stats import counters as stats_counters
from ..workflow import release
from . import Service, liveness

logger = logging.getLogger("django_workqueue.reaper")

# A WorkerProcess row not seen for this long belongs to a process that is gone.
_WORKER_GONE_AFTER = timedelta(minutes=5)
_BATCH = 1000
_REAPER = "reaper"  # the stats counters' shard of what reapers count
_CLAIM_BATCH = 1000
#: The housekeeping that rides on the reaper (old stats counters, gone workers' rows, expired
#: idempotency claims) runs at most this often: none of it is urgent, and an idle fleet's
#: maintainer would otherwise spend three statements on it every reaper interval.
HOUSEKEEPING_INTERVAL = 300.0


class Reaper(Service):
    name = "reaper"

    def __init__(
        self,
        alias: str,
        interval: float,
        spare_owner: str | None = None,
        spare_ids: Callable[[], Collection[int]] | None = None,
        confirm_seconds: float = 0.0,
    ) -> None:
        super().__init__(alias, interval)
        self.deaths = liveness.Deaths(confirm_seconds)
        """Whose death liveness has seen, and since when: a gone worker's jobs are taken back
        once its death is confirmed (the fleet's reaper: ``liveness.CONFIRM_SECONDS``; a
        one-shot reap: at once). A job whose lease ran out is taken back at once either way."""
        self.spare_owner = spare_owner
        """A lease owner whose jobs this reaper leaves alone (the worker running it)..."""
        self.spare_ids = spare_ids
        """... only those it still runs, when given: a job that worker dropped (a claim whose
        answer was lost, a slot that failed before the job began) is reaped like any other."""
        self._next_housekeeping = 0.0  # monotonic; the first run does it

    def run_once(self, now: datetime | None = None) -> int:
        """Reap expired leases once; return how many jobs were reaped."""
        driver = driver_for(self.alias)
        spared = self.spare_ids() if self.spare_ids is not None else None
        # Workers that liveness saw die (a subquery on PostgreSQL: the same one statement).
        gone = driver.gone_workers()
        any_expired = spare(
            Job.objects.using(self.alias).filter(reapable(now, gone), status=Status.RUNNING),
            self.spare_owner,
            spared,
        )
        ran_out = lease_ran_out(now)
        rows = list(
            any_expired.annotate(ran_out=Case(When(ran_out, then=True), default=False))
            .order_by("id")
            .values_list("id", "lease_owner", "ran_out")[:_BATCH]
        )
        # A job whose lease ran out goes at once; one whose worker liveness sees gone, once
        # that death is confirmed (Deaths): a worker whose session the server ended, alive,
        # takes its key again within a moment, and its jobs must not run twice.
        at = time.monotonic()
        dead, wait = self.deaths.confirm({owner or "" for _, owner, out in rows if not out}, at)
        if wait is not None:  # look again when the next death would be confirmed
            self.next_run = min(self.next_run, at + wait)
        ids = [pk for pk, owner, out in rows if out or owner in dead]
        if not ids:  # the usual answer, without a transaction
            self._housekeeping(driver, now)
            return 0
        # One transaction for the pass; if a row another session holds (a dependent's) stops
        # it, each job alone, so that one locked row never fails the others (db/locking.py).
        passes, kept = locking.write_apart(
            driver, ids, functools.partial(self._reap, driver, now, spared, gone)
        )
        reaped = [row for rows in passes for row in rows]
        queues = {row.queue for row in reaped if not lease_expired(row).spent}
        if reaped:
            wakeup.wake(queues)
            logger.warning(
                "reaped %d job(s) whose worker is gone or stopped renewing: %s",
                len(reaped), [row.id for row in reaped],
            )  # fmt: skip
        if kept:
            logger.info("left %d expired job(s) whose rows another session holds to a later "
                        "pass: %s", len(kept), kept)  # fmt: skip
        self._housekeeping(driver, now)
        return len(reaped)

    def _reap(
        self,
        driver: Driver,
        now: datetime | None,
        spared: Collection[int] | None,
        gone: Collection[str],
        ids: Collection[int],
    ) -> list[Expired]:
        """Reap the expired jobs among ``ids`` in one transaction; return those reaped. A job
        whose row or workflow row another session holds is skipped (``skip_locked``): it stays
        expired for a later pass."""
        with transaction.atomic(using=self.alias):
            # Locked until the writes commit.
            expired = driver.expired_leases(
                len(ids), now, spare_owner=self.spare_owner, spare_ids=spared, gone=gone,
                among=ids,
            )  # fmt: skip
            reaped: list[Expired] = []
            ended: list[Ended] = []
            outcomes: list[Outcome] = []
            timings: list[Timing] = []
            by_owner = itertools.groupby(sorted(expired, key=lambda e: e.owner), lambda e: e.owner)
            for owner, rows in by_owner:
                batch = list(rows)
                written = [lease_expired(row) for row in batch]
                recorded = driver.record_many(owner, written, skip_locked=True)
                outcomes += written
                timings += recorded.timings
                ended += recorded.ended
                reaped += [row for row in batch if (row.id, row.attempt) in recorded.written]
            signalling.reaped(
                self.alias, [(r.id, r.attempt, r.owner, r.queue) for r in reaped], ended
            )
            # A job whose attempts are spent ends here: its dependents and workflow learn of it
            # in this transaction, once every owner's jobs are written (the lock order of
            # workflow/locks.py: the workflows' and jobs' rows are held by the write already,
            # then their dependents; the counters on the workflow rows held).
            release.settle(self.alias, ended)
            # Counters last, as a worker's completion takes them (workflows, jobs, dependents,
            # counters): one statement for every owner's jobs, its rows in key order, so a
            # reaper and a worker never lock in opposite orders.
            counted = Recorded(written=set(), busy=set(), timings=timings)
            stats_counters.count(driver, _REAPER, outcomes, counted)
            stats_counters.tell(self.alias, outcomes, counted)  # a worker's metrics, on commit
            # Jobs back in ready wake the workers of their queues (not those that ended).
            driver.notify({row.queue for row in reaped if not lease_expired(row).spent})
            if any(row.owner_gone for row in reaped):  # a dead standby's slot is free now
                driver.notify_standby_free()
        return reaped

    def _housekeeping(self, driver: Driver, now: datetime | None) -> None:
        at = time.monotonic()
        if now is None and at < self._next_housekeeping:
            return
        self._next_housekeeping = at + HOUSEKEEPING_INTERVAL
        self._forget_gone_workers(now)
        self._forget_expired_claims(driver, now)

    def _forget_gone_workers(self, now: datetime | None) -> None:
        stats_counters.forget_old(self.alias, now)  # the stats' counters older than an hour
        cutoff = (now - _WORKER_GONE_AFTER) if now is not None else Now() - _WORKER_GONE_AFTER
        stale = WorkerProcess.objects.using(self.alias).filter(last_seen_at__lt=cutoff)
        deleted, _ = stale.delete()
        if deleted:  # workers gone: if one was a standby, its slot is free
            driver_for(self.alias).notify_standby_free()

    def _forget_expired_claims(self, driver: Driver, now: datetime | None) -> None:
        # Idempotency claims past their expires_at (context.claim): one bounded DELETE per
        # pass, through the expires_at index, so a backlog is worked off over a few passes
        # instead of one long statement. An expired claim still in place is harmless (the
        # next claim of its key takes it over): this only keeps the table small.
        deleted = driver.delete_expired_claims(_CLAIM_BATCH, now)
        if deleted:
            logger.debug("deleted %d expired idempotency claim(s)", deleted)


def lease_expired(row: Expired) -> Outcome:
    """What the reaper writes for ``row``: a crash, or, for a job claimed ahead into its
    worker's buffer that never began (``Expired.began``), a release: back to ready in its
    place, charging nothing (``budgets.py``: a claimed job that never began spends nothing)."""
    if not row.began:
        return Outcome(
            job_id=row.id, attempt=row.attempt, kind=OutcomeKind.RELEASE,
            max_attempts=row.max_attempts, attempts_charged=row.attempts_charged,
            crashes_charged=row.crashes_charged,
        )  # fmt: skip
    if row.owner_gone:
        message = (
            f"worker {row.owner} is gone (its process ended: killed or crashed); its lease "
            f"was ended at once; it counts as a crash"
        )
    else:
        message = (
            f"worker {row.owner} stopped renewing its lease (killed, crashed or stalled); "
            f"it counts as a crash"
        )
    return Outcome(
        job_id=row.id, attempt=row.attempt, kind=OutcomeKind.LEASE_EXPIRED,
        max_attempts=row.max_attempts, attempts_charged=row.attempts_charged,
        crashes_charged=row.crashes_charged,
        error={"type": "LeaseExpired", "message": message, "traceback": None},
    )  # fmt: skip


def run_once(now: datetime | None = None, alias: str | None = None) -> int:
    """Reap expired leases once (see ``Reaper``); return how many jobs were reaped."""
    return Reaper(alias or conf.DATABASE, float(conf.REAPER_INTERVAL)).run_once(now)
