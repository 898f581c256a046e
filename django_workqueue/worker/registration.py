"""The worker's row in ``WorkerProcess``: for dashboards only (recovery depends on leases)."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence

from django.db.models.functions import Now

from ..models import WorkerProcess


class Registration:
    def __init__(self, alias: str, worker_id: str, queues: Sequence[str], concurrency: int):
        self.alias = alias
        self.worker_id = worker_id
        self.queues = list(queues)
        self.concurrency = concurrency
        self.registered = False

    def register(self) -> None:
        WorkerProcess.objects.using(self.alias).update_or_create(
            id=self.worker_id,
            defaults={
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "queues": self.queues,
                "concurrency": self.concurrency,
            },
        )
        self.registered = True

    def beat(self) -> None:
        """Mark the worker seen now; register again if its row was pruned while it stalled."""
        seen = WorkerProcess.objects.using(self.alias).filter(id=self.worker_id)
        if not seen.update(last_seen_at=Now()):
            self.registered = False

    def unregister(self) -> None:
        WorkerProcess.objects.using(self.alias).filter(id=self.worker_id).delete()
