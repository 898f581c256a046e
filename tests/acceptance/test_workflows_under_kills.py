"""Workflows under SIGKILLs: every workflow finishes, and its atomic steps take effect once.

200 workflows ``A → 10 parallel B → C → D`` (``chain(workflow_begin, group(workflow_branch x 10),
workflow_gather, workflow_finish)``) run on real ``runworker`` processes kept alive by the fault
battery's supervisor (``tests/chaos/harness.py``), while the test SIGKILLs busy workers. The
kills come at random points of the run, measured in finished jobs rather than seconds, so they
are spread over it however fast the machine is; every other kill picks, when there is one, a
worker that is running C or D (waiting up to 1 s for one), so that atomic steps are
interrupted mid-transaction.

C and D are ``atomic=True``: each writes a ``WorkflowEffect`` row in its completion transaction,
under a unique (workflow, step) constraint, so a second effect could not even commit: the step
would fail and its workflow with it.

Pass criteria:

- every job succeeded, none left blocked, scheduled, ready or running, and every invariant of
  ``harness.check_invariants`` (one lease owner per attempt, attempts re-run only when their
  worker was killed, attempts within budget, no lease left on a finished job);
- every workflow succeeded, with ``finished_at`` set and the value its arguments imply;
- every workflow's counters equal the counts of its jobs' statuses;
- C and D took effect exactly once per workflow: one row per (workflow, step), written by the
  attempt that succeeded;
- the test did interrupt atomic steps: at least one C or D job ran again after a kill;
- every planned kill found a busy worker, and no worker exited on its own.

Both databases: one host is enough for a killed process and an expired lease, and SQLite's
write lock is released by the kernel when its holder dies. The fast variant (200 workflows,
8 kills) runs by default; ``WORKQUEUE_CHAOS=full`` runs 1,000 workflows and 40 kills.
"""

from __future__ import annotations

import collections
import random
import time
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.db.models import Count

from django_workqueue import chain, group
from django_workqueue.models import Job, Workflow
from django_workqueue.states import TERMINAL, Status, WorkflowStatus
from testproject.testapp.models import WorkflowEffect
from testproject.testapp.tasks import (
    workflow_begin,
    workflow_branch,
    workflow_finish,
    workflow_gather,
)
from tests.chaos.harness import (
    Kill,
    Ledger,
    Supervisor,
    check_invariants,
    record,
    size,
    wait_all_terminal,
)
from tests.support.processes import StartWorker

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WORKFLOWS = size(200, 1000)
BRANCHES = 10
JOBS = WORKFLOWS * (BRANCHES + 3)
KILLS = size(8, 40)
WORKERS = size(3, 4)
SLOTS = size(4, 8)
SLEEP = 0.02  # seconds of work per step, so that kills find busy workers
ATOMIC_STEPS = {workflow_gather.name: "gather", workflow_finish.name: "finish"}
ATOMIC_WAIT = 1.0  # seconds a kill meant for C or D waits for one to be running


def expected_result(number: int) -> int:
    """What D returns: twice C's sum of the branches' values, ``number + index``."""
    return 2 * sum(number + index for index in range(BRANCHES))


def enqueue(ledger: Ledger) -> dict[int, int]:
    """The workflows, in one transaction so workers see them all at once: {workflow id: number}.

    On SQLite an atomic body holds the one write lock while it runs, so there C and D do not
    sleep (see docs/explanation/sqlite.md and tests/chaos/test_sigkill.py).
    """
    common = {"ledger": str(ledger), "sleep": SLEEP}
    atomic = {**common, "sleep": SLEEP if connection.vendor == "postgresql" else 0.0}
    numbers = {}
    with transaction.atomic():
        for number in range(WORKFLOWS):
            workflow = chain(
                workflow_begin.s(number, **common),
                group(workflow_branch.s(index=i, **common) for i in range(BRANCHES)),
                workflow_gather.s(**atomic),
                workflow_finish.s(**atomic),
            ).enqueue(name=f"under kills {number}")
            numbers[workflow.pk] = number
    return numbers


def kill_one(
    supervisor: Supervisor, rng: random.Random, atomic_first: bool, fall_back: bool = True
) -> Kill | None:
    """SIGKILL a busy worker; with ``atomic_first``, one running C or D if there is one, else
    (``fall_back``) any busy worker, or (not ``fall_back``) none for now."""
    if atomic_first:
        running = Job.objects.filter(status=Status.RUNNING, task_name__in=list(ATOMIC_STEPS))
        owners = set(running.values_list("lease_owner", flat=True))
        targets = [w for w in supervisor.workers if w.alive and w.worker_id in owners]
        if targets:
            return supervisor.kill(rng.choice(targets))
        if not fall_back:
            return None
    return supervisor.kill_busy(rng)


def test_workflows_finish_and_atomic_steps_take_effect_once_under_sigkills(
    start_worker: StartWorker, tmp_path: Path
) -> None:
    rng = random.Random(20)
    ledger = Ledger(tmp_path / "ledger.jsonl")
    supervisor = Supervisor(start_worker, WORKERS, ["--concurrency", str(SLOTS)], name="wf")
    supervisor.wait_started()
    numbers = enqueue(ledger)
    assert Job.objects.count() == JOBS
    # Kill when this many jobs have succeeded: random points between 5% and 80% of the run.
    kill_at = sorted(rng.sample(range(JOBS // 20, JOBS * 4 // 5), KILLS))

    due_since: float | None = None

    def maybe_kill() -> None:
        # A kill meant for C or D waits up to ATOMIC_WAIT for one to be running: on SQLite
        # they do not sleep, and a look at one moment often finds none.
        nonlocal due_since
        done = len(supervisor.kills)
        if done >= KILLS or Job.objects.filter(status=Status.SUCCEEDED).count() < kill_at[done]:
            return
        due_since = time.monotonic() if due_since is None else due_since
        patient = time.monotonic() - due_since < ATOMIC_WAIT
        if kill_one(supervisor, rng, atomic_first=done % 2 == 0, fall_back=not patient):
            due_since = None

    elapsed = wait_all_terminal(
        timeout=size(75, 600), supervisor=supervisor, while_waiting=maybe_kill
    )
    supervisor.stop_all()
    assert not supervisor.unexpected_exits, supervisor.describe()
    assert len(supervisor.kills) == KILLS, f"only {len(supervisor.kills)} kills found busy work"

    # Every job succeeded, and the fault battery's invariants hold over the ledger.
    report = check_invariants(Job.objects.values_list("id", flat=True), ledger, supervisor.faulted)
    print(report)
    report.assert_ok()
    left = Job.objects.exclude(status__in=list(TERMINAL)).values_list("id", "status")
    assert not list(left), "jobs left unfinished"

    # Every workflow succeeded, with the value its arguments imply.
    workflows = list(Workflow.objects.order_by("id"))
    assert len(workflows) == WORKFLOWS
    wrong = [
        (wf.pk, wf.status, wf.finished_at, wf.result)
        for wf in workflows
        if (wf.status, wf.result) != (WorkflowStatus.SUCCEEDED, expected_result(numbers[wf.pk]))
        or wf.finished_at is None
    ]
    assert not wrong, f"workflows not succeeded with their value: {wrong[:10]}"

    # Counters equal the counts of the jobs' statuses.
    by_status: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    rows = Job.objects.values_list("workflow_id", "status").annotate(n=Count("id"))
    for workflow_id, status, n in rows:
        by_status[workflow_id][status] = n
    mismatched = []
    for wf in workflows:
        counted = by_status[wf.pk]
        expected = {
            "total": sum(counted.values()),
            "open": sum(n for s, n in counted.items() if s not in TERMINAL),
            "succeeded": counted[Status.SUCCEEDED],
            "failed": counted[Status.FAILED],
            "cancelled": counted[Status.CANCELLED],
        }
        if wf.counts != expected:
            mismatched.append((wf.pk, wf.counts, expected))
    assert not mismatched, f"counters differ from the jobs' statuses: {mismatched[:10]}"

    # C and D took effect exactly once, by the attempt that succeeded.
    finals = {
        (workflow_id, ATOMIC_STEPS[name]): (pk, attempt)
        for pk, workflow_id, name, attempt in Job.objects.filter(
            task_name__in=list(ATOMIC_STEPS)
        ).values_list("id", "workflow_id", "task_name", "attempt")
    }
    effects = collections.defaultdict(list)
    for row in WorkflowEffect.objects.values_list("workflow_id", "step", "job_id", "attempt"):
        effects[row[:2]].append(row[2:])
    assert len(finals) == 2 * WORKFLOWS
    wrong_effects = {key: effects.get(key) for key, final in finals.items()
                     if effects.get(key) != [final]}  # fmt: skip
    assert not wrong_effects, f"effects other than the final attempt's: {wrong_effects}"
    assert set(effects) == set(finals), "effects of steps that are not C or D of a workflow"

    # The kills interrupted atomic steps: some C or D ran again after losing its worker.
    rerun = [attempt for _, attempt in finals.values() if attempt > 1]
    assert rerun, "no kill interrupted C or D: the run proved nothing about their effects"
    orphans = [orphan for kill in supervisor.kills for orphan in kill.orphans]
    record(
        "workflows_under_kills",
        workflows=WORKFLOWS,
        jobs=JOBS,
        workers=WORKERS,
        slots=SLOTS,
        seconds=round(elapsed, 2),
        kills=len(supervisor.kills),
        orphans=len(orphans),
        reruns=report.duplicate_attempts,
        atomic_steps_rerun=len(rerun),
    )
