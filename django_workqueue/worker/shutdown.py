"""Graceful shutdown: let running jobs finish within the grace period, then give the rest back.

First, at once, the jobs of the claim-ahead buffer (``ahead.py``) that no slot took: they
never began, so they go back to ready uncharged before the grace period starts.

Past the grace period, unfinished jobs are released to ready, uncharged and in their place
(``OutcomeKind.RELEASE``), and their bodies are told to stop (``AbortReason.SHUTDOWN``). A body
that returns just as it is released — after the release decision, before or during its write —
has handed its outcome to the completer: the worker then takes the job back (nobody can have
claimed it: same attempt, still ready, no owner) and writes that outcome, so a finished job is
never run again because of the release. A body that returns after that ran past the release:
its outcome is fenced out and the job runs again, at least once as always.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connections

from .. import wakeup
from ..attempt.ending import FINISHED
from ..context import AbortReason
from ..db import locking
from ..maintenance.maintainer import RELEASED
from ..outcomes import Outcome, OutcomeKind
from ..workflow import release

if TYPE_CHECKING:
    from ..attempt.asyncloop import AsyncLoop
    from ..attempt.lease import LeaseKeeper, RunningJob
    from ..db import Driver
    from ..maintenance.maintainer import Maintainer
    from .ahead import AheadBuffer
    from .completer import Completer
    from .ledger import Ledger
    from .registration import Registration
    from .slots import SlotPool

logger = logging.getLogger("django_workqueue.worker")


@dataclass
class Shutdown:
    """The worker's shutdown sequence, given the parts it uses (``Worker.shutdown_sequence``
    builds it when it is needed: the parts as they are then). ``flush`` writes the outcomes
    slots handed over and forgets their jobs (``Worker._flush``)."""

    owner: str
    alias: str
    driver: Driver
    grace_seconds: float
    ledger: Ledger
    ahead: AheadBuffer
    completer: Completer
    leases: LeaseKeeper
    maintainer: Maintainer
    registration: Registration
    pool: SlotPool
    wake: threading.Event
    flush: Callable[[], object]
    listener: object | None = None
    loop: AsyncLoop | None = None

    def drain_and_stop(self) -> None:
        """Wait up to the grace period for running jobs, release the rest, stop every thread."""
        deadline = time.monotonic() + self.grace_seconds
        self.release_buffered()
        self.hand_over_maintenance()
        while len(self.ledger) and time.monotonic() < deadline:
            self.wake.clear()
            running = self.ledger.snapshot()
            try:
                self.completer.write_progress()
                self.flush()
                if self.leases.due(time.monotonic()):
                    self.leases.renew(running)
            except Exception as exc:
                logger.warning(
                    "worker %s: lease renewal failed during shutdown: %s", self.owner, exc
                )
            self.wake.wait(min(0.1, max(0.0, deadline - time.monotonic())))
        self.release_remaining()
        self.pool.stop()
        wakeup.unregister(self.wake)
        if self.listener is not None:
            standby = getattr(self.listener, "standby", None)
            self.listener.stop()  # type: ignore[attr-defined]
            if standby is not None:  # given up on the way out, with a NOTIFY: another takes it
                self.listener.join(timeout=2.0)  # type: ignore[attr-defined]
                if self.listener.is_alive():  # type: ignore[attr-defined]
                    self.listener.cancel()  # type: ignore[attr-defined]
        if self.loop is not None:
            self.loop.close()
        self.maintainer.finish(deadline - time.monotonic())
        try:
            self.registration.unregister()
        except Exception as exc:
            logger.warning("worker %s: could not remove its registry row: %s", self.owner, exc)
        connections[self.alias].close()
        summary_text = summary(self.ledger.finished_count, self.completer.endings)
        logger.info("worker %s stopped after %s", self.owner, summary_text)

    def hand_over_maintenance(self) -> None:
        """Give up the fleet's maintenance lease at once, not at the end of the drain, and say
        so (a NOTIFY on PostgreSQL): another worker takes it over within a moment."""
        try:
            if self.maintainer.release():
                self.driver.notify([RELEASED])
        except Exception as exc:  # it expires on its own
            logger.warning(
                "worker %s: could not release the maintenance lease: %s", self.owner, exc
            )

    def release_buffered(self) -> None:
        """At once: give the jobs claimed ahead that no slot took back to ready, uncharged
        (they never began: ``worker/ahead.py``), and forget them; a release that fails leaves
        them to their lease, and the reaper gives them back uncharged too."""
        buffered = self.ahead.close()
        taken = self.ahead.taken()
        if taken:  # bodies that began since the last pass: a crash during the grace is charged
            try:
                self.driver.began(self.owner, taken)
            except Exception as exc:
                logger.warning("worker %s: could not write which jobs began: %s", self.owner, exc)
        if not buffered:
            return
        with self.ledger.lock:
            unstarted = {job.id: item for job, item in buffered}
            for job_id, item in unstarted.items():
                item.context.released = True
                self.ledger.forget(job_id, item)
        self._release(unstarted, "claimed ahead, never begun")

    def release_remaining(self) -> None:
        """Past the grace period: give unfinished jobs back to ready, uncharged."""
        self._flush()
        with self.ledger.lock:  # slots hand over under this lock: the snapshot sees every finish
            running = self.ledger.running
            unfinished = {k: v for k, v in running.items() if not v.context.finished}
            for item in unfinished.values():
                item.context.released = True
        if not unfinished:
            return
        for item in unfinished.values():
            item.context.abort(AbortReason.SHUTDOWN)
        self._retake_late(self._release(unfinished, "at shutdown"))

    def _release(self, items: dict[int, RunningJob], why: str) -> set[tuple[int, int]]:
        """Write ``items`` back to ready, uncharged (``OutcomeKind.RELEASE``); return those
        written ``(id, attempt)``."""
        releases = [
            Outcome(
                job_id=job_id, attempt=item.context.attempt, kind=OutcomeKind.RELEASE,
                max_attempts=item.context.job.max_attempts,
                attempts_charged=item.context.job.attempts_charged,
                task_name=item.context.job.task_name,
                queue=item.context.job.queue,
            )
            for job_id, item in items.items()
        ]  # fmt: skip
        self.completer.attach_progress(releases)  # a report still waiting for its turn lands too
        try:
            # Through release.record, like every worker write: a release the row turns into
            # "cancelled" (a cancellation was requested) ends the job, and its workflow,
            # signals and counters must learn of it in the same commit.
            # A row another session holds is tried again for a bounded time
            # (db/locking.py), never holding up the others; one still locked then is left to
            # its lease.
            record = functools.partial(release.record, self.driver, self.owner, skip_locked=True)
            until = time.monotonic() + locking.OPERATION_LOCK_WAIT
            written = locking.retry_in_place(
                self.driver, releases, record, f"worker {self.owner}: release", until=until
            ).written
        except Exception as exc:  # the reaper will recover them instead
            logger.warning("worker %s: release failed (%s); leases will expire", self.owner, exc)
            written = set()
        for job_id, _ in sorted(written):
            logger.info("job %s released back to ready %s", job_id, why)
        return written

    def _retake_late(self, written: set[tuple[int, int]]) -> None:
        # Bodies that returned after the snapshot: take their jobs back and write their outcomes.
        late = self.completer.take({job_id for job_id, _ in written})
        for outcome in late:
            if outcome.kind == OutcomeKind.RELEASE:  # the body stopped as told: released already
                continue
            try:
                retaken = self.driver.retake(self.owner, outcome.job_id, outcome.attempt)
            except Exception as exc:
                logger.warning(
                    "job %s: could not take it back after release: %s", outcome.job_id, exc
                )
                retaken = False
            if retaken:
                self.completer.hand_over(outcome)
            else:  # claimed by another worker meanwhile, or the release ended it (cancelled)
                logger.warning(
                    "job %s: its %s outcome arrived just after the job was released at "
                    "shutdown and was not written: the job was claimed again or ended meanwhile",
                    outcome.job_id, outcome.kind,
                )  # fmt: skip
        self._flush()

    def _flush(self) -> None:
        try:
            self.flush()
        except Exception as exc:  # their leases will expire and be reaped
            logger.warning("worker %s: could not write finished outcomes: %s", self.owner, exc)


def summary(attempts: int, endings: Mapping[str, int]) -> str:
    """What the worker did: ``9 attempts: 7 jobs finished (6 succeeded, 1 dead-lettered),
    2 to run again (2 retried)``; attempts and the jobs they finished counted apart
    (``endings``: the completer's counts by ending)."""
    finished = {name: n for name, n in endings.items() if name in FINISHED and n}
    again = {name: n for name, n in endings.items() if name not in FINISHED and n}
    text = f"{_count(attempts, 'attempt')}: "
    text += f"{_count(sum(finished.values()), 'job')} finished"
    if finished:
        text += f" ({_listed(finished)})"
    if again:
        text += f", {sum(again.values())} to run again ({_listed(again)})"
    return text


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _listed(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items()))
