"""The job tables. The state machine lives in ``Job.status``; see ``states.py`` for its edges.

Indexes are designed for the hot path, not added by accident:

* ``wq_job_claim`` covers the claim's whole ``ORDER BY`` (queue, priority DESC, run_after, id) and
  holds ``ready`` rows without a ``flow_key`` only, so it stays small while finished rows pile
  up, and jobs under flow control (limits, fairness, batches) never stand in its way;
* ``wq_job_flow`` holds the ``ready`` rows with a ``flow_key``, grouped by key inside each queue,
  for the flow claim's walk from key to key; ``wq_job_flow_running`` counts a key's running jobs;
* ``wq_job_scheduled`` holds ``scheduled`` rows only, ordered by ``run_after``, for the
  promoter: jobs waiting for a later time live there, not in the claim index, so claims cost
  the same next to a million of them as next to none;
* ``wq_job_lease`` holds ``running`` rows only, for the reaper's scan of expired leases;
* ``wq_job_unique_active`` makes ``unique_key`` unique per task among unfinished jobs (only the
  jobs that have a key are in it);
* ``wq_job_active`` holds unfinished rows only (queue, task, status, run_after), for the stats'
  index-only counts;
* ``wq_job_unique_key`` holds the jobs that have a ``unique_key`` (finished ones too), for the
  admin's search by key;
* ``wq_job_workflow`` indexes ``Job.workflow`` for the jobs that belong to a workflow only (a
  job outside any writes nothing there); ``Dependency.prerequisite`` is an indexed foreign key:
  completing a job finds its dependents through it. Claims never look at ``blocked`` jobs:
  they are not in the claim index.

A plain job (no workflow, no unique key, no flow control) is in three indexes while it waits on
PostgreSQL: the primary key, ``wq_job_claim`` and ``wq_job_active``; ``wq_job_status_finished``
holds ended jobs only there (on SQLite every row: ``PostgreSQLPartialIndex``). Every
change of its status rewrites all the entries of the indexes it is in (``status`` is in their
predicates, so no such update is HOT): an index added here costs every job, not one query.
"""

from __future__ import annotations

import time
from typing import Any

from django.db import models
from django.db.models.functions import Now

from .exceptions import JobNotFinished
from .states import ACTIVE, TERMINAL, CatchUp, RunCondition, Status, WorkflowStatus


class PostgreSQLPartialIndex(models.Index):
    """An index whose ``condition`` applies on PostgreSQL only: elsewhere it holds every row.

    For an index that saves writes by leaving rows out, where only PostgreSQL's planner proves
    the condition from the queries that read it (SQLite proves a partial index usable only from
    a term of the query's own ``WHERE``, never an ``IN`` list from an ``=``)."""

    # Knowing the database here, not behind the driver: an index's SQL is made by Django's
    # schema editor (migrations, SQLite's table remakes), which calls this and nothing of ours.
    def create_sql(self, model: Any, schema_editor: Any, using: str = "", **kwargs: Any) -> Any:
        if self.condition is None or schema_editor.connection.vendor == "postgresql":
            return super().create_sql(model, schema_editor, using, **kwargs)
        whole = self.clone()
        whole.condition = None
        return whole.create_sql(model, schema_editor, using, **kwargs)


class AuditSource(models.TextChoices):
    """The surface an operator's change came through."""

    ADMIN = "admin"
    API = "api"
    CLI = "cli"
    WEBSOCKET = "websocket"
    CODE = "code"


class JobQuerySet(models.QuerySet["Job"]):
    def active(self) -> JobQuerySet:
        return self.filter(status__in=ACTIVE)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=TERMINAL)

    def dead_letters(self) -> JobQuerySet:
        """The dead-letter queue: jobs that ended ``failed``."""
        return self.filter(status=Status.FAILED)


class Workflow(models.Model):
    """A run of related jobs (a chain, a group, a graph of dependencies) and its counters.

    The counters are exact at every commit: each job's ending updates them in the transaction
    that records it. ``output`` is the shape of the result (job ids, nested in lists for
    groups); ``result`` is filled from it when the last job ends.
    """

    name = models.CharField(max_length=200, blank=True, default="")
    status = models.CharField(
        max_length=16, choices=WorkflowStatus.choices, default=WorkflowStatus.RUNNING
    )
    total = models.PositiveIntegerField(default=0)
    open = models.PositiveIntegerField(default=0, help_text="Jobs not finished yet.")
    succeeded = models.PositiveIntegerField(default=0)
    failed = models.PositiveIntegerField(default=0)
    cancelled = models.PositiveIntegerField(default=0)
    output = models.JSONField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "finished_at"], name="wq_workflow_finished")]

    def __str__(self) -> str:
        return f"workflow {self.pk} {self.name} ({self.status})".replace("  ", " ")

    @property
    def is_finished(self) -> bool:
        return self.finished_at is not None

    @property
    def counts(self) -> dict[str, int]:
        """The counters: total, open, succeeded, failed, cancelled."""
        return {
            "total": self.total, "open": self.open, "succeeded": self.succeeded,
            "failed": self.failed, "cancelled": self.cancelled,
        }  # fmt: skip

    def wait(self, timeout: float = 10.0, interval: float = 0.05) -> Workflow:
        """Block until every job of the workflow has ended; return it, refreshed.

        >>> wf = group(a.s(), b.s()).enqueue(); wf.wait(timeout=60).result
        Raises ``JobNotFinished`` when ``timeout`` seconds pass first.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.refresh_from_db()
            if self.is_finished:
                return self
            if time.monotonic() >= deadline:
                raise JobNotFinished(
                    f"workflow {self.pk} is still running after {timeout}s "
                    f"({self.open} of {self.total} jobs open)"
                )
            time.sleep(interval)


class Job(models.Model):
    task_name = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default")
    priority = models.SmallIntegerField(default=0, help_text="Higher runs first, -100..100.")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.READY)
    attempt = models.PositiveIntegerField(
        default=0, help_text="How many times the job was claimed; each claim is a new attempt."
    )
    max_attempts = models.PositiveIntegerField(
        default=3, help_text="The body's attempt budget (the task's); never rewritten by an ending."
    )
    # The budgets (budgets.py): what the body and crashes spent since the last redrive, and the
    # body's attempts before it, for display. A claim (attempt) spends nothing by itself.
    attempts_charged = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Body attempts charged against max_attempts."
    )
    crashes_charged = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Crashes charged against the crash budget."
    )
    redriven_attempts = models.PositiveIntegerField(
        default=0, db_default=0, help_text="Body attempts charged before the redrives."
    )
    lease_seconds = models.PositiveIntegerField(default=60)
    run_after = models.DateTimeField(db_default=Now())
    # NULL, not "", so the column means "no owner" and is never matched by a fence.
    lease_owner = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # NULL keeps jobs without a key out of the partial unique index.
    unique_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    unique_window = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Start of the unique_for window the job was enqueued in: one job per task, "
        "key and window, finished ones included.",
    )
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="A job not started by this time fails without running."
    )
    progress_current = models.BigIntegerField(null=True, blank=True)
    progress_total = models.BigIntegerField(null=True, blank=True)
    progress_message = models.CharField(max_length=500, blank=True, default="")
    progress_details = models.JSONField(
        null=True, blank=True, help_text="The latest progress report's details (a JSON object)."
    )
    result = models.JSONField(null=True, blank=True)
    errors = models.JSONField(default=list, blank=True)
    enqueued_at = models.DateTimeField(db_default=Now())
    started_at = models.DateTimeField(null=True, blank=True)
    claimed_ahead = models.BooleanField(
        default=False, db_default=False,
        help_text="Claimed into a worker's local buffer and not begun, as far as the database "
        "knows (read while it runs): if that worker dies it goes back to ready uncharged.",
    )  # fmt: skip
    finished_at = models.DateTimeField(null=True, blank=True)
    workflow = models.ForeignKey(
        Workflow,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="jobs",
        db_index=False,  # wq_job_workflow: partial, most jobs belong to no workflow
    )
    waiting_on = models.PositiveIntegerField(
        default=0, help_text="Prerequisites not finished yet; a job waiting on any is blocked."
    )
    prerequisites_succeeded = models.PositiveIntegerField(default=0)
    run_condition = models.CharField(
        max_length=16, choices=RunCondition.choices, default=RunCondition.ALL_SUCCEEDED
    )
    input_shape = models.JSONField(
        null=True,
        blank=True,
        help_text="Which prerequisites' results make the first argument (positions of the "
        "job's dependencies, nested in lists); null when the job receives none.",
    )
    # NULL for jobs outside flow control, which the plain claim takes (see flow/keys.py).
    flow_key = models.CharField(  # noqa: DJ001
        max_length=255,
        null=True,
        blank=True,
        help_text="The group the job is claimed in under flow control: its limit key "
        "(concurrency, rate), its fairness key or its batch.",
    )

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-id"]
        # What each codename allows, and which operation needs it: permissions.py.
        permissions = [
            ("view_job_payload", "Can view job arguments and results"),
            ("view_job_traceback", "Can view job tracebacks"),
            ("cancel_job", "Can cancel jobs"),
            ("retry_job", "Can retry and redrive jobs"),
            ("hold_job", "Can hold and release jobs"),
            ("signal_job", "Can send signals to jobs and workflows"),
            ("purge_job", "Can purge finished jobs"),
            ("manage_queue", "Can pause and resume queues"),
            ("manage_schedule", "Can manage schedules"),
        ]
        indexes = [
            models.Index(
                "queue",
                models.F("priority").desc(),
                "run_after",
                "id",
                name="wq_job_claim",
                condition=models.Q(status="ready", flow_key__isnull=True),
            ),
            models.Index(
                "queue",
                "flow_key",
                models.F("priority").desc(),
                "run_after",
                "id",
                name="wq_job_flow",
                condition=models.Q(status="ready", flow_key__isnull=False),
            ),
            models.Index(
                fields=["flow_key"],
                name="wq_job_flow_running",
                condition=models.Q(status="running", flow_key__isnull=False),
            ),
            models.Index(
                fields=["run_after"],
                name="wq_job_scheduled",
                condition=models.Q(status="scheduled"),
            ),
            models.Index(
                fields=["lease_expires_at"],
                name="wq_job_lease",
                condition=models.Q(status="running"),
            ),
            # Retention's batches and the lists of ended jobs. Partial on PostgreSQL, which
            # proves it from `status = 'failed'`: a job writes an entry only when it ends, not
            # when it is enqueued or claimed. Whole on SQLite, whose planner never proves an
            # `IN` list from `status = ?` (its status filters would scan the table).
            PostgreSQLPartialIndex(
                fields=["status", "finished_at"],
                name="wq_job_status_finished",
                condition=models.Q(status__in=["succeeded", "failed", "cancelled"]),
            ),
            # A workflow's jobs (its page, its cascade, the foreign key's checks); partial: a
            # job outside any workflow, the most common kind, writes nothing here.
            models.Index(
                fields=["workflow"],
                name="wq_job_workflow",
                condition=models.Q(workflow__isnull=False),
            ),
            # The admin's search by unique key; partial: most jobs have none.
            models.Index(
                fields=["unique_key"],
                name="wq_job_unique_key",
                condition=models.Q(unique_key__isnull=False),
            ),
            # stats.snapshot(): counts of unfinished jobs per queue, task and status and the
            # oldest ready job, by an index-only scan of unfinished rows (never of finished ones).
            models.Index(
                fields=["queue", "task_name", "status", "run_after"],
                name="wq_job_active",
                condition=models.Q(
                    status__in=["blocked", "scheduled", "ready", "held", "waiting", "running"]
                ),
            ),
        ]
        constraints = [
            # Partial on the key too: NULL keys never conflict, and most jobs have none, so
            # they cost this index nothing on insert and on every change of status.
            models.UniqueConstraint(
                fields=["task_name", "unique_key"],
                name="wq_job_unique_active",
                condition=models.Q(
                    status__in=["blocked", "scheduled", "ready", "held", "waiting", "running"],
                    unique_key__isnull=False,
                ),
            ),
            models.UniqueConstraint(
                fields=["task_name", "unique_key", "unique_window"],
                name="wq_job_unique_window",
                condition=models.Q(unique_window__isnull=False),
            ),
            models.CheckConstraint(
                condition=models.Q(priority__gte=-100, priority__lte=100),
                name="wq_job_priority_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_name}#{self.pk} ({self.status})"

    @property
    def is_finished(self) -> bool:
        return self.status in TERMINAL

    def wait(self, timeout: float = 10.0, interval: float = 0.05) -> Job:
        """Block until the job is finished, refreshing it from the database; return it.

        >>> job = add.enqueue(1, 2); job.wait(timeout=5).result
        3
        Raises ``JobNotFinished`` when ``timeout`` seconds pass first.
        """
        deadline = time.monotonic() + timeout
        while True:
            self.refresh_from_db()
            if self.is_finished:
                return self
            if time.monotonic() >= deadline:
                raise JobNotFinished(
                    f"job {self.pk} ({self.task_name}) is still {self.status} after {timeout}s"
                )
            time.sleep(interval)

    @property
    def progress(self) -> dict[str, Any]:
        return {
            "current": self.progress_current,
            "total": self.progress_total,
            "message": self.progress_message,
        }


class Dependency(models.Model):
    """An edge of a workflow's graph: ``job`` waits for ``prerequisite``.

    ``position`` orders a job's prerequisites as declared (``context.dependencies``, and the
    positions ``Job.input_shape`` names).
    """

    # The unique (job, position) constraint's index serves lookups by job.
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, related_name="prerequisite_edges", db_index=False
    )
    prerequisite = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependent_edges")
    position = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "position"], name="wq_dependency_position")
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} waits for job {self.prerequisite_id}"


class Checkpoint(models.Model):
    """What a job's body finished, kept across its attempts (``context.step``, ``context.sleep``):
    the body runs again after a retry, a sleep or a crash, and what is here answers the calls
    it already made instead of running them again.

    ``kind`` keeps a step's name apart from the body's sleeps, which are named by their order
    in the body (the first sleep is ``"1"``); ``wakes_at`` is when a sleep ends. A wait
    (``context.wait_for_signal``) is named by its order too: ``signal`` is the name it waits
    for, ``wakes_at`` its timeout (or None), and ``result`` stays None while it waits, then
    holds ``{"payload": ...}`` of the signal delivered to it, or ``{"timed_out": true}``.
    """

    class Kind(models.TextChoices):
        STEP = "step", "Step"
        SLEEP = "sleep", "Sleep"
        WAIT = "wait", "Wait for a signal"

    # The unique (job, kind, name) constraint's index serves lookups by job.
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="checkpoints",
                            db_index=False)  # fmt: skip
    kind = models.CharField(max_length=8, choices=Kind.choices, default=Kind.STEP)
    name = models.CharField(max_length=200)
    result = models.JSONField(null=True, blank=True)
    wakes_at = models.DateTimeField(null=True, blank=True)
    signal = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(db_default=Now())
    task_version = models.PositiveIntegerField(default=1)
    """The version of the task (``@task(version=N)``) whose body stored it: a body of another
    version resumes the job only if it lists this one in ``compatible_versions``."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "kind", "name"], name="wq_checkpoint_name")
        ]
        indexes = [
            # The promoter's look-up of waits whose timeout passed: open waits only.
            models.Index(
                fields=["wakes_at"],
                name="wq_checkpoint_wait_timeout",
                condition=models.Q(kind="wait", result__isnull=True, wakes_at__isnull=False),
            )
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name!r} of job {self.job_id}"


class Signal(models.Model):
    """A signal sent to a job or to a workflow (``operations.send_signal``), kept until a wait
    of that name takes it (``context.wait_for_signal``): in the order sent, each delivered to
    one wait once (``delivered_at``, and the job it went to)."""

    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.CASCADE, related_name="signals"
    )
    workflow = models.ForeignKey(
        Workflow, null=True, blank=True, on_delete=models.CASCADE, related_name="signals"
    )
    name = models.CharField(max_length=200)
    payload = models.JSONField(null=True, blank=True)
    sent_at = models.DateTimeField(db_default=Now())
    delivered_at = models.DateTimeField(null=True, blank=True)
    delivered_to = models.BigIntegerField(null=True, blank=True)
    """The job whose wait took it (a workflow's signal goes to one of its jobs)."""

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(job__isnull=False) | models.Q(workflow__isnull=False),
                name="wq_signal_has_target",
            )
        ]

    def __str__(self) -> str:
        target = f"job {self.job_id}" if self.job_id else f"workflow {self.workflow_id}"
        return f"signal {self.name!r} to {target}"


class Queue(models.Model):
    """Run-time controls of a queue. A queue without a row has none (it is not paused)."""

    name = models.CharField(primary_key=True, max_length=100)
    paused_at = models.DateTimeField(
        null=True, blank=True, help_text="Set while the queue is paused: no worker claims from it."
    )
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"queue {self.name}" + (" (paused)" if self.paused else "")

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


class Schedule(models.Model):
    """A cron entry: fires ``task_name`` at each tick of ``cron`` in ``timezone``."""

    name = models.CharField(max_length=200, unique=True)
    task_name = models.CharField(max_length=200)
    cron = models.CharField(max_length=200)
    timezone = models.CharField(max_length=64, default="UTC")
    args = models.JSONField(default=list, blank=True)
    kwargs = models.JSONField(default=dict, blank=True)
    # NULL: the task's own queue.
    queue = models.CharField(max_length=100, null=True, blank=True)  # noqa: DJ001
    enabled = models.BooleanField(default=True)
    catch_up = models.CharField(max_length=8, choices=CatchUp.choices, default=CatchUp.LATEST)
    source = models.CharField(
        max_length=16, default="settings", help_text="settings, task (@task(cron=...)) or runtime"
    )
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["name"]
        indexes = [
            models.Index(
                fields=["next_run_at"], name="wq_schedule_due", condition=models.Q(enabled=True)
            )
        ]

    def __str__(self) -> str:
        return f"schedule {self.name} ({self.cron} {self.timezone})"


class ScheduleRun(models.Model):
    """One fired tick. Unique per (schedule, fire time): a tick fires once, however many
    workers see it due."""

    schedule = models.ForeignKey(Schedule, on_delete=models.CASCADE, related_name="runs")
    fire_at = models.DateTimeField()
    job = models.ForeignKey(
        Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="schedule_runs"
    )
    fired_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["-fire_at"]
        constraints = [
            models.UniqueConstraint(fields=["schedule", "fire_at"], name="wq_schedule_run_tick")
        ]

    def __str__(self) -> str:
        return f"{self.schedule_id} at {self.fire_at.isoformat()}"


class FlowLimit(models.Model):
    """The lock row of one limit key, and the recent starts its rate limit counts.

    Claims of a limited key lock its row first (one claimer per key at a time, the others skip
    the key), then count the key's running jobs and its starts within the rate's period: the
    count is exact because every claimer of the key holds the lock while it counts and writes.
    SQLite has no row locks: there the write lock of the claim's transaction serialises every
    claimer, and a row is made only to hold a rate's starts.
    """

    key = models.CharField(primary_key=True, max_length=255)
    starts = models.JSONField(
        default=list,
        blank=True,
        help_text="[[epoch seconds, jobs started], ...] within the last rate period.",
    )
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["key"]

    def __str__(self) -> str:
        return f"limit {self.key}"


class IdempotencyClaim(models.Model):
    """A side effect done once: ``context.claim(key)`` is True for the first claimer only, until
    ``expires_at``."""

    key = models.CharField(primary_key=True, max_length=255)
    # Not a foreign key: the claim outlives its job's deletion by retention.
    job_id = models.BigIntegerField(null=True, blank=True)
    claimed_at = models.DateTimeField(db_default=Now())
    expires_at = models.DateTimeField()

    class Meta:
        ordering = ["-claimed_at"]
        indexes = [models.Index(fields=["expires_at"], name="wq_claim_expires")]

    def __str__(self) -> str:
        return f"claim {self.key}"


class MaintenanceLease(models.Model):
    """Which worker runs a fleet-wide maintenance service (retention, stats) now: the holder
    renews ``expires_at``; another worker takes the row over once it has expired."""

    name = models.CharField(primary_key=True, max_length=64)
    owner = models.CharField(max_length=64)
    expires_at = models.DateTimeField()
    acquired_at = models.DateTimeField(db_default=Now())

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} held by {self.owner}"


class WorkerProcess(models.Model):
    """A live ``runworker`` process, for dashboards and liveness (``maintenance/liveness.py``):
    a worker whose ``liveness`` token no longer holds is dead, and its jobs are reaped at once."""

    id = models.CharField(primary_key=True, max_length=64)
    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.PositiveIntegerField(help_text="Slots now (autoscaling moves it).")
    concurrency_min = models.PositiveIntegerField(null=True, blank=True)
    concurrency_max = models.PositiveIntegerField(null=True, blank=True)
    requested_concurrency = models.PositiveIntegerField(
        null=True, blank=True, help_text="Slots asked for by operations.scale_worker."
    )
    queue_slots = models.JSONField(
        default=dict, blank=True, help_text="Slots per queue (runworker --queues a:8,b:2)."
    )
    running = models.PositiveIntegerField(
        default=0, help_text="Jobs it was running at its last heartbeat."
    )
    started_at = models.DateTimeField(db_default=Now())
    last_seen_at = models.DateTimeField(db_default=Now())
    liveness = models.CharField(
        max_length=100,
        blank=True,
        default="",
        help_text="What the database's driver checks to tell that the process is gone (the "
        "key of its session's lock, or its pid's start on its host); empty: leases only.",
    )
    liveness_since = models.DateTimeField(
        db_default=Now(),
        help_text="When the process took its liveness token, by the database's clock. On "
        "PostgreSQL a key taken before the server's last start proves nothing (every session "
        "ended then): leases only, until the worker takes its key again.",
    )

    class Meta:
        ordering = ["-started_at"]
        verbose_name_plural = "worker processes"

    def __str__(self) -> str:
        return f"{self.host}:{self.pid} ({self.id})"


class StatsCounter(models.Model):
    """Rolling counters of finished attempts, per minute, queue and task (``stats.snapshot()``).

    Written in the transaction that records the attempts (one statement per completion batch):
    ``name`` is an ending (``succeeded``, ``failed``, ``cancelled``, ``retried``; ``bucket`` 0)
    or a histogram (``run``, ``wait``; ``bucket`` a duration class, see ``stats.histogram``).
    ``shard`` spreads concurrent writers over rows, so workers do not queue on one hot row.
    Rows older than an hour are deleted by the reaper's pass.
    """

    minute = models.DateTimeField()
    queue = models.CharField(max_length=100)
    task_name = models.CharField(max_length=200)
    name = models.CharField(max_length=16)
    bucket = models.SmallIntegerField(default=0)
    shard = models.SmallIntegerField(default=0)
    count = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["minute", "queue", "task_name", "name", "bucket", "shard"],
                name="wq_stats_counter_key",
            )
        ]

    def __str__(self) -> str:
        return f"{self.minute:%H:%M} {self.queue}/{self.task_name} {self.name}[{self.bucket}]"


class AuditRecord(models.Model):
    """One operator's change: who, when, which action, on which jobs, how many it changed.

    Written by ``audit.record()``, in the transaction of the change where it runs in one. The
    user is a snapshot (primary key and username), not a foreign key: the trail outlives
    deleted users, and the app does not depend on the user model's shape.
    """

    created_at = models.DateTimeField(db_default=Now(), db_index=True)
    user_pk = models.CharField(max_length=64, blank=True, default="")
    actor = models.CharField(max_length=150, help_text='A username, "system" or "cli:<os user>".')
    action = models.CharField(max_length=32)
    target = models.JSONField(default=dict, help_text="The ids or the filter the action targeted.")
    changed = models.PositiveIntegerField(default=0)
    source = models.CharField(max_length=16, choices=AuditSource.choices)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.actor} {self.action} ({self.changed} changed, {self.source})"
