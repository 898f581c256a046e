"""Retention: finished jobs older than ``WORKQUEUE["RETENTION"]`` are deleted, in batches.

``RETENTION`` gives days per final status (``{"succeeded": 7, "failed": 30, "cancelled": 7}``
by default; ``None`` keeps that status forever). The fleet's maintainer runs it
(``maintainer.py``); ``manage.py workqueue purge`` runs it on demand.

What may be deleted (the rule that keeps workflows whole):

* a job **outside any workflow** once its status's age has passed, unless another job still
  depends on it (``using(depends_on=...)``): a dependent reads its prerequisites' results, and a
  redriven one waits on them again, so prerequisites go after their dependents;
* a **workflow** as a unit: once it is finished (every job ended), its own status's age has
  passed, no job of it is still kept by its status's age, and no job outside it depends on one
  of its jobs. Its jobs are deleted first, then the workflow row. A job of an unfinished
  workflow is never deleted, however old: a redrive or a later step may still read it.

Each transaction deletes at most ``BATCH_SIZE`` jobs (their dependency edges go with them),
found through the ``(status, finished_at)`` index (``wq_job_status_finished``) and the
workflows' ``(status, finished_at)`` index, oldest first, so that row locks stay short and a
backlog is worked off batch by batch.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from django.db import InterfaceError, OperationalError, connections, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.db.models.functions import Now

from ..conf import DEFAULTS
from ..conf import workqueue_settings as conf
from ..db import driver_for
from ..models import Dependency, Job, Workflow
from ..states import Status
from . import Service
from .leadership import Leadership

logger = logging.getLogger("django_workqueue.retention")

BATCH_SIZE = 1000
"""The most jobs one transaction deletes."""

#: How often the holder of the retention lease runs it (seconds); the lease lasts three runs.
INTERVAL = 60.0
LEASE_RUNS = 3
#: A worker's run stops after this many batches (a few seconds), so that a backlog is worked
#: off in runs that each end soon (a stopping worker waits for the batch under way, SQLite's
#: control thread for the run); a backlog goes on after ``BACKLOG_PAUSE``.
BATCHES_PER_RUN = 10
BACKLOG_PAUSE = 1.0

FINAL = (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)
STATUSES = tuple(status.value for status in FINAL)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """How long finished jobs are kept, per final status; None keeps them forever.

    >>> Policy.from_days({"succeeded": 7, "failed": None, "cancelled": 7})
    """

    succeeded: timedelta | None
    failed: timedelta | None
    cancelled: timedelta | None

    @classmethod
    def from_days(cls, days: Mapping[str, float | None]) -> Policy:
        """A policy from days per status; statuses not named keep their defaults."""
        merged = {**DEFAULTS["RETENTION"], **days}
        return cls(**{status: _days(merged[status]) for status in STATUSES})

    @classmethod
    def from_settings(cls) -> Policy:
        return cls.from_days(conf.RETENTION or {})

    def ages(self) -> dict[str, timedelta]:
        """The statuses that expire, with their ages."""
        ages = {"succeeded": self.succeeded, "failed": self.failed, "cancelled": self.cancelled}
        return {status: age for status, age in ages.items() if age is not None}

    def expired(self, clock: Any, prefix: str = "") -> Q:
        """Rows (jobs, or workflows: their statuses share the names) past their status's age.
        Matches nothing when every status is kept forever."""
        q = Q(pk__in=[])
        for status, age in self.ages().items():
            q |= Q(**{f"{prefix}status": status, f"{prefix}finished_at__lt": clock - age})
        return q


def _days(value: float | None) -> timedelta | None:
    return None if value is None else timedelta(days=value)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Purged:
    """What a purge deleted (or, for a dry run, would delete now)."""

    jobs: dict[str, int]
    """Jobs per final status."""
    workflows: int
    more: bool = False
    """The purge stopped at its ``max_batches``: more may be left."""

    @property
    def total(self) -> int:
        return sum(self.jobs.values())


def purge(
    *,
    alias: str | None = None,
    policy: Policy | None = None,
    now: datetime | None = None,
    on_batch: Callable[[int], None] | None = None,
    max_batches: int | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> Purged:
    """Delete every finished job (and workflow) past its retention, ``BATCH_SIZE`` jobs per
    transaction; return the counts. ``on_batch(jobs)`` is called after each committed batch
    (a progress bar); ``max_batches`` stops after that many, and ``stopping()`` (asked before
    each batch) once it is true (``Purged.more`` then says so). ``now`` replaces the
    database's clock (tests).

    >>> purge(policy=Policy.from_days({"succeeded": 1}))
    """
    db = alias or conf.DATABASE
    policy = policy or Policy.from_settings()
    clock: Any = Now() if now is None else now
    jobs = {status.value: 0 for status in FINAL}
    workflows = batches = 0

    def budget_left() -> bool:
        return (max_batches is None or batches < max_batches) and not stopping()

    # Rounds until one deletes nothing: a prerequisite becomes deletable once its dependents
    # (of any status) are gone.
    deleted_in_round = True
    while deleted_in_round and budget_left():
        deleted_in_round = False
        for status, age in policy.ages().items():
            while budget_left() and (deleted := _delete_standalone(db, status, clock - age)):
                batches += 1
                deleted_in_round = True
                jobs[status] += deleted
                if on_batch:
                    on_batch(deleted)
    while budget_left():
        by_status, gone = _delete_workflow_batch(db, policy, clock)
        if not by_status and not gone:
            break
        batches += 1
        for status, n in by_status.items():
            jobs[status] += n
        workflows += gone
        if on_batch:
            on_batch(sum(by_status.values()))
    result = Purged(jobs=jobs, workflows=workflows, more=not budget_left())
    if result.total or workflows:
        logger.info(
            "retention deleted %d finished job(s) (%s) and %d workflow(s)",
            result.total, ", ".join(f"{n} {s}" for s, n in jobs.items() if n), workflows,
        )  # fmt: skip
    return result


def pending(
    *, alias: str | None = None, policy: Policy | None = None, now: datetime | None = None
) -> Purged:
    """What ``purge`` would delete now, without deleting (``workqueue purge --dry-run``).

    A prerequisite outside workflows becomes deletable only once its dependents are gone, so
    a purge may delete a few more jobs than this counts."""
    db = alias or conf.DATABASE
    policy = policy or Policy.from_settings()
    clock: Any = Now() if now is None else now
    jobs = {status.value: 0 for status in FINAL}
    for status, age in policy.ages().items():
        jobs[status] += _standalone(db, status, clock - age).count()
    workflow_ids = _workflows(db, policy, clock).values("pk")
    in_workflows = Job.objects.using(db).filter(workflow__in=workflow_ids)
    for row in in_workflows.order_by().values("status").annotate(n=Count("pk")):
        jobs[row["status"]] += row["n"]
    return Purged(jobs=jobs, workflows=_workflows(db, policy, clock).count())


# --- the queries ---------------------------------------------------------------------------


def _standalone(db: str, status: str, cutoff: Any) -> QuerySet[Job]:
    """Finished jobs outside workflows past ``cutoff`` that no job depends on."""
    dependents = Dependency.objects.using(db).filter(prerequisite=OuterRef("pk"))
    return (
        Job.objects.using(db)
        .filter(status=status, finished_at__lt=cutoff, workflow__isnull=True)
        .exclude(Exists(dependents))
    )


def _workflows(db: str, policy: Policy, clock: Any) -> QuerySet[Workflow]:
    """Finished workflows past their status's age whose jobs are all past theirs, with no job
    outside depending on one of their jobs."""
    kept_job = Job.objects.using(db).filter(workflow=OuterRef("pk")).exclude(policy.expired(clock))
    outside = (
        Dependency.objects.using(db)
        .filter(prerequisite__workflow=OuterRef("pk"))
        .exclude(job__workflow=OuterRef("pk"))
    )
    return (
        Workflow.objects.using(db)
        .filter(policy.expired(clock), finished_at__isnull=False)
        .exclude(Exists(kept_job))
        .exclude(Exists(outside))
    )


def _delete_standalone(db: str, status: str, cutoff: Any) -> int:
    """Delete one batch of expired jobs outside workflows; return how many."""
    candidates = _standalone(db, status, cutoff)
    with transaction.atomic(using=db):
        driver_for(db).bound_lock_waits()  # the cascades wait on rows other sessions hold
        # Oldest first through (status, finished_at); rows another purge holds are skipped.
        ids = list(
            candidates.select_for_update(skip_locked=True)
            .order_by("finished_at")
            .values_list("pk", flat=True)[:BATCH_SIZE]
        )
        if not ids:
            return 0
        # Guarded: a job redriven, or given a dependent, since it was read stays.
        return _delete_jobs(candidates.filter(pk__in=ids))


def _delete_workflow_batch(db: str, policy: Policy, clock: Any) -> tuple[dict[str, int], int]:
    """Delete up to ``BATCH_SIZE`` jobs of expired workflows, and the workflows left without
    jobs; return the jobs deleted per status and the workflows deleted."""
    eligible = _workflows(db, policy, clock)
    with transaction.atomic(using=db):
        driver_for(db).bound_lock_waits()  # the workflows' locks below are waited for
        oldest_first = eligible.order_by("finished_at").values_list("pk", flat=True)
        workflow_ids = list(oldest_first[:BATCH_SIZE])
        if not workflow_ids:
            return {}, 0
        # The lock order (workflow/locks.py): the workflows first, checked again under their
        # locks (one redriven meanwhile is running again, and keeps its jobs), then their jobs
        # in id order (one another session holds is left for a later pass).
        still = list(
            eligible.select_for_update()
            .filter(pk__in=workflow_ids)
            .order_by("pk")
            .values_list("pk", flat=True)
        )
        rows = list(
            Job.objects.using(db)
            .select_for_update(skip_locked=True)
            .filter(workflow_id__in=still)
            .order_by("pk")
            .values_list("pk", "status")[:BATCH_SIZE]
        )
        targets = Job.objects.using(db).filter(
            policy.expired(clock), pk__in=[pk for pk, _ in rows], workflow_id__in=still
        )
        by_status: dict[str, int] = {}
        for status in targets.values_list("status", flat=True):  # the rows are locked
            by_status[status] = by_status.get(status, 0) + 1
        _delete_jobs(targets)
        jobs_left = Job.objects.using(db).filter(workflow=OuterRef("pk"))
        _, per_model = (
            Workflow.objects.using(db).filter(pk__in=still).exclude(Exists(jobs_left)).delete()
        )
    return by_status, per_model.get(Workflow._meta.label, 0)


def _delete_jobs(jobs: QuerySet[Job]) -> int:
    """Delete ``jobs`` with their dependency edges; schedule runs that fired them keep their
    row, without the job."""
    _, per_model = jobs.only("pk").delete()
    return per_model.get(Job._meta.label, 0)


class Retention(Service):
    """The retention service: purges on its interval while its worker holds the lease.

    Where the database admits writers side by side (PostgreSQL), the fleet's maintainer runs
    it in the background (``start``), on a thread and a database connection of its own, one
    run at a time: a run deletes up to ``BATCHES_PER_RUN`` batches, seconds of bulk deletes
    that would otherwise keep the worker's control thread from its claims and leases (its
    slots idle, one worker's drain dipping once a minute). SQLite has one writer at a time:
    there a thread would only queue the control thread's writes behind its batches (and past
    their busy timeout), so the maintainer runs it inline (``run_if_due``)."""

    name = "retention"
    _thread: threading.Thread | None = None

    def __init__(self, alias: str, interval: float = INTERVAL, owner: str | None = None) -> None:
        self._idle = threading.Event()
        self._idle.set()
        self._stop = threading.Event()
        self._stopping: Callable[[], bool] = self._stop.is_set
        super().__init__(alias, interval)
        self.leadership = (
            Leadership(alias, self.name, owner=owner, seconds=interval * LEASE_RUNS)
            if owner is not None
            else None
        )
        """None: run without asking (tests, ``workqueue purge``)."""

    @property
    def next_run(self) -> float:
        """When the next run is due (monotonic); never while a background run is under way
        (its thread wakes the caller when it ends)."""
        return math.inf if self.running else self._next_run

    @next_run.setter
    def next_run(self, value: float) -> None:
        self._next_run = value

    @property
    def running(self) -> bool:
        """Whether a background run (``start``) is under way."""
        return not self._idle.is_set()

    def start(
        self,
        at: float,
        *,
        more: Callable[[], None] = lambda: None,
        thread_start: Callable[[], None] = lambda: None,
        leading: Callable[[], bool] = lambda: True,
    ) -> None:
        """Run once on a thread of its own; ``due`` is false until it ends. That thread calls
        ``thread_start()`` first (a worker names the thread's database session after itself)
        and ``more()`` last, to wake a caller that sleeps until its next duty (a backlog goes
        on after ``BACKLOG_PAUSE``). The run stops after its batch under way once ``stop`` is
        asked or ``leading()`` turns false (another worker maintains now)."""
        self.advance(at)
        self._stop.clear()
        self._stopping = lambda: self._stop.is_set() or not leading()
        self._idle.clear()
        self._thread = threading.Thread(
            target=self._run_in_background, args=(thread_start, more),
            name="workqueue-retention", daemon=True,
        )  # fmt: skip
        self._thread.start()

    def stop(self) -> None:
        """Ask a background run to stop after its batch under way (each batch is one
        transaction: nothing is half deleted); ``join`` waits for it."""
        self._stop.set()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a background run to end; return whether none
        is under way."""
        thread = self._thread
        if thread is not None:
            thread.join(max(0.0, timeout))
        return not self.running

    def _run_in_background(
        self, thread_start: Callable[[], None], more: Callable[[], None]
    ) -> None:
        began = time.monotonic()
        try:
            thread_start()
            self.run_once()
        except (OperationalError, InterfaceError) as exc:  # the database: down, or locked
            logger.warning("retention: %s; it runs again within %.0f s", exc, self.interval)
        except Exception:  # anything else is a defect: its traceback, and the next run
            logger.exception("retention failed; it runs again within %.0f s", self.interval)
        finally:
            try:
                connections.close_all()  # this thread's connections only
            except Exception as exc:
                logger.warning("retention: could not close its connection: %s", exc)
            seconds = time.monotonic() - began
            if seconds > self.interval:
                logger.warning("retention: a run took %.0f s, over its interval", seconds)
            self._idle.set()  # before more(): the pass it wakes sees the run ended
            more()

    def run_once(self, now: datetime | None = None) -> int:
        """Purge once if this worker holds (or takes) the retention lease; return how many
        jobs were deleted."""
        if not Policy.from_settings().ages():
            return 0  # everything is kept forever: nothing to lead
        if self.leadership is not None and not self.leadership.hold(now):
            return 0
        stopping = self._stopping
        result = purge(alias=self.alias, now=now, max_batches=BATCHES_PER_RUN, stopping=stopping)
        if result.more and not stopping():  # a backlog: go on soon
            self.next_run = time.monotonic() + BACKLOG_PAUSE
        return result.total


def run_once(now: datetime | None = None, alias: str | None = None) -> int:
    """Purge once, without the lease (see ``Retention``); return how many jobs were deleted."""
    return Retention(alias or conf.DATABASE).run_once(now)
