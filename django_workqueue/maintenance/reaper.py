"""The reaper: jobs whose lease expired go back to ready, or end once their attempts are spent.

A crashed attempt counts as an attempt, so a job that kills its worker every time (a poison
pill) ends in the dead-letter queue instead of looping. Safe to run from any number of workers
at once: each row is reaped by one guarded UPDATE.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db.models.functions import Now

from ..conf import workqueue_settings as conf
from ..db import driver_for
from ..models import WorkerProcess

logger = logging.getLogger("django_workqueue.reaper")

# A WorkerProcess row not seen for this long belongs to a process that is gone.
_WORKER_GONE_AFTER = timedelta(minutes=5)


def run_once(now: datetime | None = None, alias: str | None = None) -> int:
    """Reap expired leases once; return how many jobs were reaped."""
    alias = alias or conf.DATABASE
    reaped = driver_for(alias).reap(now=now)
    if reaped:
        logger.warning("reaped %d job(s) whose worker stopped renewing: %s", len(reaped), reaped)
    cutoff = (now - _WORKER_GONE_AFTER) if now is not None else Now() - _WORKER_GONE_AFTER
    WorkerProcess.objects.using(alias).filter(last_seen_at__lt=cutoff).delete()
    return len(reaped)
