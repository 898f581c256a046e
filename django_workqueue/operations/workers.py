"""The live workers, and changing a worker's slots while it runs.

``scale_worker`` writes the request into the worker's ``WorkerProcess`` row; the worker reads it
at its next heartbeat (within ``WORKQUEUE["HEARTBEAT_INTERVAL"]``, or ``IDLE_HEARTBEAT_INTERVAL``
for a worker with no job), applies it and clears it.
Growing starts slot threads at once; shrinking retires slots as their current jobs end, so no
running job is interrupted.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import QuerySet
from django.db.models.functions import Now

from ..conf import workqueue_settings as conf
from ..exceptions import InvalidSlots, UnknownWorker
from ..models import WorkerProcess
from ..payload import describe
from ..worker.slots import MAX_SLOTS
from .jobs import OperationResult

#: A worker not seen for this many heartbeat intervals is not counted as live.
LIVE_AFTER_HEARTBEATS = 3


def workers(*, alias: str | None = None) -> QuerySet[WorkerProcess]:
    """The workers seen within the last three heartbeat intervals (of an idle worker, which
    beats least often: ``IDLE_HEARTBEAT_INTERVAL``), newest first.

    >>> [(w.id, w.concurrency, w.queues) for w in operations.workers()]
    """
    beat = max(float(conf.HEARTBEAT_INTERVAL), float(conf.IDLE_HEARTBEAT_INTERVAL))
    seconds = LIVE_AFTER_HEARTBEATS * beat
    rows = WorkerProcess.objects.using(alias or conf.DATABASE)
    return rows.filter(last_seen_at__gte=Now() - timedelta(seconds=seconds))


def scale_worker(worker_id: str, slots: int, *, alias: str | None = None) -> OperationResult:
    """Ask worker ``worker_id`` to run ``slots`` slots; it applies this at its next heartbeat.

    An autoscaling worker (``runworker --concurrency MIN-MAX``) takes a number between its MIN
    and MAX and goes on autoscaling from there; a worker with slots per queue
    (``--queues a:8,b:2``) cannot be scaled.

    >>> operations.scale_worker("0b9f…", 16)
    """
    if isinstance(slots, bool) or not isinstance(slots, int) or not 1 <= slots <= MAX_SLOTS:
        raise InvalidSlots(
            f"scale_worker: slots must be a whole number from 1 to {MAX_SLOTS}, got "
            f"{describe(slots)}"
        )
    rows = WorkerProcess.objects.using(alias or conf.DATABASE).filter(pk=worker_id)
    row = rows.values("queue_slots", "concurrency_min", "concurrency_max").first()
    if row is None:
        raise UnknownWorker(
            f"no worker {describe(worker_id)} is registered (it stopped, or the id is wrong); "
            f"operations.workers() lists the live ones"
        )
    if row["queue_slots"]:
        budgets = ",".join(f"{name}:{n}" for name, n in row["queue_slots"].items())
        raise InvalidSlots(
            f"worker {worker_id} has slots per queue (--queues {budgets}); they cannot be "
            f"scaled at run time: restart it with other --queues"
        )
    floor, ceiling = row["concurrency_min"], row["concurrency_max"]
    if floor is not None and ceiling is not None and not floor <= slots <= ceiling:
        raise InvalidSlots(
            f"worker {worker_id} autoscales between {floor} and {ceiling} slots; ask for a "
            f"number in that range, or restart it with another --concurrency MIN-MAX"
        )
    if not rows.update(requested_concurrency=slots):
        raise UnknownWorker(f"worker {worker_id} stopped meanwhile")
    return OperationResult(
        action="scale_requested",
        count=1,
        message=f"worker {worker_id}: {slots} slots requested (applied at its next heartbeat)",
    )
