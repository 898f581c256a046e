"""The scheduler: cron ticks that are due (``next_run_at`` at or before the database's clock)
fire, each exactly once however many workers run it.

Each due schedule is handled in one transaction: a guarded UPDATE moves ``next_run_at`` on from
the value this worker read (so of two workers that saw the same due schedule, one goes on and
the other changes nothing), then each tick to fire enqueues its job and inserts its
``ScheduleRun``, whose unique (schedule, fire_at) refuses a tick that already fired (after an
operator set ``next_run_at`` back, say): that tick's job is rolled back with its savepoint.
What fires for missed ticks is the schedule's ``catch_up``: ``latest`` one run (for the latest
missed tick), ``all`` one per tick (at most ``_BATCH`` per transaction), ``none`` only a tick
no older than ``WORKQUEUE["SCHEDULE_MISFIRE_GRACE"]``. A worker whose host clock is wrong fires
nothing early or late: only the database's clock is read.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import DateTimeField, Value
from django.db.models.functions import Now

from ..conf import workqueue_settings as conf
from ..db import driver_for
from ..models import Schedule, ScheduleRun
from ..registry import find_task
from ..schedules import cron_problem, latest_tick, next_tick, sync_schedules, timezone_problem
from ..states import CatchUp
from . import Service

logger = logging.getLogger("django_workqueue.scheduler")

_BATCH = 100


class Scheduler(Service):
    name = "scheduler"

    def __init__(self, alias: str, interval: float, *, sync: bool = False) -> None:
        super().__init__(alias, interval)
        self._sync_pending = sync
        self._reported: set[tuple[str, str]] = set()
        self.seconds_to_next: float | None = None
        """After a run: seconds until the next tick of an enabled schedule (0: one was due),
        None when there is none."""

    def sync(self) -> None:
        """Sync the declared schedules into the table, once (``schedules.sync_schedules``)."""
        if self._sync_pending:
            sync_schedules(self.alias)
            self._sync_pending = False

    def run_once(self, now: datetime | None = None) -> int:
        """Fire every due tick; return how many jobs were enqueued. ``now`` replaces the
        database's clock (tests)."""
        self.sync()  # if it failed at the worker's start (a database not up yet), now
        clock = Now() if now is None else Value(now, output_field=DateTimeField())
        # Every enabled schedule in one read (there are few): the due ones fire, and the others
        # tell how long nothing will be due (``seconds_to_next``).
        enabled = Schedule.objects.using(self.alias).filter(enabled=True).annotate(clock=clock)
        fired = 0
        waits: list[float] = []
        for schedule in enabled:
            moment: datetime = schedule.clock
            if schedule.next_run_at is not None and schedule.next_run_at > moment:
                waits.append((schedule.next_run_at - moment).total_seconds())
                continue
            waits.append(0.0)  # its next tick may be near: look again after one interval
            try:
                fired += self._fire(schedule, moment)
            except Exception as exc:  # one broken schedule must not stop the others
                self._report(schedule, f"{type(exc).__name__}: {exc}")
        self.seconds_to_next = min(waits, default=None)
        return fired

    def _fire(self, schedule: Schedule, now: datetime) -> int:
        problem = self._problem(schedule)
        if problem is not None:
            self._report(schedule, problem)
            return 0
        rows = Schedule.objects.using(self.alias).filter(
            pk=schedule.pk, enabled=True, next_run_at=schedule.next_run_at
        )
        if schedule.next_run_at is None:  # made at run time without a next tick: start now
            rows.update(next_run_at=next_tick(schedule.cron, schedule.timezone, now))
            return 0
        ticks, following = self._ticks(schedule, schedule.next_run_at, now)
        fired = 0
        with transaction.atomic(using=self.alias):
            driver_for(self.alias).bound_lock_waits()  # an operator's open edit of the row
            moved = rows.update(
                next_run_at=following,
                last_run_at=ticks[-1] if ticks else schedule.last_run_at,
                updated_at=Now(),
            )
            if not moved:  # another worker fired these ticks, or an operator edited the row
                return 0
            for tick in ticks:
                fired += self._enqueue(schedule, tick)
        if fired:
            logger.info(
                "schedule %s: fired %d tick(s), next at %s", schedule.name, fired, following
            )
        return fired

    def _ticks(
        self, schedule: Schedule, first: datetime, now: datetime
    ) -> tuple[list[datetime], datetime]:
        """The ticks to fire (in order) and the next tick after them."""
        cron, zone = schedule.cron, schedule.timezone
        if schedule.catch_up == CatchUp.ALL:
            ticks = [first]
            following = next_tick(cron, zone, first)
            while following <= now and len(ticks) < _BATCH:
                ticks.append(following)
                following = next_tick(cron, zone, following)
            return ticks, following  # a longer backlog goes on at the next pass
        latest = latest_tick(cron, zone, first, now)
        following = next_tick(cron, zone, now)
        if schedule.catch_up == CatchUp.NONE:
            grace = timedelta(seconds=float(conf.SCHEDULE_MISFIRE_GRACE))
            return ([latest] if now - latest <= grace else []), following
        return [latest], following

    def _enqueue(self, schedule: Schedule, tick: datetime) -> int:
        task = find_task(schedule.task_name)
        assert task is not None  # checked by _problem
        if schedule.queue:
            task = task.using(queue=schedule.queue)
        try:
            with transaction.atomic(using=self.alias):  # a savepoint: the job goes with the run
                job = task.enqueue(*schedule.args, **schedule.kwargs)
                ScheduleRun.objects.using(self.alias).create(
                    schedule=schedule, fire_at=tick, job=job
                )
        except IntegrityError:
            logger.info("schedule %s: the tick at %s fired already", schedule.name, tick)
            return 0
        return 1

    def _problem(self, schedule: Schedule) -> str | None:
        if find_task(schedule.task_name) is None:
            return (
                f"task {schedule.task_name!r} is not registered in this worker (the fleet's "
                "maintainer fires every cron tick: register the task on every worker)"
            )
        return cron_problem(schedule.cron) or timezone_problem(schedule.timezone)

    def _report(self, schedule: Schedule, problem: str) -> None:
        # Once per schedule and problem: the schedule stays due, and this runs every second.
        key = (schedule.name, problem)
        if key not in self._reported:
            self._reported.add(key)
            logger.error("schedule %s does not fire: %s", schedule.name, problem)


def run_once(now: datetime | None = None, alias: str | None = None) -> int:
    """Fire the due cron ticks once (see ``Scheduler``); return how many jobs were enqueued."""
    return Scheduler(alias or conf.DATABASE, float(conf.SCHEDULER_INTERVAL)).run_once(now)
