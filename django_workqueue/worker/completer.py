"""The completer: outcomes and progress that slots hand over, written in batches.

Slots never write a job's row themselves (``atomic=True`` tasks aside, which record inside their
own transaction): they hand the outcome here and are free at once. The control thread then
writes every outcome that piled up with one fenced statement per pass, so under load one round
trip completes many jobs.

A row another session holds locked never holds up the others (``db/locking.py``): its outcome
is kept and tried again within ``LOCKED_RETRY_SECONDS``, the rest are written at once.

Progress reports are kept too, the latest per job, and written in their own batch, which skips
rows other sessions hold locked and keeps those reports for a later pass. A job's report is
written at most once per ``WORKQUEUE["PROGRESS_INTERVAL"]``: a newer one waits for its turn
(replacing any older one still waiting), so a tight loop of reports costs a write per interval.
A job's last report rides with its outcome, in the same statement, so it always lands with it.
Nothing that goes wrong with progress touches an outcome: an outcome leaves this queue only once
it was written, found stale (its lease lost, its row gone), or refused by the database and
replaced by a failure that says why.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time

from ..attempt.connections import is_transient
from ..attempt.ending import log_endings, log_not_written, unstorable
from ..attempt.throttle import ProgressThrottle
from ..context import JobContext
from ..db import Driver, Outcome, Progress, Recorded
from ..db.locking import LOCKED_RETRY_SECONDS, is_locked, row_locked
from ..workflow import release

logger = logging.getLogger("django_workqueue.worker")


class Completer:
    def __init__(self, driver: Driver, owner: str) -> None:
        self.driver = driver
        self.owner = owner
        self._outcomes: collections.deque[Outcome] = collections.deque()
        self._progress: dict[int, JobContext] = {}  # reported, not yet written
        self._throttle = ProgressThrottle()
        self._lock = threading.Lock()
        self._recorded: collections.deque[Outcome] = collections.deque()  # written by slots
        self._retry_at = math.inf  # monotonic: when outcomes kept for a locked row retry
        self.endings: collections.Counter[str] = collections.Counter()
        """How many attempts ended how (``ending.ENDINGS``), counted once written."""

    def hand_over(self, outcome: Outcome, started: float | None = None) -> None:
        """Called by a slot: this outcome is to be written (the slot is free now). ``started``
        (monotonic) is when its job was claimed, for the line that reports it."""
        if started is not None:
            outcome.duration = time.monotonic() - started
        self._outcomes.append(outcome)

    def written_elsewhere(self, outcome: Outcome, started: float | None = None) -> None:
        """Called by a slot: this outcome was written in the body's own transaction
        (``atomic=True``); the control thread reports it with the next batch."""
        if started is not None:
            outcome.duration = time.monotonic() - started
        self._recorded.append(outcome)

    def report(self, context: JobContext) -> bool:
        """Called by a slot: this job's latest progress is to be written. Returns whether it
        may be written now (the control thread is worth waking), or must wait for its turn."""
        with self._lock:
            self._progress[context.job.id] = context
            return self._throttle.due(context.job.id)

    def progress_due_at(self) -> float:
        """When (monotonic) the first report waiting for its turn may be written, or inf."""
        if not self._progress:  # the common case, asked before every sleep: no lock needed
            return math.inf
        with self._lock:
            return self._throttle.due_at(self._progress)

    def take(self, job_ids: set[int]) -> list[Outcome]:
        """Remove and return the pending outcomes of ``job_ids``.

        Slot threads may hand outcomes over meanwhile, so the queue is never iterated: the
        outcomes there now are popped one by one (each pop is atomic), and those not taken go
        back to the front in their order, ahead of any handed over during the take."""
        taken: list[Outcome] = []
        kept: list[Outcome] = []
        for _ in range(len(self._outcomes)):
            outcome = self._outcomes.popleft()
            (taken if outcome.job_id in job_ids else kept).append(outcome)
        self._outcomes.extendleft(reversed(kept))
        return taken

    def outcomes_due_at(self) -> float:
        """When (monotonic) outcomes kept because their rows were locked are tried again, or
        inf (``LOCKED_RETRY_SECONDS`` after the pass that kept them)."""
        return self._retry_at if self._outcomes else math.inf

    @property
    def pending(self) -> int:
        """Outcomes handed over and not written yet."""
        return len(self._outcomes)

    # --- progress -------------------------------------------------------------------------

    def write_progress(self) -> None:
        """Write every pending progress report in one statement.

        Reports whose row another session holds locked are kept for a later pass (unless a
        newer report replaced them meanwhile); on a lost connection all are kept and the error
        is raised; a report the database refuses is dropped with a log line, never taking the
        other reports with it.
        """
        if not self._progress and not self._throttle:
            return  # nothing reported, nothing throttled: every pass of jobs that report none
        now = time.monotonic()
        with self._lock:
            self._throttle.expire(now, self._progress)  # throttles no more
            pending, self._progress = self._progress, {}
            for job_id in list(pending):
                if not self._throttle.due(job_id, now):  # not its turn yet
                    self._progress[job_id] = pending.pop(job_id)
        reports = {job_id: context.progress_report() for job_id, context in pending.items()}
        batch = [report for report in reports.values() if report is not None]
        if not batch:
            return
        try:
            recorded = self.driver.write_progress(self.owner, batch, skip_locked=True)
        except Exception as exc:
            if is_transient(exc):
                self._keep_progress(pending)
                raise
            recorded = self._write_progress_one_by_one(batch, exc)
        with self._lock:
            # Tried (written, stale, or busy and kept): the job's interval starts now.
            self._throttle.written(pending, now)
        self._keep_progress({job_id: pending[job_id] for job_id in recorded.busy})

    def _keep_progress(self, contexts: dict[int, JobContext]) -> None:
        with self._lock:
            for job_id, context in contexts.items():
                self._progress.setdefault(job_id, context)  # a newer report wins

    def _write_progress_one_by_one(self, batch: list[Progress], error: Exception) -> Recorded:
        logger.warning(
            "worker %s: progress batch refused (%s); writing one by one", self.owner, error
        )
        written: set[tuple[int, int]] = set()
        busy: set[int] = set()
        for report in batch:
            try:
                recorded = self.driver.write_progress(self.owner, [report], skip_locked=True)
            except Exception as exc:
                if is_transient(exc):  # lost the connection meanwhile: try again later
                    busy.add(report.job_id)
                else:
                    logger.warning(
                        "job %s: progress report dropped, the database refused it: %s",
                        report.job_id, exc,
                    )  # fmt: skip
                continue
            written |= recorded.written
            busy |= recorded.busy
        return Recorded(written=written, busy=busy)

    # --- outcomes -------------------------------------------------------------------------

    def write_outcomes(self) -> tuple[list[Outcome], set[tuple[int, int]]]:
        """Write every outcome handed over so far in one statement.

        Returns (done, written): ``done`` are the outcomes dealt with, ``written`` (job id,
        attempt) of those written (the others' leases were lost or their rows are gone; a
        stale attempt's outcome may share its batch with the current attempt's outcome of the
        same job). Outcomes whose row another session holds locked are kept for a later pass;
        on a lost connection all are kept and the error is raised.
        """
        outcomes = self.take_outcomes()
        if not outcomes:
            return [], set()
        try:
            recorded = release.record(self.driver, self.owner, outcomes, skip_locked=True)
        except Exception as exc:
            if is_transient(exc) and not row_locked(self.driver, exc):
                self.put_back(outcomes)  # keep them for the next try
                raise
            # Refused, or a row another session holds (a dependent's) stopped the batch after
            # its bounded wait: each alone, so only that row's outcome waits (db/locking.py).
            recorded = self._write_one_by_one(outcomes, exc)
        return self.settle(outcomes, recorded)

    def take_outcomes(self) -> list[Outcome]:
        """Take every outcome handed over so far, each with its job's last progress report,
        to be written by the caller (``record_in_pass``) and then ``settle``-d, or ``put_back``
        if the write did not commit."""
        self._report(self._take_recorded(), {})
        outcomes: list[Outcome] = []
        while self._outcomes:
            outcomes.append(self._outcomes.popleft())
        if outcomes:
            self.attach_progress(outcomes)
        return outcomes

    def record_in_pass(self, outcomes: list[Outcome]) -> Recorded:
        """Write ``outcomes`` in the caller's transaction, a worker's pass, without a savepoint
        of its own: whatever fails ends that transaction, and the caller rolls it back, puts
        the outcomes back and writes them with ``write_outcomes`` (its fallbacks) instead. The
        answers nothing reads before the end of the write go out with the next statement
        (``Driver.pipelined``): the statistics' upsert, a NOTIFY."""
        with self.driver.pipelined():
            return release.record(
                self.driver, self.owner, outcomes, skip_locked=True, savepoint=False
            )

    def put_back(self, outcomes: list[Outcome]) -> None:
        """Outcomes taken whose write did not commit: first in line for the next write."""
        self._outcomes.extendleft(reversed(outcomes))

    def settle(
        self, outcomes: list[Outcome], recorded: Recorded
    ) -> tuple[list[Outcome], set[tuple[int, int]]]:
        """Once ``outcomes`` were written (committed): keep those whose row another session
        held for a later pass, log the others; returns (done, written) as ``write_outcomes``."""
        busy = recorded.busy
        if busy:  # rows another session holds locked: keep those outcomes for a later pass
            self._outcomes.extend(o for o in outcomes if o.job_id in busy)
            self._retry_at = time.monotonic() + LOCKED_RETRY_SECONDS
        else:
            self._retry_at = math.inf
        done = [outcome for outcome in outcomes if outcome.job_id not in busy]
        if self._throttle:  # some job's progress was written: forget those that ended
            with self._lock:
                for outcome in done:
                    self._throttle.forget(outcome.job_id)
        written = recorded.written
        reported = [o for o in done if (o.job_id, o.attempt) in written]
        if len(reported) < len(done):
            self._log_not_written([o for o in done if (o.job_id, o.attempt) not in written])
        ended_as = {ended.id: ended.status for ended in recorded.ended}
        self._report(reported, ended_as)
        return done, written

    def _take_recorded(self) -> list[Outcome]:
        taken: list[Outcome] = []
        while self._recorded:
            taken.append(self._recorded.popleft())
        return taken

    def _report(self, written: list[Outcome], ended_as: dict[int, str]) -> None:
        """The line of each written outcome, and the worker's count of endings."""
        if written:
            self.endings.update(log_endings(written, ended_as))

    def attach_progress(self, outcomes: list[Outcome]) -> None:
        """Each job's last progress report goes out with its outcome, in the same write."""
        if not self._progress:  # a job's report is kept before its slot hands the outcome over
            return
        with self._lock:
            for outcome in outcomes:
                context = self._progress.get(outcome.job_id)
                if context is not None and context.attempt == outcome.attempt:
                    del self._progress[outcome.job_id]
                    outcome.progress = context.progress
                    outcome._encoded = None

    def _write_one_by_one(self, outcomes: list[Outcome], error: Exception) -> Recorded:
        """The batch was refused: write each alone; one the database refuses is replaced by a
        discard that says why, so one bad value never blocks the others."""
        logger.warning(
            "worker %s: outcome batch %s (%s); writing one by one", self.owner,
            "stopped by a row lock" if is_locked(self.driver, error) else "refused", error,
        )  # fmt: skip
        written: set[tuple[int, int]] = set()
        busy: set[int] = set()
        for outcome in outcomes:
            try:
                try:
                    recorded = release.record(self.driver, self.owner, [outcome], skip_locked=True)
                except Exception as exc:
                    if is_transient(exc):
                        raise
                    recorded = release.record(
                        self.driver, self.owner, [unstorable(outcome, exc)], skip_locked=True
                    )
            except Exception as exc:  # lost the connection meanwhile: try again later
                logger.warning("job %s: outcome not written yet (%s)", outcome.job_id, exc)
                busy.add(outcome.job_id)
                continue
            written |= recorded.written
            busy |= recorded.busy
        return Recorded(written=written, busy=busy)

    def _log_not_written(self, outcomes: list[Outcome]) -> None:
        """Say why each outcome was not written: its row is gone, or the lease was lost."""
        if not outcomes:
            return
        try:
            existing = self.driver.lease_states(o.job_id for o in outcomes)
        except Exception:  # only the log line's wording depends on it
            existing = {o.job_id: ("", None) for o in outcomes}
        for outcome in outcomes:
            log_not_written(outcome, gone=outcome.job_id not in existing)
