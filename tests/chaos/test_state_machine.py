"""A state-machine property test: hypothesis drives the real engine, a model predicts each step.

Simulated workers ("owners") use the worker's own building blocks, in this thread, against the
test database (SQLite or PostgreSQL): claims through the driver (``Driver.claim``), the
heartbeat (``LeaseKeeper.renew``), the job pipeline (``execution.run``) and the batched outcome
writes (``Completer``, i.e. ``Driver.record_many``); the graceful-shutdown release
(``Shutdown.release_remaining`` of a real, unstarted ``Worker``, with its retake of jobs whose
body returned as they were released); the maintenance services as the worker calls them
(``reaper.run_once``, ``promoter.run_once``) and one promotion batch (``Driver.promote``);
enqueue through ``Task.using().enqueue``; ``cancel_job``, ``redrive`` and ``retry_job`` from
``django_workqueue.operations``. An owner may *crash*: it stops renewing and claiming, but its
jobs stay in its hands, so a later step can let it wake (like a SIGSTOPped worker resumed) and
try to write a late outcome or progress.

A plain model predicts every step. Jobs waiting for a later time are ``scheduled`` (a delayed
enqueue, a retry or snooze with a delay) and only the promoter makes them ``ready``; claims take
ready jobs only, and the model says which: a claim or a promotion takes a group of jobs the model
ranks equal whole (``first_ranked``), since the engine tells them apart by what the model does not
know, so the same draws always lead to the same steps (a failure's replay included). After each
step the whole job table is compared with the model: no job lost or invented; each job's status
change since the previous step is an edge of ``states.TRANSITIONS``; terminal, scheduled and ready
jobs have no lease, running ones an owner and an expiry; ready and running jobs are due
(``run_after`` not after the database's clock); each budget within its size
(``attempts_charged <= max_attempts``, ``crashes_charged <=`` the crash budget; ``attempt`` counts
claims and may pass both); at most one active job per (task, unique key); status, attempt, both
budgets and what was spent before a redrive, owner, cancel request, error count, ``run_after`` and
``deadline`` per job and the counts per status equal the model's; ``Effect`` rows (written inside
``atomic=True`` bodies) exist exactly for the succeeded attempts of atomic jobs. Fencing is checked
where it happens: an outcome (alone or in a batch), a progress report or a renewal is written, and
reported written, if and only if the model says the writer still holds that attempt's lease, and a
refused write leaves the row unchanged, every column of it.

How the clock is advanced. The engine reads time only from the database: PostgreSQL's
``statement_timestamp()``, SQLite's ``strftime(…, 'now')``, Django's ``Now()``; the worker and
the maintenance services are called without ``now``, as in production. Nothing is patched. To
let N seconds pass, every stored timestamp of every row (``run_after``, ``lease_expires_at``,
``deadline``, ``started_at``, ``enqueued_at``, ``finished_at``, ``cancel_requested_at``, and
``WorkerProcess`` times) is moved N seconds into the past in one UPDATE per table. That is the
same as the clock moving N seconds forward: the engine compares stored timestamps with the
clock (``run_after <= now``, ``lease_expires_at < now``, ``deadline < now``) or with each other
(the claim's and the promotion's ORDER BY), and ``ts - N <op> now`` holds exactly when
``ts <op> now + N``, while differences between stored timestamps do not change. New values are
written as ``now + x`` by the database itself, consistent with the shifted ones. (The ``at`` of
each ``Job.errors`` entry is text inside JSON that nothing compares; it is left as written.)

The model keeps a virtual clock (seconds since the example began, moved only by
``advance_clock``) and ignores the real seconds that pass while an example runs. That is safe
by construction: every clock step is a multiple of 60 s and every lease, delay, backoff and
deadline is 0 or 30 s modulo 60, so no model comparison is closer than 30 s, and an example
lasts far less (an invariant fails loudly if one ever takes 30 s). The same margin bounds how
far a stored time may lag the model's: a row's ``run_after - now`` is the model's
``run_after - clock`` less the real seconds since the row was written, under 30 s.

One moment needs a seam, because on a real worker it happens on another thread: a body that
returns just as its job is released at shutdown, after the release was decided and before it
reaches the database. ``ReleaseMoment`` wraps the shutdown's worker's driver and lets the bodies
a step chose return at that moment, then writes the release; it changes nothing the engine does.

Sizes: 100 examples of up to 40 steps by default; ``WORKQUEUE_CHAOS=full`` runs 300 of up to 60.
A failure prints the shrunk sequence of steps and a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import collections
import dataclasses
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pytest
from django.db.models import Count
from django.db.models.functions import Now
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from django_workqueue import Discard, JobContext, Retry, Snooze, task
from django_workqueue.attempt.lease import LeaseKeeper, RunningJob
from django_workqueue.attempt.run import run
from django_workqueue.conf import workqueue_settings as conf
from django_workqueue.context import AbortReason
from django_workqueue.db import Driver, Outcome, OutcomeKind, Recorded, driver_for
from django_workqueue.maintenance import promoter, reaper
from django_workqueue.models import Job, WorkerProcess
from django_workqueue.operations import cancel_job, redrive, retry_job
from django_workqueue.states import ACTIVE, TERMINAL, Status, can_transition
from django_workqueue.worker.completer import Completer
from django_workqueue.worker.runner import Worker
from testproject.testapp.models import Effect
from tests.support.machines import FULL, Owner, machine_settings, shift_stored_times

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

# Clock steps are multiples of 60 s; leases, delays, backoffs and deadlines are 0 or 30 s mod 60.
ADVANCES = (60, 120, 600)
LEASES = (30, 90)
DELAYS = (None, 0, 30, 90)
DEADLINES = (None, 30, 3630)
RETRY_DELAY = 90
SNOOZE_DELAY = 30
MARGIN_SECONDS = 30.0
# Stored times and the clock that reads them are exact to the millisecond (SQLite's clock).
CLOCK_RESOLUTION = 0.001

QUEUES = ("default", "mail")
# Worker process slots and the queues each serves; a slot left empty by a crash or a shutdown
# gets a new process (a new owner id) at its next claim, as a supervisor would restart it.
WORKER_QUEUES = (("default", "mail"), ("default",), ("mail",))
WORKERS = len(WORKER_QUEUES)
VERDICTS = ("succeed", "fail", "retry_later", "discard", "snooze", "snooze_later", "cooperative")

ROW_FIELDS = (
    "id", "task_name", "queue", "priority", "status", "attempt", "max_attempts",
    "attempts_charged", "crashes_charged", "redriven_attempts", "lease_owner",
    "lease_expires_at", "started_at", "finished_at", "cancel_requested_at", "unique_key", "errors",
    "run_after", "deadline",
)  # fmt: skip

#: What the body of attempt (job id, attempt) does, set by the step that runs it.
verdicts: dict[tuple[int, int], str] = {}


def backoff(attempt: int) -> float:
    """The delay after a plain failure: 0 s after odd attempts, 30 s after even ones."""
    return 0.0 if attempt % 2 else 30.0


def act(context: JobContext) -> dict[str, int]:
    verdict = verdicts[(context.job_id, context.attempt)]
    if verdict == "fail":
        raise ValueError(f"failure of attempt {context.attempt}")
    if verdict == "retry_later":
        raise Retry(delay=RETRY_DELAY)
    if verdict == "discard":
        raise Discard("discarded by the state machine")
    if verdict == "snooze":
        raise Snooze(delay=0)
    if verdict == "snooze_later":
        raise Snooze(delay=SNOOZE_DELAY)
    if verdict == "cooperative":  # stops if told to: cancel requested, lease lost, shutdown
        context.raise_if_cancelled()
    return {"attempt": context.attempt}


@task(name="chaos.sm.plain", max_attempts=3, lease_seconds=30, backoff=backoff)
def plain(context: JobContext, n: int = 0) -> dict[str, int]:
    return act(context)


@task(name="chaos.sm.atomic", atomic=True, max_attempts=2, lease_seconds=90, backoff=backoff)
def atomic(context: JobContext, n: int = 0) -> dict[str, int]:
    """Writes an Effect in the completion transaction: it must exist iff the attempt succeeded."""
    Effect.objects.create(job_id=context.job_id, attempt=context.attempt, value="sm")
    return act(context)


TASKS = {t.name: t for t in (plain, atomic)}
TASK_NAMES = st.sampled_from(sorted(TASKS))


@dataclasses.dataclass(slots=True)
class ModelJob:
    id: int
    task: str
    queue: str
    priority: int
    max_attempts: int
    lease_seconds: int
    unique_key: str | None
    run_after: int  # virtual seconds
    deadline: int | None
    status: str
    attempt: int = 0
    attempts_charged: int = 0
    crashes_charged: int = 0
    redriven_attempts: int = 0
    owner: str | None = None
    lease_expires: int | None = None
    cancel_requested: bool = False
    errors: int = 0


Hold = tuple[Owner, JobContext]


def clean_tables() -> None:
    for model in (Job, Effect, WorkerProcess):
        model.objects.all().delete()


def row(job_id: int) -> dict[str, Any]:
    return Job.objects.filter(pk=job_id).values().get()


def seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def first_ranked(
    jobs: Sequence[ModelJob], limit: int, rank: Callable[[ModelJob], tuple[int, ...]]
) -> list[ModelJob]:
    """The jobs a claim or a promotion of ``limit`` takes, ranked by ``rank`` (the model's view
    of the engine's order); a group the model ranks equal is never split, but taken whole,
    past ``limit`` if need be (the caller asks the engine for that many).

    Among jobs the model ranks equal the engine decides by what the model does not know: their
    stored times, apart by the real moments they were written (or equal, written by one
    statement) and on SQLite only to the millisecond, and then by id for a claim, by where the
    row lies in the table for a promotion (``ORDER BY run_after``; on PostgreSQL the order of
    equal keys follows the row's place, which VACUUM changes at its own moments). A model that
    followed the engine's pick would let a replay of the same draws take other rules (what
    ended a full run in hypothesis's ``FlakyStrategyDefinition``); taking such groups whole
    lets the model say exactly which jobs are taken."""
    ranked = sorted(jobs, key=rank)
    while 0 < limit < len(ranked) and rank(ranked[limit]) == rank(ranked[limit - 1]):
        limit += 1
    return ranked[:limit]


class ReleaseMoment:
    """A shutting-down worker's driver that lets bodies return at the moment the release is
    written: after the worker decided to release their jobs, before the release reaches the
    database (a real worker's bodies return on their slot threads, in that window). It then
    writes the release as given; everything else goes straight to the driver.

    ``release_remaining`` treats a failing release write as a database error (logged, leases
    left to expire), so a failed check in ``bodies_return`` is kept and raised afterwards.
    """

    def __init__(self, driver: Driver, bodies_return: Callable[[], None]) -> None:
        self.driver = driver
        self.bodies_return = bodies_return
        self.releases: list[tuple[int, int]] = []
        self.recorded: Recorded | None = None
        self.failure: BaseException | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.driver, name)

    def record_many(self, owner: str, outcomes: Sequence[Outcome], **kwargs: Any) -> Recorded:
        assert all(o.kind == OutcomeKind.RELEASE for o in outcomes), outcomes
        assert self.recorded is None, "the shutdown wrote its releases twice"
        try:
            self.bodies_return()
        except BaseException as exc:
            self.failure = exc
            raise
        self.releases = [(o.job_id, o.attempt) for o in outcomes]
        self.recorded = self.driver.record_many(owner, outcomes, **kwargs)
        return self.recorded


class JobMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.alias = conf.DATABASE
        self.driver = driver_for(self.alias)
        clean_tables()  # defensive: the previous example's teardown already did
        self.clock = 0
        self.jobs: dict[int, ModelJob] = {}
        self.workers: list[Owner | None] = [None] * WORKERS  # live workers, by process slot
        self.crashed: list[Owner] = []
        self.orphans: list[Hold] = []  # bodies still running whose worker let go of the job
        self.effects: set[tuple[int, int]] = set()
        self.seen: dict[int, str] = {}  # each job's status as last read from the database
        self.began = time.monotonic()

    def teardown(self) -> None:
        verdicts.clear()
        clean_tables()

    # --- model helpers ---------------------------------------------------------------------

    def holds(self, owner_id: str, job_id: int, attempt: int) -> bool:
        job = self.jobs[job_id]
        return job.status == Status.RUNNING and job.owner == owner_id and job.attempt == attempt

    def live(self) -> list[Owner]:
        return [owner for owner in self.workers if owner is not None]

    def worker(self, slot: int) -> Owner:
        """The live worker in this process slot; a new process (new id) if the slot is empty."""
        owner = self.workers[slot]
        if owner is None:
            owner = self.workers[slot] = Owner(str(uuid.uuid4()), WORKER_QUEUES[slot])
        return owner

    def leave(self, owner: Owner) -> None:
        self.workers[self.workers.index(owner)] = None

    def live_holds(self) -> list[Hold]:
        return [(o, r.context) for o in self.live() for r in o.running.values()]

    def late_holds(self) -> list[Hold]:
        crashed = [(o, r.context) for o in self.crashed for r in o.running.values()]
        return crashed + self.orphans

    def key_holder(self, task_name: str, key: str | None) -> ModelJob | None:
        if key is None:
            return None
        for job in self.jobs.values():
            if job.task == task_name and job.unique_key == key and job.status in ACTIVE:
                return job
        return None

    def pick_owner(self, data: st.DataObject, owners: list[Owner]) -> Owner:
        owner = owners[data.draw(st.integers(0, len(owners) - 1), label="owner")]
        note(repr(owner))
        return owner

    def pick(self, data: st.DataObject, holds: list[Hold]) -> Hold:
        owner, context = holds[data.draw(st.integers(0, len(holds) - 1), label="hold")]
        note(f"{owner} job {context.job_id} attempt {context.attempt}")
        return owner, context

    def pick_job(self, data: st.DataObject) -> ModelJob:
        return self.jobs[data.draw(st.sampled_from(sorted(self.jobs)), label="job")]

    def apply_outcome(self, job_id: int, kind: OutcomeKind, delay: float) -> None:
        """What a written outcome does to the row of the attempt the model says is running."""
        job = self.jobs[job_id]
        assert job.status == Status.RUNNING, f"job {job_id}: an outcome for a {job.status} job"
        # A release and a lease expiry put the job back in its place (its run_after, which was
        # due when it was claimed); a retry or snooze waits its delay, scheduled if there is one.
        keeps_place = kind in (OutcomeKind.RELEASE, OutcomeKind.LEASE_EXPIRED)
        status = {
            OutcomeKind.SUCCEEDED: Status.SUCCEEDED,
            OutcomeKind.DISCARD: Status.FAILED,
            OutcomeKind.CANCELLED: Status.CANCELLED,
        }.get(kind, Status.READY if keeps_place or delay == 0 else Status.SCHEDULED)
        # The body's endings spend its budget, a reaped lease the crash budget, a snooze and a
        # release nothing (DESIGN.md §2, "Attempts").
        crash_budget = max(int(conf.MAX_CRASHES), job.max_attempts)
        if kind == OutcomeKind.RETRY and job.attempts_charged + 1 >= job.max_attempts:
            status = Status.FAILED
        if kind == OutcomeKind.LEASE_EXPIRED and job.crashes_charged + 1 >= crash_budget:
            status = Status.FAILED
        if kind == OutcomeKind.LEASE_EXPIRED:
            job.crashes_charged += 1
        elif kind not in (OutcomeKind.SNOOZE, OutcomeKind.RELEASE):
            job.attempts_charged += 1
        if kind != OutcomeKind.SUCCEEDED and job.cancel_requested:
            status = Status.CANCELLED
        with_error = (OutcomeKind.RETRY, OutcomeKind.DISCARD, OutcomeKind.CANCELLED,
                      OutcomeKind.LEASE_EXPIRED)  # fmt: skip
        if kind in with_error:
            job.errors += 1
        if status in (Status.READY, Status.SCHEDULED) and not keeps_place:
            job.run_after = self.clock + int(delay)
        job.status, job.owner, job.lease_expires = status, None, None

    def expected_outcome(self, context: JobContext, verdict: str) -> tuple[OutcomeKind, float]:
        claimed = context.job
        if claimed.deadline_passed:
            return OutcomeKind.DISCARD, 0.0
        if verdict == "succeed":
            return OutcomeKind.SUCCEEDED, 0.0
        if verdict == "fail":
            return OutcomeKind.RETRY, backoff(claimed.attempts_charged + 1)
        if verdict == "retry_later":
            return OutcomeKind.RETRY, float(RETRY_DELAY)
        if verdict == "discard":
            return OutcomeKind.DISCARD, 0.0
        if verdict == "snooze":
            return OutcomeKind.SNOOZE, 0.0
        if verdict == "snooze_later":
            return OutcomeKind.SNOOZE, float(SNOOZE_DELAY)
        if not context.cancelled.is_set():
            return OutcomeKind.SUCCEEDED, 0.0
        if context.cancel_requested:
            return OutcomeKind.CANCELLED, 0.0
        if context.abort_reason == AbortReason.SHUTDOWN:
            return OutcomeKind.RELEASE, 0.0  # stopped as the shutdown told it: given back
        # Stopped for another reason (its lease was lost): the JobCancelled it raised is a
        # failure like any other (and fenced out).
        return OutcomeKind.RETRY, backoff(claimed.attempts_charged + 1)

    def forget(self, owner: Owner, context: JobContext) -> None:
        item = owner.running.get(context.job_id)
        if item is not None and item.context is context:
            del owner.running[context.job_id]
        else:
            self.orphans = [(o, c) for o, c in self.orphans if c is not context]

    # --- workers ---------------------------------------------------------------------------

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def crash(self, data: st.DataObject) -> None:
        """The owner stops renewing and claiming; its jobs stay in its (frozen) hands."""
        owner = self.pick_owner(data, self.live())
        owner.crashed = True
        self.leave(owner)
        self.crashed.append(owner)

    @precondition(
        lambda self: any(j.status in (Status.READY, Status.SCHEDULED) for j in self.jobs.values())
    )
    @rule(slot=st.integers(0, WORKERS - 1), limit=st.integers(1, 3))
    def claim(self, slot: int, limit: int) -> None:
        """Claims take ready jobs only: a scheduled job waits for the promoter, even once due
        (and a ready job is always due: see ``database_matches_model``)."""
        owner = self.worker(slot)
        claimable = [
            job
            for job in self.jobs.values()
            if job.status == Status.READY and job.queue in owner.queues
        ]
        # The highest priority first, then the earliest run_after (then id, within a group
        # the model ranks equal: see first_ranked).
        expected = first_ranked(claimable, limit, lambda job: (-job.priority, job.run_after))
        claimed = self.driver.claim(owner.queues, max(limit, len(expected)), owner.id)
        ids = [c.id for c in claimed]
        assert len(set(ids)) == len(ids), f"a job was claimed twice in one claim: {ids}"
        assert sorted(ids) == sorted(job.id for job in expected), (
            f"claimed {ids}, expected {[job.id for job in expected]} of "
            f"{[job.id for job in claimable]}"
        )
        for c in claimed:
            job = self.jobs[c.id]
            assert (c.attempt, c.max_attempts, c.attempts_charged) == (
                job.attempt + 1, job.max_attempts, job.attempts_charged,
            )  # fmt: skip
            assert (c.task_name, c.lease_seconds) == (job.task, job.lease_seconds)
            assert c.deadline_passed == (job.deadline is not None and job.deadline < self.clock)
            job.status, job.attempt, job.owner = Status.RUNNING, c.attempt, owner.id
            job.lease_expires = self.clock + job.lease_seconds
            stale = owner.running.pop(c.id, None)
            if stale is not None:  # reaped, then claimed again by the same worker (runner.py)
                stale.context.abort(AbortReason.LEASE_LOST)
                self.orphans.append((owner, stale.context))
            owner.running[c.id] = RunningJob(JobContext(c, owner=owner.id, driver=self.driver))

    @precondition(lambda self: any(owner.running for owner in self.live()))
    @rule(data=st.data())
    def renew(self, data: st.DataObject) -> None:
        owner = self.pick_owner(data, [o for o in self.live() if o.running])
        LeaseKeeper(self.driver, owner.id).renew(owner.running)
        for job_id, item in owner.running.items():
            context = item.context
            held = self.holds(owner.id, job_id, context.attempt)
            assert context.lease_lost == (not held), (
                f"job {job_id}: context.lease_lost={context.lease_lost} (abort reason "
                f"{context.abort_reason}), but the model says the lease is held={held}"
            )
            if held:
                job = self.jobs[job_id]
                job.lease_expires = self.clock + job.lease_seconds
                assert context.cancel_requested == job.cancel_requested

    @precondition(lambda self: self.live_holds())
    @rule(data=st.data(), verdict=st.sampled_from(VERDICTS), progress=st.booleans())
    def finish(self, data: st.DataObject, verdict: str, progress: bool) -> None:
        self.run_body(*self.pick(data, self.live_holds()), verdict, progress)

    @precondition(lambda self: self.late_holds())
    @rule(data=st.data(), verdict=st.sampled_from(VERDICTS), progress=st.booleans())
    def late_finish(self, data: st.DataObject, verdict: str, progress: bool) -> None:
        """A crashed (stopped) worker wakes, or a released/taken-over body ends, and writes."""
        self.run_body(*self.pick(data, self.late_holds()), verdict, progress)

    def run_body(
        self, owner: Owner, context: JobContext, verdict: str, progress: bool, write: bool = True
    ) -> Outcome | None:
        """Run the body as a slot does. An atomic success records itself, in its transaction;
        any other outcome is written now through a completer (``write``) or returned for a
        batch."""
        claimed = context.job
        key = (claimed.id, claimed.attempt)
        held = self.holds(owner.id, *key)
        if progress:  # the body reports progress first (written at once: no control thread)
            before = row(claimed.id)
            written = context.set_progress(claimed.attempt, 100, "working")
            assert written == held, f"progress written={written}, lease held={held}"
            after = row(claimed.id)
            if held:
                assert after["progress_current"] == claimed.attempt
            else:
                assert after == before, "a stale owner's progress changed the row"
        kind, delay = self.expected_outcome(context, verdict)
        before = row(claimed.id)
        verdicts[key] = verdict
        try:
            outcome, pending = run(claimed, context, self.driver, None)
        finally:
            verdicts.pop(key, None)
        context.finished = True
        self.forget(owner, context)
        if pending:
            assert outcome is not None
            assert (outcome.kind, outcome.delay) == (kind, delay), outcome
            if not write:
                return outcome
            completer = Completer(self.driver, owner.id)
            completer.hand_over(outcome)
            done, written_ids = completer.write_outcomes()
            assert done == [outcome]
            written = key in written_ids
        else:  # an atomic success: recorded in its own transaction, or rolled back
            assert kind == OutcomeKind.SUCCEEDED and TASKS[claimed.task_name].spec.atomic
            written = outcome is not None
        assert written == held, (
            f"job {claimed.id} attempt {claimed.attempt} by {owner}: outcome {kind} "
            f"written={written}, but the model says the lease is held={held}"
        )
        if not held:
            assert row(claimed.id) == before, "a stale owner's outcome changed the row"
            return None
        self.apply_outcome(claimed.id, kind, delay)
        if kind == OutcomeKind.SUCCEEDED and TASKS[claimed.task_name].spec.atomic:
            self.effects.add(key)
        return None

    def bodies(self, owner: Owner) -> list[JobContext]:
        """Every body that may still hand ``owner`` an outcome: its jobs and its orphans."""
        orphaned = [context for o, context in self.orphans if o is owner]
        return [item.context for item in owner.running.values()] + orphaned

    def owners_with_bodies(self) -> list[Owner]:
        owners = [*self.live(), *self.crashed, *(o for o, _ in self.orphans)]
        unique = list({id(o): o for o in owners}.values())
        return [o for o in unique if self.bodies(o)]

    @precondition(lambda self: self.owners_with_bodies())
    @rule(data=st.data())
    def finish_batch(self, data: st.DataObject) -> None:
        """Several bodies of one worker end; its control thread writes their outcomes in one
        batch (a crashed worker that wakes flushes everything that piled up the same way)."""
        owner = self.pick_owner(data, self.owners_with_bodies())
        bodies = self.bodies(owner)
        chosen = data.draw(
            st.lists(st.integers(0, len(bodies) - 1), min_size=1, max_size=4, unique=True),
            label="bodies",
        )
        batch: list[tuple[Outcome, JobContext]] = []
        for index in chosen:
            context = bodies[index]
            verdict = data.draw(st.sampled_from(VERDICTS), label="verdict")
            note(f"job {context.job_id} attempt {context.attempt}: {verdict}")
            outcome = self.run_body(owner, context, verdict, progress=False, write=False)
            if outcome is not None:
                batch.append((outcome, context))
        if not batch:
            return
        held = {
            (o.job_id, o.attempt) for o, _ in batch if self.holds(owner.id, o.job_id, o.attempt)
        }
        untouched = {o.job_id for o, _ in batch} - {job_id for job_id, _ in held}
        before = {job_id: row(job_id) for job_id in untouched}
        completer = Completer(self.driver, owner.id)
        for outcome, _ in batch:
            completer.hand_over(outcome)
        done, written = completer.write_outcomes()
        assert done == [o for o, _ in batch]
        for outcome, _ in batch:
            key = (outcome.job_id, outcome.attempt)
            reported = key in written
            assert reported == (key in held), (
                f"job {key[0]} attempt {key[1]} by {owner}: reported written={reported}, but "
                f"the model says the lease is held={key in held}"
            )
            if key in held:
                self.apply_outcome(outcome.job_id, outcome.kind, outcome.delay)
        for job_id, snapshot in before.items():
            assert row(job_id) == snapshot, f"a stale owner's outcome changed job {job_id}"

    @precondition(lambda self: any(owner.running for owner in self.live()))
    @rule(data=st.data())
    def shut_down(self, data: st.DataObject) -> None:
        """Graceful shutdown past its grace, by the worker's own ``release_remaining``: its
        unfinished jobs are released (ready, uncharged, in their place) and their bodies told
        to stop. Some bodies return just as their job is released; the worker takes such a job
        back and writes the outcome, unless the body only stopped because it was told to.
        (An idle worker's shutdown writes nothing; idle workers leave by ``crash``.)"""
        owner = self.pick_owner(data, [o for o in self.live() if o.running])
        returning: dict[int, str] = {}
        # Most bodies that return in that window do so because they were told to stop.
        returns_with = st.one_of(st.just("cooperative"), st.sampled_from(VERDICTS))
        for job_id in sorted(owner.running):
            if data.draw(st.booleans(), label=f"job {job_id} returns as it is released"):
                returning[job_id] = data.draw(returns_with, label="verdict")
        contexts = {job_id: item.context for job_id, item in owner.running.items()}
        worker = Worker(queues=owner.queues, worker_id=owner.id)  # never started: no threads
        worker._running.update(owner.running)
        handed: dict[int, Outcome] = {}

        def bodies_return() -> None:
            for job_id, verdict in returning.items():
                context = contexts[job_id]
                assert context.released and context.abort_reason is not None, job_id
                note(f"job {job_id} attempt {context.attempt} returns as released: {verdict}")
                outcome = self.run_body(owner, context, verdict, progress=False, write=False)
                if outcome is not None:
                    with worker._lock:  # as a slot hands over its outcome
                        context.finished = True
                        worker.completer.hand_over(outcome)
                    handed[job_id] = outcome

        moment = ReleaseMoment(worker.driver, bodies_return)
        worker.driver = moment  # type: ignore[assignment]
        worker.shutdown_sequence().release_remaining()
        if moment.failure is not None:
            raise moment.failure
        assert worker.completer.pending == 0, "the shutdown left outcomes unwritten"
        if contexts:
            assert moment.recorded is not None, "the shutdown released nothing"
            assert sorted(moment.releases) == sorted((i, c.attempt) for i, c in contexts.items())
            released = {key for key in moment.releases if self.holds(owner.id, *key)}
            assert moment.recorded.written == released, (
                f"releases written: {moment.recorded.written}, held: {released}"
            )
            for job_id, _ in released:
                self.apply_outcome(job_id, OutcomeKind.RELEASE, 0.0)
            for job_id, outcome in handed.items():
                self.taken_back(owner, contexts[job_id], outcome, returning[job_id], released)
        for context in contexts.values():
            assert context.cancelled.is_set(), f"job {context.job_id} was not told to stop"
        # Bodies still running: they may hand in an outcome later, which is fenced out.
        self.orphans += [(owner, item.context) for item in owner.running.values()]
        owner.running.clear()
        self.leave(owner)

    def taken_back(
        self, owner: Owner, context: JobContext, outcome: Outcome, verdict: str,
        released: set[tuple[int, int]],
    ) -> None:  # fmt: skip
        """A body returned as its job was released: the worker takes a released job back
        (same attempt, still ready: nobody claimed it) and writes the outcome, so a job that
        finished does not run again. A body that stopped only because the shutdown told it to
        has nothing to write: its job stays released, uncharged (``AbortReason.SHUTDOWN``: the
        job goes back to ready)."""
        job = self.jobs[context.job_id]
        if (job.id, context.attempt) not in released or job.status != Status.READY:
            return  # not this worker's any more (or cancelled by the release): fenced out
        if outcome.kind == OutcomeKind.RELEASE:
            return  # it raised JobCancelled because the release told it to stop
        job.status, job.owner = Status.RUNNING, owner.id
        self.apply_outcome(job.id, outcome.kind, outcome.delay)

    # --- maintenance, operations, clock ------------------------------------------------------

    @precondition(lambda self: any(j.status == Status.RUNNING for j in self.jobs.values()))
    @rule()
    def reap(self) -> None:
        expired = [
            job for job in self.jobs.values()
            if job.status == Status.RUNNING and job.lease_expires is not None
            and job.lease_expires < self.clock
        ]  # fmt: skip
        count = reaper.run_once(alias=self.alias)
        assert count == len(expired), f"reaped {count}, expected {[j.id for j in expired]}"
        for job in expired:
            self.apply_outcome(job.id, OutcomeKind.LEASE_EXPIRED, 0.0)

    def due(self) -> list[ModelJob]:
        return [
            job for job in self.jobs.values()
            if job.status == Status.SCHEDULED and job.run_after <= self.clock
        ]  # fmt: skip

    @precondition(lambda self: any(j.status == Status.SCHEDULED for j in self.jobs.values()))
    @rule()
    def promote(self) -> None:
        """The promoter as the worker runs it: every due scheduled job becomes ready (the
        model's few fit in one batch); jobs not due yet stay scheduled."""
        due = self.due()
        count = promoter.run_once(alias=self.alias)
        assert count == len(due), f"promoted {count}, expected {sorted(j.id for j in due)}"
        for job in due:
            job.status = Status.READY

    @precondition(lambda self: any(j.status == Status.SCHEDULED for j in self.jobs.values()))
    @rule(limit=st.integers(1, 2))
    def promote_batch(self, limit: int) -> None:
        """One batch of the promotion (``Driver.promote``), perhaps smaller than the due jobs:
        the earliest run_after first (jobs of one run_after together: see first_ranked)."""
        due = self.due()
        expected = first_ranked(due, limit, lambda job: (job.run_after,))
        queues = self.driver.promote(max(limit, len(expected)))
        statuses = dict(Job.objects.filter(pk__in=[j.id for j in due]).values_list("id", "status"))
        promoted = sorted(job_id for job_id, status in statuses.items() if status == Status.READY)
        assert promoted == sorted(job.id for job in expected), (
            f"promoted {promoted}, expected {[job.id for job in expected]} of "
            f"{[job.id for job in due]}"
        )
        assert sorted(queues) == sorted(job.queue for job in expected), queues
        for job in expected:
            job.status = Status.READY

    @precondition(lambda self: any(j.status in ACTIVE for j in self.jobs.values()))
    @rule(seconds=st.sampled_from(ADVANCES))
    def advance_clock(self, seconds: int) -> None:
        """Move every stored timestamp back: the same as the database's clock moving on."""
        shift_stored_times(self.alias, seconds)
        self.clock += seconds

    @rule(
        task_name=TASK_NAMES,
        queue=st.sampled_from(QUEUES),
        priority=st.sampled_from((0, 5)),
        unique_key=st.sampled_from((None, None, "k1", "k2")),
        delay=st.sampled_from(DELAYS),
        max_attempts=st.integers(1, 3),
        lease_seconds=st.sampled_from(LEASES),
        deadline=st.sampled_from(DEADLINES),
        count=st.integers(1, 3),
    )
    def enqueue(
        self, task_name: str, queue: str, priority: int, unique_key: str | None,
        delay: int | None, max_attempts: int, lease_seconds: int, deadline: int | None,
        count: int,
    ) -> None:  # fmt: skip
        """One job (``enqueue``, which may hold a unique key) or several (``enqueue_many``)."""
        task = TASKS[task_name].using(
            queue=queue, priority=priority, unique_key=unique_key, delay=delay,
            max_attempts=max_attempts, lease_seconds=lease_seconds, deadline=deadline,
        )  # fmt: skip
        holder = self.key_holder(task_name, unique_key)
        if unique_key is None and count > 1:
            jobs = task.enqueue_many([((n,), {}) for n in range(count)])
            assert len({job.pk for job in jobs}) == count
        else:
            jobs = [task.enqueue(0)]
        if holder is not None:
            [job] = jobs
            assert job.duplicate and job.pk == holder.id, f"key {unique_key} held by {holder.id}"
            return
        status = Status.SCHEDULED if delay else Status.READY  # waits for a later time
        for job in jobs:
            assert not job.duplicate and job.pk not in self.jobs
            assert job.status == status, f"job {job.pk} enqueued {job.status}, expected {status}"
            self.jobs[job.pk] = ModelJob(
                id=job.pk, task=task_name, queue=queue, priority=priority,
                max_attempts=max_attempts, lease_seconds=lease_seconds, unique_key=unique_key,
                run_after=self.clock + (delay or 0),
                deadline=None if deadline is None else self.clock + deadline, status=status,
            )  # fmt: skip

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = self.pick_job(data)
        result = cancel_job(job.id, alias=self.alias)
        was = job.status
        if job.status in (Status.BLOCKED, Status.SCHEDULED, Status.READY):
            expected = "cancelled"
            job.status, job.cancel_requested = Status.CANCELLED, True
        elif job.status == Status.RUNNING and not job.cancel_requested:
            expected = "cancel_requested"
            job.cancel_requested = True
        else:
            expected = "unchanged"
        assert result.action == expected, f"cancel_job({job.id}) of a {was} job: {result}"

    def due_now(self, job: ModelJob) -> None:
        """An operator runs the job again: due now, and a deadline that passed is cleared (one
        still ahead is kept)."""
        job.status, job.run_after = Status.READY, self.clock
        if job.deadline is not None and job.deadline < self.clock:
            job.deadline = None

    def redriven(self, job: ModelJob, attempts: int | None) -> None:
        if attempts is not None:  # an operator's budget; otherwise the job keeps its own
            job.max_attempts = attempts
        job.redriven_attempts += job.attempts_charged
        job.attempts_charged = job.crashes_charged = 0
        job.cancel_requested = False
        self.due_now(job)

    @precondition(lambda self: any(j.status == Status.FAILED for j in self.jobs.values()))
    @rule(data=st.data(), everything=st.booleans(), attempts=st.sampled_from((None, 1, 2)))
    def redrive_failed(self, data: st.DataObject, everything: bool, attempts: int | None) -> None:
        if everything:
            chosen = set(self.jobs)
        else:
            ids = st.sampled_from(sorted(self.jobs))
            chosen = data.draw(st.sets(ids, min_size=1, max_size=4), label="jobs")
        failed = [self.jobs[i] for i in sorted(chosen) if self.jobs[i].status == Status.FAILED]
        free = [job for job in failed if job.unique_key is None]
        # Failed jobs sharing a key nobody active holds: exactly one of them may come back.
        contenders: dict[tuple[str, str], list[ModelJob]] = collections.defaultdict(list)
        for job in failed:
            if job.unique_key is not None and self.key_holder(job.task, job.unique_key) is None:
                contenders[(job.task, job.unique_key)].append(job)
        result = redrive(
            None if everything else sorted(chosen), alias=self.alias, attempts=attempts
        )
        assert result.count == len(free) + len(contenders), f"{result}; model: {free} {contenders}"
        for job in free:
            self.redriven(job, attempts)
        for group in contenders.values():
            statuses = dict(
                Job.objects.filter(pk__in=[j.id for j in group]).values_list("id", "status")
            )
            back = [job for job in group if statuses[job.id] == Status.READY]
            assert len(back) == 1, f"{len(back)} jobs of one unique key were redriven"
            self.redriven(back[0], attempts)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def retry(self, data: st.DataObject) -> None:
        job = self.pick_job(data)
        result = retry_job(job.id, alias=self.alias)
        was, expected = job.status, "unchanged"
        if job.status == Status.FAILED and self.key_holder(job.task, job.unique_key) is None:
            expected = "retried"
            self.redriven(job, None)
        elif job.status == Status.SCHEDULED:  # due or not: it need not wait for the promoter
            expected = "retried"
            self.due_now(job)
        assert result.action == expected, f"retry_job({job.id}) of a {was} job: {result}"

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def database_matches_model(self) -> None:
        rows = {r["id"]: r for r in Job.objects.using(self.alias).values(*ROW_FIELDS, now=Now())}
        assert set(rows) == set(self.jobs), (
            f"lost: {sorted(set(self.jobs) - set(rows))}, unknown: {set(rows) - set(self.jobs)}"
        )
        for job_id, r in rows.items():
            status = r["status"]
            previous = self.seen.get(job_id)
            if previous is None:
                assert status in (Status.READY, Status.SCHEDULED), (
                    f"job {job_id} appeared as {status}"
                )
            elif previous != status:
                assert can_transition(previous, status), (
                    f"job {job_id}: illegal transition {previous} -> {status}"
                )
            self.seen[job_id] = status

            where = f"job {job_id} ({status})"
            if status in TERMINAL:
                assert (r["lease_owner"], r["lease_expires_at"]) == (None, None), where
                assert r["finished_at"] is not None, where
            elif status == Status.RUNNING:
                assert r["lease_owner"] is not None, where
                assert r["lease_expires_at"] is not None and r["started_at"] is not None, where
            else:  # waiting (scheduled, ready, blocked): nobody holds it, it has not ended
                assert (r["lease_owner"], r["lease_expires_at"], r["finished_at"]) == (
                    None, None, None,
                ), f"{where}: a waiting job with a lease or an end"  # fmt: skip
            if status in (Status.READY, Status.RUNNING):  # claims and leases need no look ahead
                assert r["run_after"] <= r["now"], (
                    f"{where}: run_after {r['run_after']} is after the clock {r['now']}; "
                    f"a job that waits for a later time must be scheduled"
                )
            assert r["attempts_charged"] <= r["max_attempts"], f"{where}: past max_attempts"
            crash_budget = max(int(conf.MAX_CRASHES), r["max_attempts"])
            assert r["crashes_charged"] <= crash_budget, f"{where}: past the crash budget"

            job = self.jobs[job_id]
            actual = (
                r["task_name"], r["queue"], r["priority"], status, r["attempt"],
                r["max_attempts"], r["attempts_charged"], r["crashes_charged"],
                r["redriven_attempts"], r["lease_owner"], r["unique_key"],
                r["cancel_requested_at"] is not None, len(r["errors"]),
            )  # fmt: skip
            modelled = (
                job.task, job.queue, job.priority, job.status, job.attempt, job.max_attempts,
                job.attempts_charged, job.crashes_charged, job.redriven_attempts,
                job.owner, job.unique_key, job.cancel_requested, job.errors,
            )  # fmt: skip
            assert actual == modelled, f"{where}: database {actual} != model {modelled}"
            if status not in TERMINAL:  # an ended job's run_after means nothing any more
                self.same_time(where, "run_after", job.run_after, r["run_after"], r["now"])
            self.same_time(where, "deadline", job.deadline, r["deadline"], r["now"])

    def same_time(
        self, where: str, name: str, modelled: int | None, stored: datetime | None, now: datetime
    ) -> None:
        """A stored time is the model's, seen from the clock: ``stored - now`` equals the
        model's ``modelled - clock`` less the real seconds since the row was written, which
        are fewer than the model's margin (and none are negative)."""
        if modelled is None or stored is None:
            assert modelled is stored is None, f"{where}: {name} {stored}, model {modelled}"
            return
        lag = (modelled - self.clock) - seconds(stored, now)
        assert -CLOCK_RESOLUTION <= lag < MARGIN_SECONDS, (
            f"{where}: {name} is {seconds(stored, now):+.3f}s from the clock, but the model "
            f"says {modelled - self.clock:+d}s"
        )

    @invariant()
    def unique_keys_counts_and_effects(self) -> None:
        active_keys = collections.Counter(
            Job.objects.using(self.alias)
            .filter(status__in=ACTIVE, unique_key__isnull=False)
            .values_list("task_name", "unique_key")
        )
        assert all(n == 1 for n in active_keys.values()), f"shared unique keys: {active_keys}"
        counts = dict(
            Job.objects.using(self.alias)
            .order_by()
            .values("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        assert counts == dict(collections.Counter(j.status for j in self.jobs.values()))
        effects = list(Effect.objects.values_list("job_id", "attempt"))
        assert len(effects) == len(set(effects)), (
            f"an attempt's effect was written twice: {effects}"
        )
        assert set(effects) == self.effects, "effects exist exactly for succeeded atomic attempts"

    @invariant()
    def within_the_clock_margin(self) -> None:
        elapsed = time.monotonic() - self.began
        assert elapsed < MARGIN_SECONDS, (
            f"this example ran {elapsed:.0f}s of real time; the model ignores real time only "
            f"while an example stays under {MARGIN_SECONDS:.0f}s (see the module docstring)"
        )


@pytest.mark.timeout(3600 if FULL else 900)
def test_job_state_machine() -> None:
    """Random interleavings of every job operation keep every invariant, on this database."""
    run_state_machine_as_test(
        JobMachine,
        settings=machine_settings(examples=300 if FULL else 100, steps=60 if FULL else 40),
    )


def promoted_one_of_two(moved: bool) -> list[str]:
    """Two jobs of one run_after (one ``enqueue_many``), then a promotion batch of one; with
    ``moved``, the first job's row is rewritten elsewhere in the table in between, its values as
    they were. The model's statuses after the steps, by job."""
    machine = JobMachine()
    try:
        machine.enqueue(
            task_name=plain.name, queue="default", priority=0, unique_key=None, delay=30,
            max_attempts=1, lease_seconds=30, deadline=None, count=2,
        )  # fmt: skip
        if moved:
            first = Job.objects.filter(pk=min(machine.jobs))
            first.update(queue="elsewhere")
            first.update(queue="default")
        machine.advance_clock(60)
        machine.promote_batch(1)
        machine.database_matches_model()
        return [machine.jobs[job_id].status for job_id in sorted(machine.jobs)]
    finally:
        machine.teardown()


def test_model_does_not_follow_the_tables_order() -> None:
    """The same steps leave the same model wherever the rows lie in the table. On PostgreSQL
    ``ORDER BY run_after`` takes jobs of one run_after in the order of their rows, and a row
    rewritten elsewhere (as VACUUM's and pruning's reuse of space do, at their own moments)
    changes which of them a promotion takes: a model that followed the pick would differ
    between the two runs, and a replay of the same draws would take other rules."""
    assert promoted_one_of_two(moved=False) == promoted_one_of_two(moved=True)
