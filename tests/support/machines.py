"""Building blocks of the state-machine tests (``tests/chaos/test_*machine*.py``): simulated
workers, the clock moved by shifting every stored time, and the hypothesis sizes."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
from datetime import timedelta
from typing import Any

from django.db import connections
from django.db.models import F
from hypothesis import HealthCheck, settings

from django_workqueue import process_identity
from django_workqueue.attempt.lease import RunningJob
from django_workqueue.db import pg_liveness
from django_workqueue.db.postgresql import listen_params
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


def machine_settings(*, examples: int, steps: int, derandomize: bool = False) -> settings:
    """Hypothesis settings of a state-machine test: no example database (a failure prints its
    ``@reproduce_failure`` blob instead), no deadline, slow examples allowed; ``derandomize``:
    the same examples at every run."""
    return settings(
        derandomize=derandomize,
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )


class LivenessToken:
    """What a simulated worker's death is seen by, as a real worker's is: on PostgreSQL its
    session's advisory lock (``pg_liveness.hold`` on a connection of its own), on SQLite a
    process of this host (its pid's start). ``register`` writes the worker's registry row with
    the token; ``end`` kills it (the connection closed, the process killed), and the reaper's
    next pass sees the worker gone."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.connection: Any = None
        self.process: subprocess.Popen[bytes] | None = None
        if connections[alias].vendor == "postgresql":
            import psycopg

            params = listen_params(connections[alias], None)
            self.connection = psycopg.connect(**params, autocommit=True)
            held = pg_liveness.hold(self.connection)
            self.pid, self.token = os.getpid(), held.value if held else ""
        else:
            self.process = subprocess.Popen(["sleep", "600"])
            self.pid = self.process.pid
            self.token = ""
            while not self.token:  # /proc shows the child at once, its start a moment later
                self.token = process_identity.token_of(self.pid) or ""
        assert self.token, "no liveness token could be had"

    def register(self, worker_id: str, queues: tuple[str, ...]) -> None:
        WorkerProcess.objects.using(self.alias).create(
            id=worker_id, host=socket.gethostname(), pid=self.pid, queues=list(queues),
            concurrency=1, liveness=self.token,
        )  # fmt: skip

    def end(self) -> None:
        if self.connection is not None:
            self.connection.close()
        if self.process is not None:
            self.process.kill()
            self.process.wait()
