"""The promoter: scheduled jobs whose time has come become ready, in batches.

Jobs that wait for a later time (a delay, a ``run_at``, a retry's backoff, a snooze) are
``scheduled``, outside the claim index, so that claims cost the same next to a million of them
as next to none (``wq_job_scheduled`` serves this service instead). A job becomes claimable
within one promoter interval of its ``run_after`` (``WORKQUEUE["PROMOTE_INTERVAL"]``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from .. import wakeup
from ..conf import workqueue_settings as conf
from ..db import driver_for
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


def run_once(now: datetime | None = None, alias: str | None = None) -> int:
    """Promote due scheduled jobs once (see ``Promoter``); return how many."""
    return Promoter(alias or conf.DATABASE, float(conf.PROMOTE_INTERVAL)).run_once(now)
