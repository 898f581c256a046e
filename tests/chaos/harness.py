"""The fault battery's harness: sizes, the ledger, a supervisor of real workers, the checker.

Sizes: every test has a fast variant (the default, run by ``.ci/run``) and the full size of the
issue that proved it, run by ``make chaos`` (``WORKQUEUE_CHAOS=full``).

The ledger is an append-only file the chaos tasks write one JSON line to per event (see
``chaos_ledger`` in ``testproject/testapp/tasks.py``): ``start`` when an attempt reaches the task
body, ``effect`` after the work (an external side effect such as an e-mail). Each line is one
``os.write``, in the kernel before the call returns, so a SIGKILL of the writer cannot take it
back, and a fault of the database cannot stop it being written.

The checker (``check_invariants``) states what a run must satisfy whatever faults it suffered:

- no job lost: every job terminal, none left running (let alone with an expired lease);
- each (job, attempt) had a single lease owner;
- duplicates only from faulted workers: every attempt that is not a job's final attempt, and every
  external effect that is not the final attempt's, belongs to a worker the test killed or stopped;
- exactly one transactional effect (an ``Effect`` row) per succeeded ``atomic=True`` job, written
  by its final attempt, and none for a job that did not succeed;
- budgets are never exceeded: ``attempts_charged <= max_attempts``, ``crashes_charged <=`` the
  crash budget, and every charge is of a claim (``attempts_charged + crashes_charged <=
  attempt``; a release or a snooze is a claim that spends nothing).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.utils import timezone

from django_workqueue.budgets import crash_budget
from django_workqueue.models import Job
from django_workqueue.states import Status
from testproject.testapp.models import Effect
from tests.support.processes import ProcessIdentity, RunworkerProcess, StartWorker, children_of

FULL = os.environ.get("WORKQUEUE_CHAOS", "").lower() == "full"
TERMINAL = {Status.SUCCEEDED, Status.FAILED, Status.CANCELLED}
# Tasks whose every finished body writes an ``effect`` line (``chaos_atomic``'s is a row).
EXTERNAL_EFFECTS = ("chaos_work", "chaos_progress", "pool_work")


def size(fast: Any, full: Any) -> Any:
    """The fast variant's figure, or the full one under ``make chaos``."""
    return full if FULL else fast


@dataclass(frozen=True, slots=True)
class Entry:
    kind: str
    job: int
    attempt: int
    owner: str
    pid: int
    t: float


class Ledger:
    """The append-only file the chaos tasks write to (the path goes in each job's kwargs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def __str__(self) -> str:
        return str(self.path)

    def entries(self) -> list[Entry]:
        # A read may overlap a worker's append and see its line half written: only lines that
        # end with their newline are complete (each is written with one O_APPEND write).
        *complete, _partial = self.path.read_text().split("\n")
        return [Entry(**json.loads(line)) for line in complete if line.strip()]

    def started(self) -> int:
        with self.path.open("rb") as handle:
            return sum(1 for line in handle if b'"start"' in line)


@dataclass(slots=True)
class Kill:
    """One fault: the worker, when, the jobs (id, attempt) it held when it died, and its child
    processes (``--pool processes``) just before, which must exit with it."""

    worker_id: str
    at: float
    orphans: list[tuple[int, int]] = field(default_factory=list)
    children: list[ProcessIdentity] = field(default_factory=list)


class Supervisor:
    """Keeps ``count`` real ``runworker`` processes running, as systemd or Kubernetes would.

    ``poll()`` restarts any that exited; ``kill_busy()`` SIGKILLs one that holds running jobs and
    records the jobs it orphaned. Exits the test did not cause are kept in ``unexpected_exits``.
    """

    def __init__(
        self,
        start_worker: StartWorker,
        count: int,
        args: Iterable[str],
        *,
        name: str = "w",
        env: dict[str, str] | None = None,
    ) -> None:
        self._start = start_worker
        self.args = list(args)
        self.name = name
        self.env = env or {}
        self.generation = 0
        self.workers = [self._spawn(n) for n in range(count)]
        self.faulted: set[str] = set()
        self.kills: list[Kill] = []
        self.unexpected_exits: list[RunworkerProcess] = []

    def _spawn(self, slot: int) -> RunworkerProcess:
        self.generation += 1
        name = f"{self.name}{slot}g{self.generation}"
        return self._start(*self.args, name=name, env=self.env)

    @property
    def everyone(self) -> list[RunworkerProcess]:
        return list(self.workers)

    def wait_started(self, timeout: float = 60) -> None:
        for worker in self.workers:
            worker.wait_started(timeout=timeout)

    def poll(self) -> None:
        """Restart every worker that has exited."""
        for slot, worker in enumerate(self.workers):
            if worker.alive:
                continue
            if worker.worker_id not in self.faulted:
                self.unexpected_exits.append(worker)
            self.workers[slot] = self._spawn(slot)

    def busy_workers(self) -> list[RunworkerProcess]:
        owners = set(
            Job.objects.filter(status=Status.RUNNING)
            .values_list("lease_owner", flat=True)
            .distinct()
        )
        return [w for w in self.workers if w.alive and w.worker_id in owners]

    def kill(self, worker: RunworkerProcess) -> Kill:
        """SIGKILL ``worker``; its orphans are read once it is dead (it can write nothing more)."""
        self.faulted.add(worker.worker_id)
        children = children_of(worker.pid)
        worker.send(signal.SIGKILL)
        at = time.time()
        worker.wait()
        kill = Kill(worker.worker_id, at, self.orphans_of(worker), children)
        self.kills.append(kill)
        return kill

    def orphans_of(self, worker: RunworkerProcess) -> list[tuple[int, int]]:
        """The jobs (id, attempt) a killed ``worker`` held, read once it is dead."""
        return list(
            Job.objects.filter(status=Status.RUNNING, lease_owner=worker.worker_id).values_list(
                "id", "attempt"
            )
        )

    def kill_busy(self, rng: random.Random) -> Kill | None:
        busy = self.busy_workers()
        return self.kill(rng.choice(busy)) if busy else None

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.alive:
                worker.send(signal.SIGTERM)
        for worker in self.workers:
            worker.wait(timeout=60)

    def describe(self) -> str:
        return "\n".join(w.describe() for w in self.unexpected_exits + self.workers)


@dataclass
class Report:
    """What the checker counted; ``problems`` is empty when every invariant holds."""

    jobs: int = 0
    by_status: dict[str, int] = field(default_factory=dict)
    attempts_started: int = 0
    duplicate_attempts: int = 0
    duplicate_effects: int = 0
    transactional_effects: int = 0
    problems: list[str] = field(default_factory=list)

    def add(self, problem: str) -> None:
        if len(self.problems) < 50:
            self.problems.append(problem)
        elif len(self.problems) == 50:
            self.problems.append("... (more problems not listed)")

    def assert_ok(self) -> None:
        assert not self.problems, "invariants violated:\n" + "\n".join(self.problems)

    def __str__(self) -> str:
        return (
            f"{self.jobs} jobs {self.by_status}; {self.attempts_started} attempts started, "
            f"{self.duplicate_attempts} re-run after a fault, {self.duplicate_effects} external "
            f"effects repeated after a fault, {self.transactional_effects} transactional effects"
        )


def check_invariants(
    job_ids: Iterable[int],
    ledger: Ledger,
    faulted: set[str],
    *,
    expect: Status | None = Status.SUCCEEDED,
) -> Report:
    """Check every invariant of the module docstring over ``job_ids``; see ``Report``.

    ``expect``: the status every job must end in (None: any terminal status).
    """
    ids = set(job_ids)
    report = Report(jobs=len(ids))
    # Whole tables, filtered here: a pk__in of 50,000 ids is past SQLite's variable limit.
    jobs = {job.pk: job for job in Job.objects.all() if job.pk in ids}
    now = timezone.now()
    starts: dict[tuple[int, int], set[str]] = defaultdict(set)
    last_attempt: dict[int, int] = defaultdict(int)
    effects: dict[int, list[Entry]] = defaultdict(list)
    for entry in ledger.entries():
        if entry.job not in ids:
            continue
        if entry.kind == "start":
            starts[entry.job, entry.attempt].add(entry.owner)
            last_attempt[entry.job] = max(last_attempt[entry.job], entry.attempt)
            report.attempts_started += 1
        elif entry.kind == "effect":
            effects[entry.job].append(entry)
    transactional: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for job_id, attempt, value in Effect.objects.values_list("job_id", "attempt", "value"):
        if job_id not in ids:
            continue
        transactional[job_id].append((attempt, value))
        report.transactional_effects += 1

    for job_id in sorted(ids):
        job = jobs.get(job_id)
        if job is None:
            report.add(f"job {job_id}: row missing")
            continue
        report.by_status[job.status] = report.by_status.get(job.status, 0) + 1
        if job.status not in TERMINAL:
            expired = job.lease_expires_at is not None and job.lease_expires_at < now
            report.add(f"job {job_id}: lost, still {job.status} (lease expired: {expired})")
            continue
        if expect is not None and job.status != expect:
            report.add(f"job {job_id}: ended {job.status}, expected {expect}: {job.errors}")
        if job.lease_owner is not None:
            report.add(f"job {job_id}: {job.status} but still leased to {job.lease_owner}")
        if job.attempts_charged > job.max_attempts:
            report.add(f"job {job_id}: {job.attempts_charged} charged > {job.max_attempts}")
        if job.crashes_charged > crash_budget(job.max_attempts):
            report.add(f"job {job_id}: {job.crashes_charged} crashes > the crash budget")
        if job.attempts_charged + job.crashes_charged > job.attempt:
            report.add(f"job {job_id}: more charged than its {job.attempt} claim(s)")
        final_owner = None
        for attempt in range(1, max(job.attempt, last_attempt[job_id]) + 1):
            owners = starts.get((job_id, attempt), set())
            if len(owners) > 1:
                report.add(f"job {job_id} attempt {attempt}: {len(owners)} owners {owners}")
            if attempt == job.attempt:
                final_owner = next(iter(owners), None)
            elif owners:
                report.duplicate_attempts += 1
                if job.status == Status.SUCCEEDED and not owners <= faulted:
                    report.add(
                        f"job {job_id} attempt {attempt} of {job.attempt} re-run though its "
                        f"owner {owners} was not faulted: {job.errors}"
                    )
        if job.status == Status.SUCCEEDED and job.task_name.endswith(EXTERNAL_EFFECTS):
            final = [e for e in effects[job_id] if e.attempt == job.attempt]
            if len(final) != 1:
                report.add(f"job {job_id}: {len(final)} effects by its final attempt, expected 1")
        for entry in effects[job_id]:
            if entry.attempt != job.attempt:
                report.duplicate_effects += 1
                if entry.owner not in faulted:
                    report.add(
                        f"job {job_id}: effect of attempt {entry.attempt} repeated though "
                        f"{entry.owner} was not faulted"
                    )
        if job.task_name.endswith("chaos_atomic"):
            rows = transactional[job_id]
            wanted = [(job.attempt, final_owner)] if job.status == Status.SUCCEEDED else []
            if rows != wanted:
                report.add(f"job {job_id} ({job.status}): transactional effects {rows} != {wanted}")
    return report


def wait_all_terminal(
    *,
    timeout: float,
    supervisor: Supervisor | None = None,
    while_waiting: Callable[[], None] | None = None,
) -> float:
    """Wait until every job is terminal, restarting dead workers; return the time it took."""
    started = time.monotonic()
    deadline = started + timeout
    while True:
        if supervisor is not None:
            supervisor.poll()
        if while_waiting is not None:
            while_waiting()
        # The test owns the table (it is flushed between tests): count every unfinished job.
        left = Job.objects.exclude(status__in=list(TERMINAL)).count()
        if not left:
            return time.monotonic() - started
        if time.monotonic() > deadline:
            detail = supervisor.describe()[-20000:] if supervisor else ""
            raise AssertionError(f"{left} job(s) still not terminal after {timeout}s\n{detail}")
        time.sleep(0.05)


def record(test: str, **figures: Any) -> None:
    """Print a test's figures, and append them to $WORKQUEUE_CHAOS_REPORT (``make chaos``)."""
    from django.db import connection

    line = json.dumps(
        {"test": test, "full": FULL, "vendor": connection.vendor, **figures}, default=str
    )
    print(f"chaos figures: {line}")
    path = os.environ.get("WORKQUEUE_CHAOS_REPORT")
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")
