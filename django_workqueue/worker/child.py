"""A process slot's child: it imports the project once, then runs the jobs its worker hands
it, one at a time, and hands each outcome back (``processes.py`` is the worker's side;
``spawned.py`` starts it).

The child runs the same attempt runner as a slot thread (``attempt.run``: the task, the attempt
middlewares, the classification of its ending; a ``SystemExit`` its body raises is the body's
failure, reported like any other, not the child's exit) and writes no job state: the worker records
every outcome, renews the leases and decides what is claimed. The one exception is an
``atomic=True`` task, whose success must commit with the body's own writes: the child records
it inside the body's transaction, fenced by the worker's lease exactly as a slot thread does.

Messages are JSON (``wire.py``) over two socket pairs private to the worker and the child: the
main thread reads its jobs from the job channel itself and writes their outcomes back on it; a
thread reads the control channel, for requests to abort the running job. Job arguments and
results inside them stay the JSON text the database holds.

The child ignores SIGINT (a Ctrl-C at the terminal is the worker's to handle) and runs in its
own session. When its worker goes away (either channel closes), it exits at once: the leases of
its job lapse and the reaper recovers the job, as for any worker that died.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import threading
from typing import Any

from django.db import connections

from ..attempt.asyncloop import AsyncLoop
from ..attempt.connections import close_unusable_connections, serving, tidy_connections
from ..attempt.ending import unstorable
from ..attempt.run import load_middlewares, run
from ..conf import workqueue_settings as conf
from ..context import AbortReason, JobContext
from ..db import driver_for
from ..outcomes import Outcome
from ..registry import find_task
from . import wire

logger = logging.getLogger("django_workqueue.worker")


class _Identity:
    """What ``connections.serving`` needs to name the child's database sessions after its
    worker (``workqueue:<worker id>``), as the worker's own threads are named."""

    def __init__(self, worker_id: str, alias: str, driver: Any) -> None:
        self.id = worker_id
        self.alias = alias
        self.driver = driver
        self.session_name = f"workqueue:{worker_id}"


class _Parent:
    """The child's ends of its channels: the main thread reads jobs and sends outcomes on
    ``jobs``; a thread reads aborts from ``control``. Every send goes out whole under a lock
    (an async task's progress is sent from the event loop's thread)."""

    def __init__(self, jobs: wire.Channel, control: wire.Channel) -> None:
        self.jobs = jobs
        self.control = control
        self._send_lock = threading.Lock()
        self._abort_lock = threading.Lock()
        self._current: Any = None  # the running job's JobContext
        # Aborts that arrived before their attempt began here, by (job id, attempt): one that
        # arrives after its attempt ended must not stop a later attempt of the same job.
        self._early: dict[tuple[int, int], str] = {}

    def send(self, message: list[Any]) -> None:
        with self._send_lock:
            try:
                self.jobs.send(message)
            except OSError:  # the worker is gone (it stopped while this child started)
                os._exit(0)

    def send_outcome(
        self, job_id: int, outcome: Outcome | None, pending: bool, measure: bool = True
    ) -> None:
        """Hand the job's outcome back; one that cannot be sent (its result or its error
        holds text JSON cannot carry) ends the job as a failure that says why, as an outcome
        the database refuses does in a slot thread. ``measure``: report this process's
        resident memory with it (the worker replaces children past a memory limit)."""
        resident = resident_bytes() if measure else None
        fields = wire.outcome_to_wire(outcome) if outcome is not None else None
        try:
            self.send(["done", job_id, fields, pending, resident])
        except (TypeError, ValueError) as exc:  # nothing was sent
            outcome = unstorable(outcome, exc) if outcome is not None and pending else None
            fields = wire.outcome_to_wire(outcome) if outcome is not None else None
            self.send(["done", job_id, fields, pending, resident])

    def next_job(self) -> tuple[Any, str, int, bool] | None:
        """The next job handed to this child (job, owner, connection generation, whether to
        measure memory after it), or None when told to exit; exits if the worker is gone."""
        try:
            message = self.jobs.receive()
        except (EOFError, OSError):
            os._exit(0)  # the worker is gone: so is the job's lease; stop at once
        if message[0] != "run":
            return None
        return wire.job_from_wire(message[1]), message[2], message[3], bool(message[4])

    def begin(self, context: Any) -> None:
        """``context``'s job runs now: an abort sent for it before this point applies."""
        with self._abort_lock:
            self._current = context
            reason = self._early.pop((context.job.id, context.job.attempt), None)
            self._early.clear()  # any other was for a job that is over
        if reason is not None:
            context.abort(AbortReason(reason))

    def end(self) -> None:
        with self._abort_lock:
            self._current = None

    def read_control(self) -> None:
        while True:
            try:
                message = self.control.receive()
            except (EOFError, OSError):
                os._exit(0)  # the worker is gone: so is the job's lease; stop at once
            if message[0] == "abort":
                self._abort(message[1], message[2], message[3])

    def _abort(self, job_id: int, attempt: int, reason: str) -> None:
        with self._abort_lock:
            context = self._current
            if context is None or (context.job.id, context.job.attempt) != (job_id, attempt):
                # The worker sends a job, then may abort it at once: the abort can overtake
                # the job, which then begins aborted.
                self._early[(job_id, attempt)] = reason
                return
        context.abort(AbortReason(reason))


def resident_bytes() -> int:
    """This process's resident memory now (Linux: /proc/self/statm), or its peak where the
    current figure cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # bytes on macOS, KiB else


def serve(jobs: wire.Channel, control: wire.Channel, worker_id: str) -> None:
    """Run jobs from ``jobs`` until told to exit."""
    driver = driver_for(conf.DATABASE)
    serving.worker = _Identity(worker_id, conf.DATABASE, driver)
    load_middlewares()
    parent = _Parent(jobs, control)
    reader = threading.Thread(target=parent.read_control, name="workqueue-child-control")
    reader.daemon = True
    reader.start()
    loop: AsyncLoop | None = None
    connections_generation = 0

    def on_progress(context: JobContext) -> None:
        parent.send(["progress", context.job.id, context.progress])

    parent.send(["ready", os.getpid()])
    while True:
        handed = parent.next_job()
        if handed is None:
            break
        job, owner, generation, measure = handed
        if generation != connections_generation:  # the worker lost its connection: so may we
            connections_generation = generation
            close_unusable_connections()
        context = JobContext(job, owner=owner, driver=driver, on_progress=on_progress)
        parent.begin(context)
        # The last word before the body: a child that dies before the worker reads this
        # costs the job nothing (the worker hands it to a fresh child).
        parent.send(["began", job.id])
        outcome, pending = None, False
        try:
            if loop is None and _is_async(job.task_name):
                loop = AsyncLoop()
            outcome, pending = run(job, context, driver, loop)
            if outcome is not None and pending:
                outcome.encoded()  # here, not in the worker that batches them
        except Exception:
            logger.exception("job %s: the worker's child failed to run it", job.id)
        finally:
            parent.end()
            try:
                tidy_connections(driver.alias)
            except Exception:
                logger.exception("job %s: could not tidy the child's connections", job.id)
        parent.send_outcome(job.id, outcome, pending, measure)
    if loop is not None:
        loop.close()
    connections.close_all()


def _is_async(task_name: str) -> bool:
    task = find_task(task_name)
    return bool(task and task.spec.is_async)
