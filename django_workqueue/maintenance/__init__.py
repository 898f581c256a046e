"""Maintenance services: small classes around an idempotent ``run_once()``, each on its own
interval, run by the worker between its passes.

Every service is safe to run from any number of workers at once (each row it changes is one
guarded write), so correctness never depends on a leader; tests call ``run_once()`` directly.
For cost, one worker of the fleet runs them all, the holder of the ``maintenance`` lease
(``maintainer.py``, ``leadership.py``): fifty idle workers cost the database the maintenance
queries of one.
"""

from __future__ import annotations

import random
import time
from datetime import datetime


class Service:
    """One maintenance service. Subclasses set ``name`` and implement ``run_once``."""

    name = ""

    def __init__(self, alias: str, interval: float) -> None:
        self.alias = alias
        self.interval = interval
        # A random first run spreads the services of workers started together.
        self.next_run = time.monotonic() + random.uniform(0, interval)

    def run_once(self, now: datetime | None = None) -> int:
        """Do one pass; return how many jobs it changed. ``now`` replaces the database's
        clock (tests)."""
        raise NotImplementedError

    def due(self, at: float) -> bool:
        return at >= self.next_run

    def advance(self, at: float) -> None:
        """Plan the next run after one that starts at ``at``."""
        # ±20% jitter keeps the workers of a fleet from running a service in lockstep.
        self.next_run = at + self.interval * random.uniform(0.8, 1.2)

    def run_if_due(self, at: float | None = None) -> int:
        at = time.monotonic() if at is None else at
        if not self.due(at):
            return 0
        self.advance(at)
        return self.run_once()
