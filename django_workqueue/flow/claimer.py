"""What one pass of a worker claims: plain jobs, and jobs under flow control.

The plain claim (``Driver.claim``) takes jobs without a ``flow_key``; the flow claim
(``flow/claim.py``) takes the others, key by key, under their limits. A worker that knows a
flow-controlled task runs both on every pass, the two taking turns at going first so that
neither kind can take every slot from the other (priority orders jobs within each claim, not
between them). A worker that knows none still looks for flow-keyed jobs of its own tasks once
in a while (``STRAY_LOOK_SECONDS``): jobs enqueued before a task lost its ``concurrency=`` or
``fair_key=`` keep their key and would otherwise never be claimed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from ..db import ClaimedJob, CountedWrite, Driver, Recorded
from ..flow.claim import FlowClaimer, uses_flow_claim

logger = logging.getLogger("django_workqueue.worker")

STRAY_LOOK_SECONDS = 60.0


class Claimer:
    def __init__(self, driver: Driver, owner: str) -> None:
        self.driver = driver
        self.owner = owner
        self.flow = FlowClaimer(driver, owner)
        self.uses_flow = uses_flow_claim()
        self._flow_first = False
        self._next_stray_look = 0.0  # monotonic; the first pass looks
        self._carried: CountedWrite | None = None
        self._recorded: Recorded | None = None

    def begin_pass(self) -> None:
        """A pass's claims begin: ``held`` and ``retry_at`` will say what they found."""
        self.flow.begin_pass()

    @property
    def retry_at(self) -> float | None:
        """When a rate limit that held jobs back frees a start (monotonic), if one did."""
        return self.flow.retry_at if self.uses_flow else None

    @property
    def held(self) -> bool:
        """Whether a flow claim of the last pass left ready jobs at their limit."""
        return self.uses_flow and self.flow.held

    @property
    def single_plain(self) -> bool:
        """Whether this pass's claim is the plain claim alone (no flow claim, no look for
        stray flow-keyed jobs due)."""
        return not self.uses_flow and time.monotonic() < self._next_stray_look

    def carry(self, write: CountedWrite) -> None:
        """The next plain claim sends ``write`` with it, in one statement
        (``Driver.record_and_claim``); ``send_carried`` sends it alone if no claim does."""
        self._carried, self._recorded = write, None

    def send_carried(self) -> None:
        """Send the carried write alone (no claim took it this pass)."""
        if self._carried is not None:
            self._plain([], 0)

    def carried(self) -> Recorded | None:
        """What the carried write recorded, once its statement returned (and so was kept);
        None if it failed or never went. Nothing is carried after this call."""
        recorded, self._carried, self._recorded = self._recorded, None, None
        return recorded

    def claim(self, queues: Sequence[str], limit: int) -> list[ClaimedJob]:
        """Claim up to ``limit`` jobs of ``queues``. If a second claim fails after a first
        one took jobs, those are returned (and run) and the failure is logged: they are leased
        to this worker, and dropping them would leave them to the reaper."""
        claims = [self._plain]
        if self.uses_flow:
            self._flow_first = not self._flow_first
            claims = [self.flow.claim, self._plain] if self._flow_first else [
                self._plain, self.flow.claim]  # fmt: skip
        elif time.monotonic() >= self._next_stray_look:
            self._next_stray_look = time.monotonic() + STRAY_LOOK_SECONDS
            claims.append(self.flow.claim)
        jobs: list[ClaimedJob] = []
        for claim in claims:
            if limit <= len(jobs):
                break
            try:
                jobs += claim(queues, limit - len(jobs))
            except Exception:
                if not jobs:
                    raise
                logger.exception(
                    "worker %s: a claim failed after another took %s jobs; running those",
                    self.owner, len(jobs),
                )  # fmt: skip
                break
        return jobs

    def _plain(self, queues: Sequence[str], limit: int) -> list[ClaimedJob]:
        write = self._carried
        if write is None:
            return self.driver.claim(queues, limit, self.owner)
        self._carried = None  # sent once, whatever its statement meets
        self._recorded, jobs = self.driver.record_and_claim(self.owner, write, queues, limit)
        return jobs
