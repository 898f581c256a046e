"""The worker's claim planner: what a pass claims, and when a pass claims at all.

A pass claims only when there is a reason to (``claims_due``): a wake-up, a due poll, a filling
batch or a rate limit coming due, or a full claim just before; a pass for a renewal or
maintenance alone claims nothing. When it claims (``fill``): the free slots first take the jobs
of the claim-ahead buffer (``ahead.py``), then due batches (``batch.py``) take a slot each,
then one claim per queue (or per queue with free slots, for per-queue budgets: ``slots.py``)
through ``flow/claimer.py``, then, if that claim came back full, a claim ahead for the buffer.
The jobs claimed start once their claim is kept (``when_committed``: after the pass's
transaction). A burst worker is drained (``drained``) when nothing was ready, nothing is due
to be promoted and nothing running could still put a job back.
"""

from __future__ import annotations

import functools
import logging
import math
import queue
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..attempt.lease import LeaseKeeper, RunningJob
from ..conf import workqueue_settings as conf
from ..context import JobContext
from ..db import ClaimedJob, Driver
from ..registry import find_task

if TYPE_CHECKING:
    from ..flow.backpressure import Backpressure
    from ..flow.claimer import Claimer
    from .ahead import AheadBuffer, Handed
    from .batch import Batches
    from .ledger import Ledger
    from .slots import SlotPool

logger = logging.getLogger("django_workqueue.worker")

#: While the claim-ahead buffer holds more than half its bound, how long the control thread
#: sleeps at most: a slot that took a buffered job after its last one does not wake it, and its
#: take and the outcome it handed over wait at most this long for their write (ahead.py).
DEFERRED_PASS_SECONDS = 0.01


class ClaimPlanner:
    """The claim step of the worker's pass and its pacing (see the module's docstring).

    ``slots`` reads the worker's slot count now (the autoscaler changes it), ``children_ready``
    whether a process pool's children can take jobs, ``listening`` whether NOTIFY wakes the
    worker, ``promote`` runs the promoter once (a burst's last look; returns # promoted),
    ``in_pass`` whether a pass's transaction is open, and ``on_progress`` is given to every
    job's context.
    """

    def __init__(
        self,
        driver: Driver,
        owner: str,
        queues: Sequence[str],
        *,
        ledger: Ledger,
        pool: SlotPool,
        ahead: AheadBuffer,
        batches: Batches,
        claimer: Claimer,
        backpressure: Backpressure,
        leases: LeaseKeeper,
        inbox: queue.SimpleQueue[Any],
        stopping: threading.Event,
        wake: threading.Event,
        slots: Callable[[], int],
        children_ready: Callable[[], bool],
        listening: Callable[[], bool],
        promote: Callable[[], int],
        when_committed: Callable[[Callable[[], None]], None],
        in_pass: Callable[[], bool],
        on_progress: Callable[[JobContext], None],
        burst: bool = False,
        max_jobs: int | None = None,
        poll_interval: float = 1.0,
    ) -> None:
        self.driver, self.owner, self.queues = driver, owner, queues
        self.ledger, self.pool, self.ahead, self.batches = ledger, pool, ahead, batches
        self.claimer, self.backpressure, self.leases = claimer, backpressure, leases
        self.inbox, self.stopping, self.wake = inbox, stopping, wake
        self.slots, self.children_ready, self.listening = slots, children_ready, listening
        self.promote, self.when_committed, self.in_pass = promote, when_committed, in_pass
        self.on_progress = on_progress
        self.burst, self.max_jobs, self.poll_interval = burst, max_jobs, poll_interval
        self.poll_now = True  # the next pass claims: woken, or the first pass
        self.last_poll = time.monotonic()  # the last claim of the slot loop
        self.poll_jitter = 1.0
        self.claim_deadline = math.inf  # set before each sleep (Worker._sleep_for)
        self.backlog = False  # the last claim took all it asked for: more may be waiting
        self.last_fill = (0, 0)  # (free slots, jobs claimed) in this pass, for the autoscaler
        self.drained = False
        self.finishing: set[tuple[int, int]] = set()  # (job, attempt) this pass writes
        self.began_in_pass: list[tuple[int, int]] = []  # written as begun, not yet committed
        self.deferring = False  # slots leave their takes to a pass that comes soon (take)
        self.took = False  # the last pass wrote takes from the buffer (deferred_pass_due)

    # --- pacing -------------------------------------------------------------------------------

    def next_poll(self) -> float:
        """When the slot loop polls next without a wake-up (monotonic)."""
        # Jobs left ready at their flow limit free up when another worker's job of the key
        # ends, which nothing announces: poll as without NOTIFY until none is held back.
        if self.listening() and not self.claimer.held:
            interval = max(self.poll_interval, float(conf.LISTEN_POLL_INTERVAL))
            return self.last_poll + interval * self.poll_jitter
        return self.last_poll + self.poll_interval

    def claim_due_at(self, now: float) -> float:
        """When the slot loop must claim even without a wake-up (monotonic): the next poll, a
        filling batch's wait, the end of a backpressure pause, a rate limit freeing a start."""
        retry_at = self.claimer.retry_at
        return min(
            self.next_poll(),
            self.batches.wake_at(),
            self.backpressure.paused_until(now),  # claims may start again then
            retry_at if retry_at is not None and retry_at > now else math.inf,
        )

    def claims_due(self, now: float) -> bool:
        """Whether this pass claims: see the module's docstring. The deadline set before the
        sleep counts: a pause or a rate limit that has just run out no longer shows one."""
        if self.poll_now or self.burst or self.max_jobs is not None:
            return True
        return now >= min(self.claim_deadline, self.claim_due_at(now))

    # --- the claim step -----------------------------------------------------------------------

    def fill(self) -> int:
        """Claim for the free slots (and ahead, for the buffer); return # claimed for slots."""
        with self.ledger.lock:
            # Jobs held, less those whose outcomes this pass writes before it claims (forgotten
            # once it commits): what could still put a job back (burst: not done).
            running_before = self.ledger.still_running(self.finishing)
            executing = self.ledger.executing
        slots = self.slots()
        free = slots - executing
        self.drained = False
        # Buffered jobs first (ahead.py): slots that are free take them, written as begun in
        # the same step as those slots took themselves since the last pass.
        free -= self.hand_out_ahead(0 if self.stopping.is_set() else free)
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self.ledger.claimed_count)
        room = self.ahead.room(slots) if self.ahead.enabled else 0
        # A stop (SIGTERM) may arrive in the middle of a pass: claim nothing after it, or the job
        # would start only to be released at the end of the grace and run again elsewhere.
        if (free <= 0 and room <= 0) or self.stopping.is_set():
            return 0
        free = max(free, 0)  # every slot busy: only the buffer claims
        if not self.children_ready():
            return 0  # the children are still importing the project
        if not self.backpressure.may_claim(slots=slots, busy=executing):
            return 0  # WORKQUEUE["BACKPRESSURE"] asked for a pause
        now = time.monotonic()
        if not self.claims_due(now):
            return 0  # a pass for a renewal or maintenance: nothing says jobs are ready
        self.poll_now = False
        self.claim_deadline = math.inf
        self.last_poll = now
        self.poll_jitter = random.uniform(1.0, 1.5)  # LISTEN_POLL_INTERVAL to 1.5 times it
        # Under load (the last claim came back full) a due batch, which has waited out its
        # batch_wait, takes its slot first: plain jobs would otherwise take every slot. With
        # slots to spare the plain jobs go first and start before the batches are read, so
        # that a job a NOTIFY announced does not wait on that read (issue 32: pickup).
        batch_first = self.backlog
        batched = self.batches.fill(free) if free and batch_first else 0
        with self.ledger.lock:
            claims = self.pool.claims(self.queues, free - batched)
        if free:  # a pass for the buffer alone keeps what the last claims found held back
            self.claimer.begin_pass()
        jobs: list[ClaimedJob] = []
        for queues, limit in claims:
            claimed = self.claimer.claim(queues, limit)
            if claimed:  # they start once their claim is kept, whatever the pass meets next
                self.when_committed(functools.partial(self.start_jobs, claimed, []))
                jobs += claimed
        # With every slot busy no claim for free slots says whether work is waiting: the last
        # claim ahead does. A busy worker does not take a job an idle one is there to run.
        full = len(jobs) >= free - batched if free else self.backlog
        if not batch_first:
            batched = self.batches.fill(free - len(jobs)) if free > len(jobs) else 0
        self.last_fill = (free, len(jobs) + batched)
        ahead = self.claim_ahead(room, full=full)
        # Nothing ready, nothing due to be promoted, and nothing running that could still put
        # a job back: burst is done.
        self.drained = (
            not jobs and not ahead and running_before == 0 and self.batches.idle
            and not self.claimer.held
        )  # fmt: skip
        # A burst worker promotes for itself, maintainer or not: it must not exit while jobs
        # are due.
        if self.drained and self.burst and self.promote():
            self.drained = False
            self.wake.set()
        if ahead:
            self.when_committed(functools.partial(self.start_jobs, [], ahead))
        return self.last_fill[1]

    def start_jobs(self, jobs: list[ClaimedJob], ahead: list[ClaimedJob]) -> None:
        """Hand the jobs just claimed (and committed) to the slots, and those claimed ahead
        to the buffer."""
        now = time.monotonic()
        ledger = self.ledger
        with ledger.lock:
            started = [(job, self.lease(job, now)) for job in jobs]
            for job in jobs:
                ledger.executing += 1
                self.pool.began(job.queue)
            # A buffered job's timeout runs from its take (math.inf: not yet, as processes.py).
            buffered = [(job, self.lease(job, math.inf)) for job in ahead]
        for handed in started:
            self.inbox.put(handed)
        self.ahead.put(buffered)
        ledger.claimed_count += len(jobs) + len(ahead)
        with ledger.lock:
            self.leases.schedule(ledger.running, now)
            self.backpressure.count_claimed(now, len(jobs) + len(ahead))

    def lease(self, job: ClaimedJob, now: float) -> RunningJob:
        """Hold ``job`` as this worker's (under the lock): its lease is renewed from now on."""
        on_progress = self.on_progress
        context = JobContext(job, owner=self.owner, driver=self.driver, on_progress=on_progress)
        task = find_task(job.task_name)
        item = RunningJob(
            context,
            started=now,
            timeout=task.spec.timeout if task else None,
            is_async=bool(task and task.spec.is_async),
        )
        return self.ledger.lease(job.id, item)

    def claim_ahead(self, room: int, *, full: bool) -> list[ClaimedJob]:
        """Plain jobs never claimed before, beyond the free slots, up to the buffer's
        ``room`` (ahead.py); only when the claim for the free slots came back full: there is
        more work than slots (``full``)."""
        self.backlog = full
        if not full:
            return []
        if self.max_jobs is not None:
            room = min(room, self.max_jobs - self.ledger.claimed_count - self.last_fill[1])
        if room <= 0:
            return []
        try:
            ahead = self.driver.claim(self.queues, room, self.owner, ahead=True)
            self.backlog = len(ahead) >= room
            return ahead
        except Exception:
            if not self.last_fill[1]:
                raise
            # The jobs claimed for the free slots are leased to this worker: run them.
            logger.exception("worker %s: the claim ahead failed; running the jobs claimed "
                             "for the free slots", self.owner)  # fmt: skip
            return []

    # --- the claim-ahead buffer ---------------------------------------------------------------

    def hand_out_ahead(self, free: int) -> int:
        """Hand up to ``free`` buffered jobs to the free slots, once the database knows that
        they, and those slots took since the last pass, began (``Driver.began``)."""
        if not self.ahead.enabled:
            return 0
        self.took = False
        handed: list[Handed] = []
        with self.ledger.lock:
            while len(handed) < free and (next_job := self.take_ahead()) is not None:
                handed.append(next_job)
        taken = self.ahead.taken()
        if taken:
            self.took = True
            try:
                written = self.driver.began(self.owner, taken)
            except Exception:
                self.ahead.put_back(handed, taken)  # the later pass writes those slots took
                raise
            if self.in_pass():  # in a pass's transaction: kept if it rolls back
                self.began_in_pass = [lease for lease in taken if lease[0] in written]
            # A row another session holds was skipped: the next pass tries it again while the
            # job is still this worker's (its outcome written, or its lease lost: forgotten).
            with self.ledger.lock:
                again = [
                    (pk, attempt) for pk, attempt in taken if pk not in written
                    and (item := self.ledger.running.get(pk)) is not None
                    and item.context.attempt == attempt and not item.context.lease_lost
                ]  # fmt: skip
            self.ahead.put_back([], again)
        if handed:
            now = time.monotonic()
            with self.ledger.lock:
                for job, item in handed:
                    self.ledger.executing += 1
                    self.pool.began(job.queue)
                    item.started = now  # its timeout runs from now
            for handed_job in handed:
                self.inbox.put(handed_job)
        return len(handed)

    def take(self, *, freed: bool = False) -> Handed | None:
        """A slot's next job from the buffer, if there is one (and the worker is not
        stopping); it counts as begun, and its timeout runs from now.

        The next pass writes that it began. A slot ``freed`` by a job it ran (its outcome
        handed over) does not wake the control thread for that pass while the control thread
        sleeps only briefly (``deferred_pass_due``) and the buffer holds more than half its
        bound; any other take wakes it now."""
        if not self.ahead.enabled or self.stopping.is_set():
            return None
        with self.ledger.lock:
            handed = self.take_ahead()
            if handed is not None:
                self.ledger.executing += 1
                self.pool.began(handed[0].queue)
        if handed is not None:
            handed[1].started = time.monotonic()  # its timeout runs from now
            # Read after the take was noted: see deferred_pass_due.
            deferred = freed and self.deferring and not self.ahead.running_low(self.slots())
            if not deferred and not self.wake.is_set():
                self.wake.set()
        return handed

    def deferred_pass_due(self, now: float) -> float:
        """Called by the control thread before it sleeps: when (monotonic) it must pass at the
        latest for the takes and outcomes slots leave to a later pass (``take``), or inf.

        While the buffer holds more than half its bound and slots take from it (the pass
        wrote takes, or takes wait for their write; a slot hands its outcome over before its
        take, so a deferred outcome comes with one), it sleeps at most
        ``DEFERRED_PASS_SECONDS`` and slots that take a buffered job do not wake it. Otherwise
        (a quiet worker, or a buffer running low) it sleeps as long as it may and the next
        take wakes it. The order matters: ``deferring`` is cleared before the look, and a
        slot reads it after its take was noted, so a slot that saw it set left its take to a
        pass that comes within the bound, or to a sleep that this look bounds."""
        self.deferring = False
        if not self.ahead.enabled or self.ahead.running_low(self.slots()):
            return math.inf
        if not (self.took or self.ahead.has_taken()):
            return math.inf  # quiet: the next take wakes it
        self.deferring = True
        return now + DEFERRED_PASS_SECONDS

    def take_ahead(self) -> Handed | None:
        """The next buffered job still leased to this worker (under the lock). One whose
        lease was lost while it waited (reaped, uncharged, and maybe claimed elsewhere) is
        forgotten, not run."""
        while (handed := self.ahead.take()) is not None:
            job, item = handed
            if not item.context.lease_lost:
                return handed
            self.ledger.forget(job.id, item)
            logger.warning("job %s: its lease was lost while it waited for a slot; not run", job.id)
        return None
