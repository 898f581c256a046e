"""The completer: outcomes and progress that slots hand over, written in batches.

Slots never write a job's row themselves (``atomic=True`` tasks aside, which record inside their
own transaction): they hand the outcome here and are free at once. The control thread then
writes every outcome that piled up with one fenced statement per pass, so under load one round
trip completes many jobs. Progress reports are kept the same way, latest value per job, and
written before the outcomes, so a job's last report always lands.
"""

from __future__ import annotations

import collections
import logging
import threading

from ..context import JobContext
from ..db import Driver, Outcome
from .execution import is_transient, unstorable

logger = logging.getLogger("django_workqueue.worker")


class Completer:
    def __init__(self, driver: Driver, owner: str) -> None:
        self.driver = driver
        self.owner = owner
        self._outcomes: collections.deque[Outcome] = collections.deque()
        self._progress: dict[int, JobContext] = {}  # reported, not yet written
        self._lock = threading.Lock()

    def hand_over(self, outcome: Outcome) -> None:
        """Called by a slot: this outcome is to be written (the slot is free now)."""
        self._outcomes.append(outcome)

    def report(self, context: JobContext) -> None:
        """Called by a slot: this job's latest progress is to be written."""
        with self._lock:
            self._progress[context.job.id] = context

    def write_progress(self) -> None:
        with self._lock:
            reported, self._progress = self._progress, {}
        for context in reported.values():
            context.write_progress()

    def write_outcomes(self) -> tuple[list[Outcome], set[tuple[int, int]]]:
        """Write every outcome handed over so far in one statement.

        Returns (done, written): ``done`` are the outcomes dealt with, ``written`` (job id,
        attempt) of those written (the others' leases were lost; a stale attempt's outcome may
        share its batch with the current attempt's outcome of the same job). Outcomes whose
        row another session holds locked are kept for a later pass; on a lost connection all
        are kept and the error is raised.
        """
        outcomes: list[Outcome] = []
        while self._outcomes:
            outcomes.append(self._outcomes.popleft())
        if not outcomes:
            return [], set()
        # A slot reports progress before it hands over the outcome, so every report of these
        # jobs is in hand now: write them while the rows are still running.
        self.write_progress()
        try:
            recorded = self.driver.record_many(self.owner, outcomes, skip_locked=True)
            written, busy = recorded.written, recorded.busy
        except Exception as exc:
            if is_transient(exc):
                self._outcomes.extendleft(reversed(outcomes))  # keep them for the next try
                raise
            written, busy = self._write_one_by_one(outcomes, exc)
        if busy:  # rows another session holds locked: keep those outcomes for a later pass
            self._outcomes.extend(o for o in outcomes if o.job_id in busy)
        return [outcome for outcome in outcomes if outcome.job_id not in busy], written

    def _write_one_by_one(
        self, outcomes: list[Outcome], error: Exception
    ) -> tuple[set[tuple[int, int]], set[int]]:
        """The batch was refused: write each alone; one the database refuses is discarded
        with an error that says so, so one bad value never blocks the others.
        Returns (written, busy): busy ones are kept for a later pass."""
        logger.warning(
            "worker %s: outcome batch refused (%s); writing one by one", self.owner, error
        )
        written: set[tuple[int, int]] = set()
        busy: set[int] = set()
        for outcome in outcomes:
            try:
                try:
                    recorded = self.driver.record_many(self.owner, [outcome], skip_locked=True)
                except Exception as exc:
                    if is_transient(exc):
                        raise
                    recorded = self.driver.record_many(
                        self.owner, [unstorable(outcome, exc)], skip_locked=True
                    )
            except Exception as exc:  # lost the connection meanwhile: try again later
                logger.warning("job %s: outcome not written yet (%s)", outcome.job_id, exc)
                busy.add(outcome.job_id)
                continue
            written |= recorded.written
            busy |= recorded.busy
        return written, busy
