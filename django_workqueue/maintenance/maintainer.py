"""The fleet's maintainer: one worker per jobs database runs the maintenance services.

The promoter, the reaper, the scheduler and retention are each safe to run from any number of
workers (every row they change is one guarded write), but each costs the database its queries
whether or not there is work: fifty idle workers promoting every second are fifty queries a
second for nothing. So one worker of the fleet runs them, the holder of the ``maintenance``
lease (a ``MaintenanceLease`` row on the database's clock, ``leadership.py``):

* a worker tries the lease at its first pass, so a lone worker maintains at once;
* the holder renews it every third of ``WORKQUEUE["MAINTENANCE_LEASE_SECONDS"]`` and runs the
  services only while its last renewal surely holds;
* the others read the lease (one SELECT) and come back when it would expire, so a healthy
  holder costs each of them one read per two thirds of a lease or more;
* a holder that dies is replaced within about a second, whatever the lease (liveness, see
  ``liveness.py``): a few other workers, its standbys, watch it at no cost to the database
  but a connection each (``HolderWatch``) and, told of its death, take the lease over at
  once; the others, and every worker when the holder has no liveness token, take it over
  when its lease runs out (plus a small jitter);
* a worker that stops releases the lease at the start of its drain and, on PostgreSQL,
  announces it (``RELEASED``, a NOTIFY), so the others try at once instead of at the expiry.

While the worker hears NOTIFY (``listening()``), the holder's promoter and scheduler sleep for
as long as nothing can be due: the promoter until the earliest scheduled job it read, the
scheduler until the next cron tick, each at least its own interval and at most
``WORKQUEUE["MAINTENANCE_IDLE_INTERVAL"]``. An enqueue sends a NOTIFY (delayed jobs too), which
brings the promoter back within ``PROMOTE_INTERVAL`` (``promote_soon``), so a delayed job
enqueued anywhere still starts within that long of its time. A job made ``scheduled`` by a
path that sends none (a retry's backoff, a snooze) is promoted within the idle interval at
worst, and within ``PROMOTE_INTERVAL`` while enqueues keep coming. Without NOTIFY (SQLite, or
the LISTEN connection down) every service runs on its own interval, as a fleet of one needs.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Collection

from ..conf import workqueue_settings as conf
from ..db import driver_for
from .leadership import Leadership
from .liveness import CONFIRM_SECONDS, Holder, HolderWatch, look_up
from .promoter import Promoter
from .reaper import Reaper
from .retention import Retention
from .scheduler import Scheduler

logger = logging.getLogger("django_workqueue.maintenance")

LEASE_NAME = "maintenance"
RELEASED = "workqueue:maintenance-released"
"""The payload of the NOTIFY (on the ready-jobs channel) that says the lease was given up."""

#: The holder renews the lease this many times per lease length.
RENEWALS_PER_LEASE = 3


class Maintainer:
    """The maintenance services of one worker, run while it holds the fleet's lease.

    >>> maintainer = Maintainer("default", worker_id, listening=lambda: False)
    >>> maintainer.run_if_due()  # True: jobs may have become ready
    """

    def __init__(
        self,
        alias: str,
        owner: str,
        *,
        listening: Callable[[], bool],
        running: Callable[[], Collection[int]] | None = None,
        wake: Callable[[], None] = lambda: None,
        standby: Callable[[], bool] = lambda: True,
        stand_by: Callable[[bool], None] = lambda wanted: None,
        thread_start: Callable[[], None] = lambda: None,
    ) -> None:
        self.alias = alias
        self.owner = owner
        self.listening = listening
        self.wake = wake
        """Wakes the worker's loop (the holder's death was heard on another thread)."""
        self.standby = standby
        """Whether this worker may watch the holder now: it holds a standby slot
        (``WORKQUEUE["MAINTAINER_STANDBYS"]``, where a watch costs a connection)."""
        self.stand_by = stand_by
        """Asks for a standby slot (True) or gives it up (False: this worker maintains)."""
        self.thread_start = thread_start
        """Called first on a thread the maintainer starts (retention's): the worker names
        the thread's database sessions after itself."""
        self._standing_by = True  # what was last asked of stand_by (the listener asks first)
        self._tokenless_wait = 0.0  # how soon to look again at a holder showing no token yet
        self._known: Holder | None = None  # the holder as liveness last saw it
        self._watch: HolderWatch | None = None
        self._watch_tried = False
        self.leadership = Leadership(
            alias, LEASE_NAME, owner=owner, seconds=float(conf.MAINTENANCE_LEASE_SECONDS)
        )
        self.promoter = Promoter(alias, float(conf.PROMOTE_INTERVAL))
        # The holder never reaps the jobs it still runs: it is alive, and one of their leases
        # may have lapsed only because another session held the row locked (renewals skip
        # locked rows). ``running`` says which those are; a job of its own that it dropped is
        # reaped as any other worker's (no other worker reaps while it holds the lease).
        self.reaper = Reaper(
            alias, float(conf.REAPER_INTERVAL), spare_owner=owner, spare_ids=running,
            confirm_seconds=CONFIRM_SECONDS,
        )  # fmt: skip
        # Syncs WORKQUEUE["SCHEDULES"] and @task(cron=...) into the Schedule table first.
        self.scheduler = Scheduler(alias, float(conf.SCHEDULER_INTERVAL), sync=True)
        self.retention = Retention(alias)  # the fleet's lease covers it
        self.services = (self.promoter, self.reaper, self.scheduler, self.retention)
        self.next_check = time.monotonic()  # the first pass tries the lease
        self.runs = 0
        """Maintenance runs done as the holder (for tests and logs)."""
        self._held_until = -math.inf  # monotonic: the last renewal surely holds until then
        self._promoted_at = -math.inf
        self._promote_asked = False

    @property
    def leading(self) -> bool:
        """Whether this worker holds the lease now (by its last renewal)."""
        return time.monotonic() < self._held_until

    @property
    def next_run(self) -> float:
        """When ``run_if_due`` has something to do (monotonic)."""
        if not self.leading:
            return min(self.next_check, self._held_until if self.leadership.held else math.inf)
        return min(self.next_check, *(service.next_run for service in self.services))

    def run_if_due(self, at: float | None = None) -> bool:
        """Check or renew the lease if it is time, then run the services that are due while
        holding it; return whether jobs may have become ready."""
        at = time.monotonic() if at is None else at
        if at >= self.next_check or (self.leadership.held and not self.leading):
            self._check(at)
        if not self.leading:
            return False
        listening = self.listening()
        ready = False
        if self.promoter.due(at):
            ready |= self._promote(at, listening) > 0
            self._ran("promoter")
        if self.reaper.due(at):
            ready |= self.reaper.run_if_due(at) > 0
            self._ran("reaper")
        if self.scheduler.due(at):
            ready |= self._schedule(at, listening) > 0
            self._ran("scheduler")
        if self.retention.due(at):
            if driver_for(self.alias).supports_separate_commit:
                # In the background: its bulk deletes take seconds, which claims must not wait
                # for. (SQLite: inline, a second writer would only queue behind it.)
                self.retention.start(
                    at, more=self.wake, thread_start=self.thread_start,
                    leading=lambda: self.leading,
                )  # fmt: skip
            else:
                self.retention.run_if_due(at)
            self._ran("retention")
        return ready

    def promote_soon(self) -> bool:
        """Something may have been scheduled (a NOTIFY): promote within ``PROMOTE_INTERVAL``
        of the last run instead of at the planned time; return whether that is sooner."""
        if not self.leading:
            return False
        self._promote_asked = True  # seen by a promotion running now (_promote)
        soon = self._promoted_at + self.promoter.interval
        if soon >= self.promoter.next_run:
            return False
        self.promoter.next_run = soon
        return True

    def check_soon(self) -> None:
        """The lease was released (a NOTIFY): try it within a moment (jittered, so that the
        fleet does not ask all at once)."""
        if not self.leading:
            self.next_check = min(self.next_check, time.monotonic() + random.uniform(0, 0.5))

    def standby_changed(self) -> None:
        """This worker took or lost a standby slot (another thread): look again at once."""
        self.next_check = time.monotonic()
        self.wake()

    def release(self) -> bool:
        """Give the lease up (a stopping worker); return whether this worker held it."""
        self._held_until = -math.inf
        self.next_check = math.inf
        if self._watch is not None:
            self._watch.stop()
        self.retention.stop()  # after its batch under way: see ``finish``
        released = self.leadership.release()
        if released:
            logger.info("%s released the maintenance lease", self.owner)
        return released

    def finish(self, timeout: float) -> None:
        """At the end of a worker's drain: wait up to ``timeout`` seconds (at least a moment)
        for a run of retention under way to end its batch (``release`` asked it to stop)."""
        if not self.retention.join(max(1.0, timeout)):
            logger.warning(
                "%s: retention still deleting a batch at exit (one transaction: rolled back "
                "if the process ends first)", self.owner,
            )  # fmt: skip

    # --- internals ----------------------------------------------------------------------------

    def _check(self, at: float) -> None:
        seconds = self.leadership.seconds
        # The holder renews without reading first; the others read, and write only once the
        # lease has run out or its holder is gone.
        left, holder = (0.0, None) if self.leadership.held else self.leadership.state()
        gone = self._gone(holder)
        if (not left or gone) and self.leadership.hold(gone_holder=gone):
            self._follow(None)
            self._stand_by(False)  # a watch slot it no longer needs: another worker's now
            if not self.leading:  # taken: what waited for a maintainer is due now
                for service in (self.promoter, self.reaper, self.scheduler):
                    service.next_run = min(service.next_run, at)
            # Renewed or taken at ``at`` or later: it holds at least ``seconds`` from ``at``
            # on the database's clock; a tenth is kept for clock drift and the round trip.
            self._held_until = at + seconds * 0.9
            self.next_check = at + seconds / RENEWALS_PER_LEASE
            return
        self._held_until = -math.inf
        self._stand_by(True)
        if not left or gone:  # another worker took it first, or took it over from this one
            left, holder = self.leadership.state()
            self._gone(holder)  # the new holder, to watch
        # Come back when the holder's lease would run out: a live holder has renewed by then
        # (and one that dies sooner is heard of through the watch).
        wait = max(left, seconds / 20)
        known = self._known
        if known is not None and known.id == holder and not known.liveness and self.standby():
            # A holder just started shows its token within a moment (its LISTEN connection):
            # a standby looks again soon, backing off, so that its watch follows it from then
            # on. A worker without a watch has nothing to follow it with: it waits for the
            # lease like any other (a look of its own after a death would race the standby's
            # watch for the takeover, at the cost of reads the fleet need not pay).
            self._tokenless_wait = min(max(0.5, self._tokenless_wait * 2), wait)
            wait = self._tokenless_wait
        else:
            self._tokenless_wait = 0.0
        self.next_check = at + wait + random.uniform(0, min(1.0, seconds / 20))

    def _gone(self, holder: str | None) -> str | None:
        """``holder`` if liveness says it is gone. A holder already known costs nothing; a
        new one costs one read, and is watched from then on (by a standby)."""
        known = self._known
        seen = known is not None and known.id == holder and known.liveness and not known.gone
        if holder is None:
            return None
        if not seen:
            self._known = look_up(self.alias, driver_for(self.alias), holder)
            if self._known is None or self._known.gone:
                return holder if self._known is not None else None
        self._follow(self._known)
        return None

    def _stand_by(self, wanted: bool) -> None:
        if wanted != self._standing_by:
            self._standing_by = wanted
            self.stand_by(wanted)

    def _follow(self, holder: Holder | None) -> None:
        """Watch ``holder`` if this worker is a standby; else watch nobody (no connection)."""
        if holder is not None and not self.standby():
            holder = None
        if self._watch is None and holder is not None and not self._watch_tried:
            self._watch_tried = True
            watch = driver_for(self.alias).worker_watch()
            if watch is not None:
                self._watch = HolderWatch(watch, self._holder_gone)
                self._watch.start()
        if self._watch is not None:
            self._watch.follow(holder)

    def _holder_gone(self, holder: str) -> None:
        """The watch saw the holder die (its thread): look again at once."""
        known = self._known
        if known is not None and known.id == holder:
            self._known = None
        self.next_check = time.monotonic()
        self.wake()

    def _promote(self, at: float, listening: bool) -> int:
        interval = self.promoter.interval
        self._promoted_at = at
        self._promote_asked = False
        if not listening:  # nothing tells it of new scheduled jobs: every interval
            return self.promoter.run_if_due(at)
        self.promoter.next_run = at + interval  # if a query below fails: again after this
        wait = self.promoter.seconds_to_next()
        promoted = 0
        if wait is not None and wait <= 0:
            promoted = self.promoter.run_once()
            wait = interval  # more may come due: look again after one interval
        self.promoter.next_run = at + self._idle_wait(wait, interval)
        if self._promote_asked:  # a NOTIFY came while this ran: what it announced may be unread
            self.promoter.next_run = min(self.promoter.next_run, at + interval)
        return promoted

    def _schedule(self, at: float, listening: bool) -> int:
        if not listening:
            return self.scheduler.run_if_due(at)
        self.scheduler.next_run = at + self.scheduler.interval  # if the run below fails
        fired = self.scheduler.run_once()
        wait = self.scheduler.seconds_to_next
        self.scheduler.next_run = at + self._idle_wait(wait, self.scheduler.interval)
        return fired

    @staticmethod
    def _idle_wait(wait: float | None, interval: float) -> float:
        """How long a service may sleep: until ``wait`` (None: nothing known is coming), at
        least its ``interval``, at most the idle interval."""
        longest = max(interval, float(conf.MAINTENANCE_IDLE_INTERVAL))
        return min(longest, max(interval, longest if wait is None else wait))

    def _ran(self, service: str) -> None:
        self.runs += 1
        logger.debug("%s ran the %s as the fleet's maintainer", self.owner, service)
