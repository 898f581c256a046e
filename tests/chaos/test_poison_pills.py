"""5. Poison pills: jobs that take their worker down every time end in the dead-letter queue,
and the normal jobs around them all succeed.

Real workers (several slots each) under the supervisor, which restarts each one that dies. Two
phases, one per kind of pill, so that each kind surely crashes workers: the queue gets normal
``chaos_work`` / ``chaos_atomic`` jobs with pills in the middle, first ``chaos_segfault`` (a
segmentation fault through ctypes), then, once those are dead-lettered, ``chaos_exit``
(``os._exit``); each pill has a 1 s lease and a budget of 3 attempts. An attempt of a pill kills
the worker running it, and with it whatever that worker had in flight: the normal jobs and other
pills it had claimed, which are recovered by lease expiry like any crash.

Pass criteria, both databases (fast: 200 normal jobs, 2 pills of each kind; full: 1,000 normal
jobs, 5 of each):

- every pill ends ``failed`` with attempt == max_attempts (3), and its errors are exactly 3
  ``LeaseExpired``, one per attempt, each naming a worker that crashed;
- every normal job succeeds, with every invariant of ``check_invariants`` (its re-runs only on
  workers a pill crashed);
- every worker exit is explained: the exited workers are exactly those whose ledger holds a pill
  attempt of their own, and each one's exit status is that of a pill it started (86 for
  ``os._exit``, -11 for SIGSEGV); each kind crashed at least one worker, and crashes <= pill
  attempts (2 x 3 per kind fast, 5 x 3 full);
- the supervisor restarted each crashed worker (workers started == initial + crashes); at the
  end all of them run and stop with status 0 on SIGTERM.
"""

from __future__ import annotations

import re
import signal
import time
from typing import Any

import pytest
from django.db import connection

from django_workqueue import Task
from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.tasks import (
    POISON_EXIT_CODE,
    chaos_atomic,
    chaos_exit,
    chaos_segfault,
    chaos_work,
)

from .harness import (
    TERMINAL,
    Ledger,
    StartWorker,
    Supervisor,
    check_invariants,
    record,
    size,
    wait_all_terminal,
)

pytestmark = [pytest.mark.chaos, pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

WORKERS = size(3, 4)
SLOTS = 4
NORMAL = size(200, 1_000)  # over both phases
PILLS = size(2, 5)  # of each kind
BUDGET = 3  # the pills' max_attempts
SLEEP = size(0.05, 0.1)  # seconds per normal job: pills crash workers that are busy with them
KINDS = {"chaos_segfault": -signal.SIGSEGV, "chaos_exit": POISON_EXIT_CODE}  # exit statuses
# The reaper names the lease owner: a worker seen gone (liveness) or one that stopped renewing.
REAPED_FROM = re.compile(r"worker (\S+) (?:is gone|stopped renewing)")


def enqueue_phase(ledger: Ledger, pill: Task) -> tuple[list[int], list[int]]:
    """A quarter of the normal jobs, PILLS pills, another quarter: (normal ids, pill ids)."""
    kwargs = {"ledger": str(ledger), "sleep": SLEEP}
    atomic_sleep = SLEEP if connection.vendor == "postgresql" else 0.0  # SQLite: see test_sigkill

    def normal(count: int) -> list[int]:
        atomic = chaos_atomic.enqueue_many([((), {**kwargs, "sleep": atomic_sleep})] * (count // 4))
        plain = chaos_work.enqueue_many([((), kwargs)] * (count - count // 4))
        return [job.pk for job in atomic + plain]

    first = normal(NORMAL // 4)
    pills = [job.pk for job in pill.enqueue_many([((), {"ledger": str(ledger)})] * PILLS)]
    return first + normal(NORMAL // 4), pills


def reaped_from(error: dict[str, Any]) -> str:
    """The worker a ``LeaseExpired`` error names (the reaper writes the lease owner in it)."""
    found = REAPED_FROM.search(error["message"])
    assert found, error
    return found.group(1)


def wait_pills(supervisor: Supervisor, pill_ids: list[int], timeout: float) -> None:
    """Wait until these pills are terminal, restarting the workers they kill meanwhile."""
    deadline = time.monotonic() + timeout
    pending = Job.objects.filter(pk__in=pill_ids).exclude(status__in=list(TERMINAL))
    while pending.exists():
        assert time.monotonic() < deadline, f"pills not dead-lettered\n{supervisor.describe()}"
        supervisor.poll()
        time.sleep(0.05)


def test_poison_pills_end_in_the_dead_letter_queue(
    start_worker: StartWorker, ledger: Ledger
) -> None:
    supervisor = Supervisor(start_worker, WORKERS, ["--concurrency", str(SLOTS)], name="pp")
    supervisor.wait_started()
    started = time.monotonic()
    normal: list[int] = []
    pills: dict[int, str] = {}
    for pill in (chaos_segfault, chaos_exit):
        phase_normal, phase_pills = enqueue_phase(ledger, pill)
        normal += phase_normal
        pills.update((pk, pill.name.rsplit(".", 1)[-1]) for pk in phase_pills)
        # The next kind only once these are dead-lettered, so each kind crashes workers itself.
        wait_pills(supervisor, phase_pills, timeout=size(120, 600))
    wait_all_terminal(timeout=size(120, 600), supervisor=supervisor)
    elapsed = time.monotonic() - started
    supervisor.poll()  # a worker may have died with the last pill attempt
    supervisor.wait_started()
    alive = supervisor.everyone

    # Every exit is explained by a pill attempt that worker started, with the pill's status.
    pill_attempts = [e for e in ledger.entries() if e.job in pills and e.kind == "start"]
    pill_owners = {e.owner for e in pill_attempts}
    crashed = {w.worker_id: w for w in supervisor.unexpected_exits}
    assert set(crashed) == pill_owners, (
        f"exits without a pill: {set(crashed) - pill_owners}; pill attempts whose worker lived "
        f"on: {pill_owners - set(crashed)}\n{supervisor.describe()}"
    )
    for worker_id, worker in crashed.items():
        statuses = {KINDS[pills[e.job]] for e in pill_attempts if e.owner == worker_id}
        assert worker.returncode in statuses, (worker.returncode, statuses, worker.describe())
    by_kind = {
        kind: sum(1 for w in crashed.values() if w.returncode == status)
        for kind, status in KINDS.items()
    }
    assert all(by_kind.values()), f"a kind of pill crashed no worker: {by_kind}"
    assert len(crashed) <= len(pills) * BUDGET
    assert len(alive) == WORKERS and all(w.alive for w in alive)
    assert supervisor.generation == WORKERS + len(crashed)

    # The pills are in the dead-letter queue after exactly their budget of crashed attempts,
    # each attempt reaped from a worker that crashed (claimed alongside a pill that ran, if
    # this one's body never started).
    for job in Job.objects.filter(pk__in=pills):
        assert job.status == Status.FAILED, (job.pk, job.status, job.errors)
        assert job.attempt == job.max_attempts == BUDGET, (job.pk, job.attempt, job.max_attempts)
        # Crashes spend the crash budget, never the body's.
        assert (job.crashes_charged, job.attempts_charged) == (BUDGET, 0), job.pk
        attempts = [(e["attempt"], e["type"]) for e in job.errors]
        assert attempts == [(n, "LeaseExpired") for n in range(1, BUDGET + 1)], job.errors
        owners = {reaped_from(error) for error in job.errors}
        assert owners <= set(crashed), (job.pk, owners - set(crashed))

    report = check_invariants(normal, ledger, set(crashed))
    print(report)
    report.assert_ok()
    check_invariants(pills, ledger, set(crashed), expect=Status.FAILED).assert_ok()

    supervisor.stop_all()
    assert [w.returncode for w in alive] == [0] * WORKERS, supervisor.describe()
    record(
        "poison_pills",
        workers=WORKERS,
        slots=SLOTS,
        normal_jobs=len(normal),
        pills=len(pills),
        pill_attempts=len(pills) * BUDGET,
        pill_attempts_started=len(pill_attempts),
        crashes=len(crashed),
        crashes_by_kind=by_kind,
        restarts=supervisor.generation - WORKERS,
        normal_reruns=report.duplicate_attempts,
        normal_lost=sum(n for s, n in report.by_status.items() if s != "succeeded"),
        dead_lettered=Job.objects.filter(pk__in=pills, status=Status.FAILED).count(),
        seconds=round(elapsed, 2),
    )
