"""The worker's row in ``WorkerProcess``: for dashboards, ``operations.scale_worker`` and liveness.

The row's ``liveness`` is the token that tells the fleet's maintainer, without waiting for a
lease, that this process is gone (``maintenance/liveness.py``): on PostgreSQL the key its LISTEN
session holds, on SQLite its pid's identity on its host; ``liveness_since`` says when it was
taken (a PostgreSQL key taken before the server's last start proves nothing). It is written
only once the token holds, so a worker is never taken for dead before it could be seen alive.

The row shows the host, pid, queues, when the worker started, when it was last seen and how many
jobs it was running then (both written by each heartbeat), the slots the worker has now
(``concurrency``, which autoscaling moves), its floor and ceiling when it autoscales, and its
budget per queue. ``scale_worker`` writes
``requested_concurrency``; the heartbeat reads it back and the worker clears it once applied.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db.models.functions import Now

from ..db import LivenessToken
from ..models import WorkerProcess


class Registration:
    def __init__(
        self,
        alias: str,
        worker_id: str,
        queues: Sequence[str],
        concurrency: int,
        *,
        concurrency_range: tuple[int, int] | None = None,
        queue_slots: Mapping[str, int] | None = None,
        liveness: Callable[[], LivenessToken | None] = lambda: None,
    ):
        self.alias = alias
        self.worker_id = worker_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.concurrency_range = concurrency_range
        self.queue_slots = dict(queue_slots or {})
        self.liveness = liveness
        """The liveness token this process holds now (None: none yet, or lost)."""
        self.declared: LivenessToken | None = None
        """The token the row shows."""
        self.registered = False

    def register(self) -> None:
        floor, ceiling = self.concurrency_range or (None, None)
        token = self.liveness()
        WorkerProcess.objects.using(self.alias).update_or_create(
            id=self.worker_id,
            defaults={
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "queues": self.queues,
                "concurrency": self.concurrency,
                "concurrency_min": floor,
                "concurrency_max": ceiling,
                "queue_slots": self.queue_slots,
                **_declaration(token),
            },
        )
        self.registered = True
        self.declared = token

    def declare_liveness(self) -> None:
        """Show the token this process holds now, written only when it changed (a new value,
        or the same key taken again by a new session). A token lost or in doubt while the
        process runs (a database restart, a cut LISTEN connection, a session the server ended
        unseen) is shown as none: this code running proves the worker alive, so the reaper
        leaves its jobs to their leases until a token is held again, instead of taking a live
        worker for dead and reaping the jobs it claims meanwhile. (Called before every claim.)"""
        token = self.liveness()
        if token == self.declared:
            return
        WorkerProcess.objects.using(self.alias).filter(id=self.worker_id).update(
            **_declaration(token)
        )
        self.declared = token

    def beat(self, running: int = 0) -> int | None:
        """Mark the worker seen now, running ``running`` jobs; return the slots
        ``scale_worker`` asked for, if any.

        Registers again if the row was pruned while the worker stalled."""
        seen = WorkerProcess.objects.using(self.alias).filter(id=self.worker_id)
        # The usual beat is one statement: the row has no request. A row it misses has one, or
        # is gone: a second write and a read tell which (the ORM has no UPDATE ... RETURNING).
        if seen.filter(requested_concurrency__isnull=True).update(
            last_seen_at=Now(), running=running
        ):
            return None
        if not seen.update(last_seen_at=Now(), running=running):
            self.registered = False
            return None
        return seen.values_list("requested_concurrency", flat=True).first()

    def record_slots(self, concurrency: int, *, requested: int | None = None) -> None:
        """Show the slots the worker has now; with ``requested``, clear that request (unless a
        newer one replaced it meanwhile)."""
        rows = WorkerProcess.objects.using(self.alias).filter(id=self.worker_id)
        if requested is None or not rows.filter(requested_concurrency=requested).update(
            concurrency=concurrency, requested_concurrency=None
        ):
            rows.update(concurrency=concurrency)
        self.concurrency = concurrency  # shown: a failed write is tried again next pass

    def unregister(self) -> None:
        WorkerProcess.objects.using(self.alias).filter(id=self.worker_id).delete()


def _declaration(token: LivenessToken | None) -> dict[str, Any]:
    """The row's fields that declare ``token`` (None: no token, leases only)."""
    if token is None:
        return {"liveness": "", "liveness_since": Now()}
    return {"liveness": token.value, "liveness_since": token.taken_at or Now()}
