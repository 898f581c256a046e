"""The promoter: scheduled jobs whose time has come become ready, in batches.

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
        if total:
            logger.debug("promoted %d scheduled job(s) to ready", total)
        return total

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
        if earliest is None:
            return None
        run_after, clock = earliest
        return (run_after - (clock if now is None else now)).total_seconds()


def run_once(now: datetime | None = None, alias: str | None = None) -> int:
    """Promote due scheduled jobs once (see ``Promoter``); return how many."""
    return Promoter(alias or conf.DATABASE, float(conf.PROMOTE_INTERVAL)).run_once(now)
