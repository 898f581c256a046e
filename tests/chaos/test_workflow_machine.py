"""A state-machine test of the whole operation set on workflows: hypothesis interleaves every
way a step can start, end or be changed, on the real engine, and checks the invariants after
every step.

The steps: enqueue a chain, a group (perhaps with a callback: a chord) or a DAG
(``using(depends_on=[...], run_if=...)`` on jobs that exist, in or out of workflows); simulated
workers (``Owner``, as in ``test_state_machine``) claim through the driver, run bodies through
the attempt pipeline (``attempt.run.run``) and write outcomes through a ``Completer``, as a
worker's slots and control thread do; a body succeeds, fails, discards, or adds steps at run
time (``context.add``, ``context.continue_with``) before succeeding or failing. A worker may be
*killed*: it stops renewing and claiming, its bodies frozen. A worker of the first process
slot is registered with a liveness token (``LivenessToken``: its session's advisory lock on
PostgreSQL, a process of this host on SQLite) that dies with it, so the reaper's next pass takes
its jobs back at once; the others' jobs wait for their leases to expire (the clock moves, as in
``test_state_machine``: every stored time shifted into the past). A frozen body may wake and try
to write (fenced out). Operations, as an
operator or a webhook would call them: ``complete_job``, ``fail_job``, ``cancel_job``,
``cancel_workflow``, ``hold_job`` / ``release_job``, ``redrive``, ``retry_job``; the promoter
and the reaper. And *a session holding a row lock*: a second real connection, on its own
thread, holds a job's or a workflow's row (``SELECT … FOR UPDATE`` on PostgreSQL; on SQLite,
which locks the database, not rows, a write transaction) while one of the steps above runs, and
lets go after a while (``HOLD_SECONDS``: under the driver's 2 s ``lock_timeout`` at the CI
size; at the full size one hold in four lasts ``LONG_HOLD_SECONDS``, past it).

This is not a full model (``test_state_machine`` models single jobs exactly); it checks what
must hold whatever the interleaving, read back from the database after every step:

- every job is in one state: a finished job has ``finished_at`` and no lease; a waiting one
  (blocked, scheduled, ready, held) has neither; a running one has an owner and a lease; each
  status change since the previous step is an edge of ``states.TRANSITIONS``;
- each workflow's counters equal a recount of its jobs (``assert_counters_match_jobs``), and
  each blocked job's fan-in counters (``waiting_on``, ``prerequisites_succeeded``) a recount of
  its prerequisites' rows;
- nothing runs in a cancelled workflow: once ``cancel_workflow`` returned, none of its jobs
  waits to run, and no claim hands one out;
- no dependent is ready (or scheduled, running, claimed) before every prerequisite ended;
- an outcome is written iff its worker still held the attempt's lease when it wrote, and a
  refused write changes nothing; an outcome whose row was locked is kept and written once
  the lock is gone, never dropped.

Sizes: 40 examples of up to 30 steps per database in CI, the same ones at every run
(derandomized: CI stays a fixed check); ``WORKQUEUE_CHAOS=full`` (``make chaos``) runs 120
random ones of up to 60 (six times CI's steps; a hold past the lock timeout costs 2.5 s, which
at 300 examples made the machine alone take about an hour per database). A failure prints the
shrunk steps and a ``@reproduce_failure`` blob.
"""

from __future__ import annotations

import collections
import functools
import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections, transaction
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

from django_workqueue import Discard, JobContext, chain, group, task
from django_workqueue.attempt.lease import RunningJob
from django_workqueue.attempt.run import run
from django_workqueue.conf import workqueue_settings as conf
from django_workqueue.db import driver_for
from django_workqueue.maintenance import promoter, reaper
from django_workqueue.models import Dependency, Job, WorkerProcess, Workflow
from django_workqueue.operations import (
    cancel_job,
    cancel_workflow,
    complete_job,
    fail_job,
    hold_job,
    redrive,
    release_job,
    retry_job,
)
from django_workqueue.states import ACTIVE, TERMINAL, RunCondition, Status, can_transition
from django_workqueue.worker.completer import Completer
from tests.support.machines import (
    FULL,
    LivenessToken,
    Owner,
    machine_settings,
    shift_stored_times,
)
from tests.support.workflows import assert_counted

pytestmark = [pytest.mark.chaos, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 30
ADVANCE_SECONDS = 60  # past every lease: a killed worker's jobs can be reaped
HOLD_SECONDS = 0.3
LONG_HOLD_SECONDS = 2.5  # past the driver's 2 s lock_timeout: the full size only
WORKERS = 2
WAITING = (Status.BLOCKED, Status.SCHEDULED, Status.READY, Status.HELD)
RELEASED = (Status.SCHEDULED, Status.READY, Status.RUNNING)
VERDICTS = (
    "succeed", "succeed", "fail", "discard", "add", "add_chain", "add_then_fail", "continue",
)  # fmt: skip
JOB_OPERATIONS = ("complete", "fail", "cancel", "hold", "release", "retry")
APPLIES_TO = {
    "complete": ACTIVE, "fail": ACTIVE, "cancel": ACTIVE,
    "hold": (Status.BLOCKED, Status.SCHEDULED, Status.READY), "release": (Status.HELD,),
    "retry": (Status.FAILED, Status.SCHEDULED), "redrive": (Status.FAILED,),
}  # fmt: skip
PICKS = 256  # the bound of every index drawn (see ``WorkflowMachine.pick``)
CONDITIONS = tuple(condition.value for condition in RunCondition)

#: What the body of each job does, set by the step that runs it.
verdicts: dict[int, str] = {}


def no_backoff(attempt: int) -> float:
    return 0.0


@task(name="chaos.wf.step", max_attempts=2, lease_seconds=LEASE_SECONDS, backoff=no_backoff)
def step(context: JobContext, *previous: Any, label: int = 0) -> int:
    verdict = verdicts.get(context.job_id, "succeed")
    if verdict in ("add", "add_then_fail"):
        context.add(step.s(label=label * 10 + 1))
    elif verdict == "add_chain":
        context.add(chain(step.s(label=label * 10 + 1), step.s(label=label * 10 + 2)))
    elif verdict == "continue":
        context.continue_with(step.s(label=label * 10 + 3))
    if verdict in ("fail", "add_then_fail"):
        raise ValueError(f"step {label} fails")
    if verdict == "discard":
        raise Discard("discarded by the workflow machine")
    return label


Hold = tuple[Owner, JobContext]


def clean_tables() -> None:
    for model in (Dependency, Job, Workflow, WorkerProcess):
        model.objects.all().delete()


def row(job_id: int) -> dict[str, Any]:
    return Job.objects.filter(pk=job_id).values().get()


class RowLock:
    """A second session that holds one row locked (``FOR UPDATE``; SQLite: the database's
    write lock) on its own thread, until the step it stands in the way of ends or
    ``HOLD_SECONDS`` pass, whichever is first."""

    def __init__(
        self, alias: str, model: type[Job] | type[Workflow], pk: int,
        seconds: float = HOLD_SECONDS,
    ) -> None:  # fmt: skip
        self.alias, self.model, self.pk, self.seconds = alias, model, pk, seconds
        self.locked = threading.Event()
        self.done = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        try:
            with transaction.atomic(using=self.alias):
                rows = self.model.objects.using(self.alias).select_for_update().filter(pk=self.pk)
                list(rows.values_list("pk"))
                if connections[self.alias].vendor == "sqlite":  # take the write lock now
                    rows.update(id=self.pk)
                self.locked.set()
                self.done.wait(self.seconds)
        except BaseException as exc:
            self.failure = exc
            self.locked.set()
        finally:
            connections[self.alias].close()

    def __enter__(self) -> RowLock:
        self.thread.start()
        assert self.locked.wait(30), "the lock-holding session never got its lock"
        if self.failure is not None:
            raise self.failure
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(30)
        assert not self.thread.is_alive(), "the lock-holding session did not let go"


class WorkflowMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.alias = conf.DATABASE
        self.driver = driver_for(self.alias)
        clean_tables()  # defensive: the previous example's teardown already did
        self.labels = iter(range(1, 10**6))
        self.workers: list[Owner | None] = [None] * WORKERS
        self.killed: list[Owner] = []
        self.completers: dict[str, Completer] = {}
        self.cancelled: set[int] = set()  # workflows cancel_workflow returned for
        self.seen: dict[int, str] = {}  # each job's status as last read
        self.locked_now: RowLock | None = None
        self.unflushed: Completer | None = None  # kept outcomes of a step under a lock
        self.tokens: dict[str, LivenessToken] = {}  # the liveness of registered workers
        self.gone: set[str] = set()  # registered workers killed: liveness tells at once

    def teardown(self) -> None:
        verdicts.clear()
        for token in self.tokens.values():
            token.end()
        clean_tables()

    # --- helpers -----------------------------------------------------------------------------

    def worker(self, slot: int) -> Owner:
        """The live worker in this process slot; a new process (a new id) if the slot is empty.
        The first slot's workers register with a liveness token (a killed one is reaped at
        once), the others rely on their leases."""
        owner = self.workers[slot]
        if owner is None:
            owner = self.workers[slot] = Owner(str(uuid.uuid4()), ("default",))
            if slot == 0:
                token = self.tokens[owner.id] = LivenessToken(self.alias)
                token.register(owner.id, owner.queues)
        return owner

    def live(self) -> list[Owner]:
        return [owner for owner in self.workers if owner is not None]

    def live_holds(self) -> list[Hold]:
        return [(o, r.context) for o in self.live() for r in o.running.values()]

    def late_holds(self) -> list[Hold]:
        return [(o, r.context) for o in self.killed for r in o.running.values()]

    def job_ids(self) -> list[int]:
        return sorted(self.seen)

    def workflow_ids(self) -> list[int]:
        return list(Workflow.objects.using(self.alias).order_by("id").values_list("id", flat=True))

    def pick(self, data: st.DataObject, items: list[Any], label: str) -> Any:
        """One of ``items``. The draw's bounds never depend on them: what the database holds
        after a race (``finish_during_an_operation``) may differ between two runs of the same
        steps, and hypothesis refuses draws whose bounds change for the same choices."""
        chosen = items[data.draw(st.integers(0, PICKS - 1), label=label) % len(items)]
        note(f"{label}: {chosen!r}")
        return chosen

    def completer(self, owner: Owner) -> Completer:
        return self.completers.setdefault(owner.id, Completer(self.driver, owner.id))

    def step_signature(self) -> Any:
        return step.s(label=next(self.labels))

    # --- enqueue -----------------------------------------------------------------------------

    @rule(length=st.integers(1, 3))
    def enqueue_chain(self, length: int) -> None:
        chain(*(self.step_signature() for _ in range(length))).enqueue()

    @rule(width=st.integers(1, 3), callback=st.booleans())
    def enqueue_group(self, width: int, callback: bool) -> None:
        members = group(*(self.step_signature() for _ in range(width)))
        (members.then(self.step_signature()) if callback else members).enqueue()

    @precondition(lambda self: self.seen)
    @rule(data=st.data(), run_if=st.sampled_from(CONDITIONS))
    def enqueue_dependent(self, data: st.DataObject, run_if: str) -> None:
        """A DAG grows: a job that depends on jobs that exist (it joins their workflow)."""
        ids = self.job_ids()
        drawn = data.draw(st.lists(st.integers(0, PICKS - 1), min_size=1, max_size=3), label="on")
        prerequisites = sorted({ids[index % len(ids)] for index in drawn})
        step.using(depends_on=prerequisites, run_if=run_if).enqueue(label=next(self.labels))

    # --- workers -----------------------------------------------------------------------------

    @rule(slot=st.integers(0, WORKERS - 1), limit=st.integers(1, 3))
    def claim(self, slot: int, limit: int) -> None:
        owner = self.worker(slot)
        claimed = self.driver.claim(owner.queues, limit, owner.id)
        for job in claimed:
            note(f"{owner} claimed job {job.id} attempt {job.attempt}")
            self.check_may_run(job.id)
            stale = owner.running.pop(job.id, None)
            if stale is not None:  # reaped, then claimed again by the same worker
                self.killed.append(Owner(owner.id, owner.queues, {job.id: stale}, crashed=True))
            context = JobContext(job, owner=owner.id, driver=self.driver)
            owner.running[job.id] = RunningJob(context)

    def check_may_run(self, job_id: int) -> None:
        """A claimed job's prerequisites have all ended, and its workflow was not cancelled."""
        open_prerequisites = list(
            Dependency.objects.using(self.alias)
            .filter(job_id=job_id)
            .exclude(prerequisite__status__in=TERMINAL)
            .values_list("prerequisite_id", "prerequisite__status")
        )
        assert not open_prerequisites, (
            f"job {job_id} was claimed while prerequisites are open: {open_prerequisites}"
        )
        workflow = (
            Job.objects.using(self.alias).values_list("workflow_id", flat=True).get(pk=job_id)
        )
        assert workflow not in self.cancelled, (
            f"job {job_id} was claimed in workflow {workflow}, which was cancelled"
        )

    @precondition(lambda self: self.live())
    @rule(data=st.data())
    def kill(self, data: st.DataObject) -> None:
        """A worker is killed: it stops renewing and claiming; its bodies are frozen."""
        owner = self.pick(data, self.live(), "killed")
        owner.crashed = True
        token = self.tokens.get(owner.id)
        if token is not None:
            token.end()
            self.gone.add(owner.id)
        self.workers[self.workers.index(owner)] = None
        self.killed.append(owner)

    @precondition(lambda self: self.live_holds())
    @rule(data=st.data())
    def finish(self, data: st.DataObject) -> None:
        """Some bodies of one worker end; its control thread writes their outcomes in one batch."""
        self.finish_bodies(data, self.live_holds())

    @precondition(lambda self: self.late_holds())
    @rule(data=st.data())
    def late_finish(self, data: st.DataObject) -> None:
        """A killed worker's body wakes (a SIGSTOPped process resumed) and writes: fenced out
        unless it still holds the lease."""
        self.finish_bodies(data, self.late_holds())

    def finish_bodies(self, data: st.DataObject, holds: list[Hold]) -> None:
        _, completer = self.run_bodies(data, holds, self.completer)
        self.flush(completer, self.leases_held(completer))

    def run_bodies(
        self, data: st.DataObject, holds: list[Hold], completer_of: Callable[[Owner], Completer]
    ) -> tuple[Owner, Completer]:
        """Some bodies of one worker end, each as the step draws; their outcomes are handed to
        the worker's completer (not written yet)."""
        owner, _ = self.pick(data, holds, "worker")
        bodies = [c for o, c in holds if o is owner]
        verdict_for = st.tuples(st.integers(0, PICKS - 1), st.sampled_from(VERDICTS))
        drawn = data.draw(st.lists(verdict_for, min_size=1, max_size=3), label="bodies")
        chosen: dict[int, tuple[JobContext, str]] = {}
        for index, verdict in drawn:  # the same body twice: its first verdict
            body = bodies[index % len(bodies)]
            chosen.setdefault(id(body), (body, verdict))
        completer = completer_of(owner)
        for context, verdict in chosen.values():
            note(f"job {context.job_id} attempt {context.attempt}: {verdict}")
            verdicts[context.job_id] = verdict
            outcome, pending = run(context.job, context, self.driver, None)
            context.finished = True
            item = owner.running.get(context.job_id)
            if item is not None and item.context is context:
                del owner.running[context.job_id]
            assert pending and outcome is not None
            completer.hand_over(outcome)
        return owner, completer

    def flush(self, completer: Completer, held: dict[tuple[int, int], bool]) -> None:
        """Write the completer's outcomes. Those written are exactly those whose lease was held
        and whose row nobody else holds; the others are kept (a locked row) or dropped as
        stale, and a stale outcome changes nothing."""
        before = {job_id: row(job_id) for (job_id, _), h in held.items() if not h}
        _, written = completer.write_outcomes()
        kept = {o.job_id for o in completer._outcomes}
        for key, was_held in held.items():
            if self.locked_now is not None and key[0] in kept:
                continue  # its row (or its workflow's) is locked: written after the lock
            assert (key in written) == was_held, (
                f"job {key[0]} attempt {key[1]}: written={key in written}, lease held={was_held}"
            )
        for job_id, snapshot in before.items():
            assert row(job_id) == snapshot, f"a stale outcome changed job {job_id}"
        if self.locked_now is None:
            assert not completer.pending, "the completer kept outcomes no lock stands in the way of"
        else:
            self.unflushed = completer

    # --- maintenance and time ----------------------------------------------------------------

    @precondition(lambda self: self.killed)
    @rule()
    def leases_run_out(self) -> None:
        """Time passes beyond every lease (a killed worker's, and live ones' not renewed)."""
        shift_stored_times(self.alias, ADVANCE_SECONDS)

    @rule()
    def reap(self) -> None:
        """The reaper: expired leases, and at once every job of a worker liveness saw die."""
        reaper.run_once(alias=self.alias)
        if self.locked_now is None:
            left = list(
                Job.objects.using(self.alias)
                .filter(status=Status.RUNNING, lease_owner__in=self.gone)
                .values_list("id", "lease_owner")
            )
            assert not left, f"jobs of workers liveness saw die, not reaped: {left}"

    @rule()
    def promote(self) -> None:
        promoter.run_once(alias=self.alias)

    # --- operations --------------------------------------------------------------------------

    def operate(self, name: str, call: Callable[[], Any]) -> None:
        result = call()
        note(f"{name}: {result}")

    @precondition(lambda self: self.seen)
    @rule(data=st.data(), how=st.sampled_from(JOB_OPERATIONS))
    def operate_on_job(self, data: st.DataObject, how: str) -> None:
        self.job_operation(self.pick_job(data, how), how)

    def pick_job(self, data: st.DataObject, how: str) -> int:
        """A job the operation applies to, most of the time (a job whose status it leaves
        alone otherwise, or when there is none)."""
        fitting = [pk for pk, status in sorted(self.seen.items()) if status in APPLIES_TO[how]]
        prefer = data.draw(st.integers(0, 3), label="fitting") > 0  # drawn always: see pick
        if fitting and prefer:
            return self.pick(data, fitting, "job")
        return self.pick(data, self.job_ids(), "job")

    def job_operation(self, job_id: int, how: str) -> None:
        alias = self.alias
        calls: dict[str, Callable[[], Any]] = {
            "complete": lambda: complete_job(job_id, {"by": "operator"}, alias=alias),
            "fail": lambda: fail_job(job_id, "rejected", alias=alias),
            "cancel": lambda: cancel_job(job_id, alias=alias),
            "hold": lambda: hold_job(job_id, alias=alias),
            "release": lambda: release_job(job_id, alias=alias),
            "retry": lambda: retry_job(job_id, alias=alias),
        }
        self.operate(f"{how} job {job_id}", calls[how])

    @precondition(lambda self: self.seen)
    @rule(data=st.data())
    def redrive_jobs(self, data: st.DataObject) -> None:
        chosen = {self.pick_job(data, "redrive")}
        if data.draw(st.booleans(), label="more"):
            chosen.add(self.pick_job(data, "redrive"))
        self.redrive(sorted(chosen))

    def redrive(self, chosen: list[int]) -> None:
        if chosen:
            self.operate(f"redrive {chosen}", lambda: redrive(chosen, alias=self.alias))

    @precondition(lambda self: self.seen and Workflow.objects.exists())
    @rule(data=st.data())
    def cancel_a_workflow(self, data: st.DataObject) -> None:
        self.cancel_workflow(self.pick_workflow(data))

    def pick_workflow(self, data: st.DataObject) -> int:
        """A workflow, most of the time one with jobs that have not ended."""
        workflows = self.workflow_ids()
        open_ones = sorted({pk for pk in Job.objects.using(self.alias).filter(
            status__in=ACTIVE, workflow__isnull=False
        ).values_list("workflow_id", flat=True)})  # fmt: skip
        prefer = data.draw(st.integers(0, 3), label="open") > 0  # drawn always: see pick
        if open_ones and prefer:
            return self.pick(data, open_ones, "workflow")
        return self.pick(data, workflows, "workflow")

    def cancel_workflow(self, workflow_id: int) -> None:
        self.operate(
            f"cancel workflow {workflow_id}", lambda: cancel_workflow(workflow_id, alias=self.alias)
        )
        self.cancelled.add(workflow_id)

    # --- a worker's write and an operation at the same moment --------------------------------

    @precondition(lambda self: self.live_holds())
    @rule(data=st.data(), how=st.sampled_from(("cancel_workflow", *JOB_OPERATIONS, "redrive")))
    def finish_during_an_operation(self, data: st.DataObject, how: str) -> None:
        """A worker's control thread writes outcomes (bodies that may have added steps) while
        an operation on the same workflow runs on another connection: whatever order the
        database puts them in, an outcome is written only under its lease, never dropped
        while its lease holds, and the invariants hold after both."""
        owner, completer = self.run_bodies(
            data, self.live_holds(), lambda owner: Completer(self.driver, owner.id)
        )
        first = Job.objects.using(self.alias).get(pk=completer._outcomes[0].job_id)
        if how == "cancel_workflow":
            if first.workflow_id is None:
                return self.flush(completer, self.leases_held(completer))
            operation = functools.partial(self.cancel_workflow, first.workflow_id)
        else:
            family = Job.objects.using(self.alias).filter(workflow_id=first.workflow_id)
            ids = sorted(family.values_list("id", flat=True)) if first.workflow_id else [first.pk]
            target = self.pick(data, ids, "job")
            if how == "redrive":
                operation = functools.partial(self.redrive, [target])
            else:
                operation = functools.partial(self.job_operation, target, how)
        held = self.leases_held(completer)
        start = threading.Barrier(2, timeout=30)
        written: set[tuple[int, int]] = set()
        failure: list[BaseException] = []

        def control_thread() -> None:
            try:
                start.wait()
                written.update(completer.write_outcomes()[1])
            except BaseException as exc:
                failure.append(exc)
            finally:
                connections[self.alias].close()

        thread = threading.Thread(target=control_thread, daemon=True)
        thread.start()
        start.wait()
        try:
            operation()
        finally:
            thread.join(60)
        assert not thread.is_alive(), "the worker's outcome write never returned"
        if failure:
            raise failure[0]
        written |= completer.write_outcomes()[1]  # rows the operation held were kept: now
        assert not completer.pending, "outcomes still kept once the operation committed"
        assert written <= {key for key, h in held.items() if h}, (
            f"outcomes written without their lease: {written}, leases held before: {held}"
        )
        for job_id, attempt in set(held) - written:
            now = row(job_id)
            lost = (now["status"], now["lease_owner"], now["attempt"]) != (
                Status.RUNNING, owner.id, attempt,
            )  # fmt: skip
            assert lost, f"job {job_id} attempt {attempt}: its outcome was dropped under its lease"

    def leases_held(self, completer: Completer) -> dict[tuple[int, int], bool]:
        """For each outcome the completer holds, whether its worker holds that lease now."""
        held = {}
        for outcome in completer._outcomes:
            now = row(outcome.job_id)
            held[(outcome.job_id, outcome.attempt)] = (
                now["status"], now["lease_owner"], now["attempt"],
            ) == (Status.RUNNING, completer.owner, outcome.attempt)  # fmt: skip
        return held

    # --- a session holding a row lock ----------------------------------------------------------

    @precondition(lambda self: self.seen)
    @rule(data=st.data(), what=st.sampled_from(("job", "workflow")))
    def while_a_row_is_locked(self, data: st.DataObject, what: str) -> None:
        """Another session holds a job's or a workflow's row while one step runs; then it lets
        go, and outcomes kept because of it are written."""
        if what == "workflow":
            if not self.workflow_ids():
                return
            model: type[Job] | type[Workflow] = Workflow
            pk = self.pick_workflow(data)
        else:
            model, pk = Job, self.pick_job(data, "complete")
        actions = ["reap", "operate_on_job", "cancel_workflow", "redrive"]
        if self.live_holds():
            actions.append("finish")
        action = self.pick(data, actions, "while locked")
        self.unflushed = None
        seconds = HOLD_SECONDS
        if FULL and data.draw(st.integers(0, 3), label="hold past the lock timeout") == 0:
            seconds = LONG_HOLD_SECONDS
        with RowLock(self.alias, model, pk, seconds=seconds) as lock:
            self.locked_now = lock
            try:
                self.locked_step(data, action)
            finally:
                self.locked_now = None
        completer, self.unflushed = self.unflushed, None
        if completer is not None and completer.pending:
            # The lock is gone: the next pass writes what it kept, or finds it stale.
            held = self.leases_held(completer)
            note(f"outcomes kept while the row was locked: {sorted(held)}")
            self.flush(completer, held)

    def locked_step(self, data: st.DataObject, action: str) -> None:
        if action == "reap":
            self.reap()
        elif action == "finish":
            self.finish_bodies(data, self.live_holds())
        elif action == "operate_on_job":
            how = data.draw(st.sampled_from(JOB_OPERATIONS), label="operation")
            self.job_operation(self.pick_job(data, how), how)
        elif action == "cancel_workflow":
            if self.workflow_ids():
                self.cancel_workflow(self.pick_workflow(data))
        else:
            self.redrive([self.pick_job(data, "redrive")])

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def invariants_hold(self) -> None:
        """Every invariant of the module docstring, from one read of the jobs, the edges and
        the workflows (three queries: this runs after every step)."""
        fields = (
            "id", "status", "lease_owner", "lease_expires_at", "finished_at", "workflow_id",
            "cancel_requested_at", "waiting_on", "prerequisites_succeeded", "run_after",
        )  # fmt: skip
        jobs = {r["id"]: r for r in Job.objects.using(self.alias).values(*fields, now=Now())}
        edges: dict[int, list[int]] = collections.defaultdict(list)
        for job_id, prerequisite in Dependency.objects.using(self.alias).values_list(
            "job_id", "prerequisite_id"
        ):
            edges[job_id].append(prerequisite)
        members: dict[int, list[str]] = collections.defaultdict(list)
        for r in jobs.values():
            self.one_state(r)
            if r["workflow_id"] is not None:
                members[r["workflow_id"]].append(r["status"])
            theirs = [jobs[p]["status"] for p in edges[r["id"]]]
            open_ones = sum(s not in TERMINAL for s in theirs)
            where = f"job {r['id']} ({r['status']})"
            if r["status"] in RELEASED:
                assert not open_ones, f"{where}: released while its prerequisites are {theirs}"
            if r["status"] == Status.BLOCKED:
                counted = (open_ones, theirs.count(Status.SUCCEEDED))
                assert (r["waiting_on"], r["prerequisites_succeeded"]) == counted, (
                    f"{where}: waiting_on={r['waiting_on']}, prerequisites_succeeded="
                    f"{r['prerequisites_succeeded']}, but its prerequisites are {theirs}"
                )
                assert open_ones, f"{where}: blocked on no open prerequisite: {theirs}"
            if r["workflow_id"] in self.cancelled:
                assert r["status"] not in WAITING, f"{where}: waits in a cancelled workflow"
                if r["status"] == Status.RUNNING:
                    assert r["cancel_requested_at"] is not None, (
                        f"{where}: runs in a cancelled workflow, not asked to stop"
                    )
            if r["status"] == Status.READY:
                assert r["run_after"] <= r["now"], f"{where}: ready before its run_after"
        for workflow in Workflow.objects.using(self.alias):
            assert_counted(workflow, members[workflow.pk])

    def one_state(self, r: dict[str, Any]) -> None:
        """A finished job has ended and has no lease, a waiting one neither, a running one an
        owner and a lease; and it got to its status by an allowed transition."""
        job_id, status = r["id"], r["status"]
        previous = self.seen.get(job_id)
        if previous is not None and previous != status:
            assert can_transition(previous, status), (
                f"job {job_id}: illegal transition {previous} -> {status}"
            )
        self.seen[job_id] = status
        where = f"job {job_id} ({status})"
        lease = (r["lease_owner"], r["lease_expires_at"])
        if status in TERMINAL:
            assert lease == (None, None) and r["finished_at"] is not None, (
                f"{where}: finished, yet {lease}, finished_at {r['finished_at']}"
            )
        elif status == Status.RUNNING:
            assert None not in lease and r["finished_at"] is None, f"{where}: {r}"
        else:
            assert lease == (None, None) and r["finished_at"] is None, (
                f"{where}: waiting, yet leased or finished: {r}"
            )


@pytest.mark.timeout(3600 if FULL else 600)
def test_workflow_state_machine() -> None:
    """Random interleavings of every workflow operation keep every invariant, on this
    database."""
    run_state_machine_as_test(
        WorkflowMachine,
        settings=machine_settings(
            examples=120 if FULL else 40, steps=60 if FULL else 30, derandomize=not FULL
        ),
    )


# --- what the machine found, as explicit examples -----------------------------------------------


@pytest.mark.parametrize("run_if", ["all_finished", "any_succeeded"])
def test_a_redriven_prerequisite_is_waited_for_again_by_a_blocked_dependent(run_if: str) -> None:
    """Found by the machine (SQLite, full size): a dependent waits on two jobs; one fails
    (counted as ended), is redriven (open again), the other succeeds: the dependent must still
    wait for the redriven one."""
    first, second = step.enqueue(label=1), step.enqueue(label=2)
    dependent = step.using(depends_on=[first, second], run_if=run_if).enqueue(label=3)
    fail_job(first, "rejected")
    assert redrive([first.pk]).count == 1
    complete_job(second, None)

    dependent.refresh_from_db()
    first.refresh_from_db()
    assert first.status == Status.READY
    assert (dependent.status, dependent.waiting_on) == (Status.BLOCKED, 1), (
        f"the dependent is {dependent.status} (waiting_on={dependent.waiting_on}) while its "
        f"redriven prerequisite is {first.status}"
    )


@pytest.mark.skipif(connections["default"].vendor != "postgresql", reason="row locks")
def test_an_outcome_whose_dependent_is_locked_is_kept_and_written_later() -> None:
    """Found by the machine (PostgreSQL, full size): chain(a, b, c), a claimed; another session
    holds b's row past the driver's 2 s lock_timeout while a's success is written."""
    alias = conf.DATABASE
    driver = driver_for(alias)
    workflow = chain(step.s(label=1), step.s(label=2), step.s(label=3)).enqueue()
    first, second, _ = Job.objects.filter(workflow=workflow).order_by("id")
    [claimed] = driver.claim(("default",), 1, "owner")
    assert claimed.id == first.pk
    context = JobContext(claimed, owner="owner", driver=driver)
    outcome, _ = run(claimed, context, driver, None)
    assert outcome is not None
    completer = Completer(driver, "owner")
    completer.hand_over(outcome)
    with RowLock(alias, Job, second.pk, seconds=LONG_HOLD_SECONDS):
        completer.write_outcomes()  # kept, not failed (db/locking.py)
    completer.write_outcomes()
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == (Status.SUCCEEDED, Status.READY)


@pytest.mark.parametrize("run_if", ["all_finished", "all_succeeded"])
def test_a_released_dependent_that_has_not_started_waits_again_for_a_redriven_prerequisite(
    run_if: str,
) -> None:
    """Found by the machine: a dependent released by its prerequisite's failure (all_finished)
    or cancelled by it (all_succeeded) waits for the redriven prerequisite again, and runs once
    that ends as its run condition asks."""
    first = step.enqueue(label=1)
    dependent = step.using(depends_on=[first], run_if=run_if).enqueue(label=2)
    fail_job(first, "rejected")
    dependent.refresh_from_db()
    assert dependent.status == (Status.READY if run_if == "all_finished" else Status.CANCELLED)

    assert redrive([first.pk]).count == 1

    dependent.refresh_from_db()
    assert (dependent.status, dependent.waiting_on) == (Status.BLOCKED, 1)
    complete_job(first, None)
    dependent.refresh_from_db()
    assert dependent.status == Status.READY
