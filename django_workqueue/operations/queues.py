"""Pausing and resuming queues at run time.

A pause is a ``Queue`` row with ``paused_at`` set, and every claim statement leaves out the
queues paused when it runs (see ``Driver.claim``): from the pause's commit on, no worker of any
host claims from the queue, with nothing cached in workers that could lag behind. Jobs already
running finish; enqueue keeps working (the jobs wait, ready, for the resume).
"""

from __future__ import annotations

import functools

from django.db import transaction
from django.db.models.functions import Now

from .. import wakeup
from ..conf import workqueue_settings as conf
from ..db import driver_for
from ..exceptions import UnknownQueue
from ..models import Queue
from ..payload import describe
from .jobs import OperationResult


def pause_queue(name: str, *, alias: str | None = None) -> OperationResult:
    """Stop every worker from claiming jobs of queue ``name`` until ``resume_queue(name)``.

    Jobs of the queue that are running finish; new jobs can still be enqueued to it.

    >>> pause_queue("emails")
    """
    db = _checked(name, alias)
    with transaction.atomic(using=db):
        # The row may not exist yet; two operators pausing at once both find it afterwards.
        Queue.objects.using(db).bulk_create([Queue(name=name)], ignore_conflicts=True)
        paused = (
            Queue.objects.using(db)
            .filter(name=name, paused_at__isnull=True)
            .update(paused_at=Now(), updated_at=Now())
        )
    if not paused:
        return OperationResult(action="unchanged", count=0, message=f"queue {name} already paused")
    return OperationResult(action="paused", count=1, message=f"queue {name} paused")


def resume_queue(name: str, *, alias: str | None = None) -> OperationResult:
    """Let workers claim jobs of queue ``name`` again; its workers are woken at once.

    >>> resume_queue("emails")
    """
    db = _checked(name, alias)
    with transaction.atomic(using=db):
        resumed = (
            Queue.objects.using(db)
            .filter(name=name, paused_at__isnull=False)
            .update(paused_at=None, updated_at=Now())
        )
        if resumed:  # its ready jobs are claimable again: wake the workers that serve it
            driver_for(db).notify([name])
            transaction.on_commit(functools.partial(wakeup.wake, [name]), using=db)
    if not resumed:
        return OperationResult(action="unchanged", count=0, message=f"queue {name} is not paused")
    return OperationResult(action="resumed", count=1, message=f"queue {name} resumed")


def check_queue(name: str) -> None:
    """Raise ``UnknownQueue`` unless ``name`` is one of ``WORKQUEUE["QUEUES"]``: what
    ``pause_queue`` and ``resume_queue`` check first (a dry run checks it too)."""
    if name not in conf.QUEUES:
        raise UnknownQueue(
            f"queue {describe(name)} is not one of WORKQUEUE['QUEUES'] {list(conf.QUEUES)}; "
            f"pause or resume one of those"
        )


def _checked(name: str, alias: str | None) -> str:
    check_queue(name)
    return alias or conf.DATABASE
