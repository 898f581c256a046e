"""The promoter: scheduled jobs whose time has come become ready, in batches (and jobs waiting
for a signal whose wait timed out: ``workflow/inbox.py``).

Jobs that wait for a later time (a delay, a ``run_at``, a retry's backoff, a snooze) are
``scheduled``, outside the claim index, so that claims cost the same next to a million of them
as next to none (``wq_job_scheduled`` serves this service instead). A job becomes claimable
within one promoter interval of its ``run_after`` (``WORKQUEUE["PROMOTE_INTERVAL"]``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.db.models.functions import Now

from .. import wakeup
from ..conf import workqueue_settings as conf
from ..db import driver_for
from ..models import Job
from ..states import Status
from ..workflow import inbox
from . import Service

logger = logging.getLogger("django_workqueue.promoter")

_BATCH = 1000


class Promoter(Service):
    name = "promoter"

    def run_once(self, now: datetime | None = None) -> int:
        """Promote every due scheduled job (in batches); return how many."""
        driver = driver_for(self.alias)
        total = 0
        while True:
            queues = driver.promote(_BATCH, now)
            total += len(queues)
            if queues:
                wakeup.wake(set(queues))
            if len(queues) < _BATCH:
                break
        # Waits for a signal whose timeout passed: the body runs again and takes the timeout.
        timed_out = inbox.time_out(self.alias, now, _BATCH)
        if total or timed_out:
            logger.debug("promoted %d scheduled job(s), %d timed-out wait(s) to ready",
                         total, timed_out)  # fmt: skip
        return total + timed_out

    def seconds_to_next(self, now: datetime | None = None) -> float | None:
        """Seconds until the earliest scheduled job is due by the database's clock (0 or less:
        due now), or None when no job is scheduled. One read through ``wq_job_scheduled``."""
        earliest = (
            Job.objects.using(self.alias)
            .filter(status=Status.SCHEDULED)
            .order_by("run_after")
            .annotate(clock=Now())
            .values_list("run_after", "clock")
            .first()
        )
        times_out = inbox.next_timeout(self.alias)
        if earliest is None:
            if times_out is None:
                return None
            earliest = (times_out, self._clock())
        run_after, clock = earliest
        if times_out is not None:
            run_after = min(run_after, times_out)
        return (run_after - (clock if now is None else now)).total_seconds()

    def _clock(self) -> datetime:
        return driver_for(self.alias).now()


def run_once(now: datetime | None = None, alias: str | None = None) -> int:
    """Promote due scheduled jobs once (see ``Promoter``); return how many."""
    return Promoter(alias or conf.DATABASE, float(conf.PROMOTE_INTERVAL)).run_once(now)
