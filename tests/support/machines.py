"""Building blocks of the state-machine tests (``tests/chaos/test_*machine*.py``): simulated
workers, the clock moved by shifting every stored time, and the hypothesis sizes."""

from __future__ import annotations

import dataclasses
import os
from datetime import timedelta

from django.db.models import F
from hypothesis import HealthCheck, settings

from django_workqueue.attempt.lease import RunningJob
from django_workqueue.models import Job, WorkerProcess, Workflow

FULL = os.environ.get("WORKQUEUE_CHAOS") == "full"

JOB_TIMES = (
    "run_after", "lease_expires_at", "deadline", "started_at", "enqueued_at", "finished_at",
    "cancel_requested_at",
)  # fmt: skip
WORKFLOW_TIMES = ("created_at", "finished_at", "cancel_requested_at")


@dataclasses.dataclass(slots=True, repr=False)
class Owner:
    """A simulated worker process: its id, the queues it serves, the leases it holds."""

    id: str
    queues: tuple[str, ...]
    running: dict[int, RunningJob] = dataclasses.field(default_factory=dict)
    crashed: bool = False

    def __repr__(self) -> str:
        return f"Owner({self.id[:8]}{', crashed' if self.crashed else ''})"


def shift_stored_times(alias: str, seconds: int) -> None:
    """Move every stored timestamp ``seconds`` into the past, one UPDATE per table: the same,
    for an engine that reads time only from the database, as its clock moving forward (it
    compares stored times with the clock, or with each other, and differences between stored
    times do not change)."""
    shift = timedelta(seconds=seconds)
    Job.objects.using(alias).update(**{name: F(name) - shift for name in JOB_TIMES})
    Workflow.objects.using(alias).update(**{name: F(name) - shift for name in WORKFLOW_TIMES})
    WorkerProcess.objects.using(alias).update(
        started_at=F("started_at") - shift, last_seen_at=F("last_seen_at") - shift
    )


def machine_settings(*, examples: int, steps: int) -> settings:
    """Hypothesis settings of a state-machine test: no example database (a failure prints its
    ``@reproduce_failure`` blob instead), no deadline, slow examples allowed."""
    return settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
