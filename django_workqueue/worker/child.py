"""A process slot's child: it imports the project once, then runs the jobs its worker hands
it, one at a time, and hands each outcome back (``processes.py`` is the worker's side;
``spawned.py`` starts it).

The child runs the same pipeline as a slot thread (``execution.run``: the task, the attempt
middlewares, the classification of its ending) and writes no job state: the worker records
every outcome, renews the leases and decides what is claimed. The one exception is an
``atomic=True`` task, whose success must commit with the body's own writes: the child records
it inside the body's transaction, fenced by the worker's lease exactly as a slot thread does.

Messages are JSON (``wire.py``) over a socket pair private to the worker and the children it
started; job arguments and results inside them stay the JSON text the database holds.

The child ignores SIGINT (a Ctrl-C at the terminal is the worker's to handle) and runs in its
own session. When its worker goes away (the socket closes), it exits at once: the leases of its
job lapse and the reaper recovers the job, as for any worker that died.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import resource
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from django.db import connections

from ..conf import workqueue_settings as conf
from ..context import AbortReason, JobContext
from ..db import driver_for
from ..outcomes import Outcome
from ..registry import find_task
from . import wire
from .asyncloop import AsyncLoop
from .connections import close_unusable_connections, serving, tidy_connections
from .execution import load_middlewares, run, unstorable

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
    """The child's end of the socket: a reader thread takes jobs and aborts while the main
    thread runs a job; every send goes out whole under one lock."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.jobs: queue.SimpleQueue[tuple[Any, str, int] | None] = queue.SimpleQueue()
        self.current: Any = None  # the running job's JobContext
        self._send_lock = threading.Lock()

    def send(self, message: list[Any]) -> None:
        with self._send_lock:
            try:
                wire.send(self.conn, message)
            except OSError:  # the worker is gone (it stopped while this child started)
                os._exit(0)

    def send_outcome(self, job_id: int, outcome: Outcome | None, pending: bool) -> None:
        """Hand the job's outcome back; one that cannot be sent (its result or its error
        holds text JSON cannot carry) ends the job as a failure that says why, as an outcome
        the database refuses does in a slot thread."""
        try:
            fields = wire.outcome_to_wire(outcome) if outcome is not None else None
            json.dumps(fields)
        except (TypeError, ValueError) as exc:
            outcome = unstorable(outcome, exc) if outcome is not None and pending else None
            fields = wire.outcome_to_wire(outcome) if outcome is not None else None
        self.send(["done", job_id, fields, pending, resident_bytes()])

    def read_forever(self) -> None:
        while True:
            try:
                message = wire.receive(self.conn)
            except (EOFError, OSError):
                os._exit(0)  # the worker is gone: so is the job's lease; stop at once
            kind = message[0]
            if kind == "run":
                self.jobs.put((wire.job_from_wire(message[1]), message[2], message[3]))
            elif kind == "abort":
                self._abort(message[1], message[2])
            elif kind == "exit":
                self.jobs.put(None)

    def _abort(self, job_id: int, reason: str) -> None:
        context = self.current
        if context is not None and context.job.id == job_id:
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


def serve(conn: Connection, worker_id: str) -> None:
    """Run jobs from ``conn`` until told to exit."""
    driver = driver_for(conf.DATABASE)
    serving.worker = _Identity(worker_id, conf.DATABASE, driver)
    load_middlewares()
    parent = _Parent(conn)
    threading.Thread(target=parent.read_forever, name="workqueue-child-reader", daemon=True).start()
    loop: AsyncLoop | None = None
    connections_generation = 0

    def on_progress(context: JobContext) -> None:
        parent.send(["progress", context.job.id, context.progress])

    parent.send(["ready", os.getpid()])
    while True:
        handed = parent.jobs.get()
        if handed is None:
            break
        job, owner, generation = handed
        if generation != connections_generation:  # the worker lost its connection: so may we
            connections_generation = generation
            close_unusable_connections()
        context = JobContext(job, owner=owner, driver=driver, on_progress=on_progress)
        parent.current = context
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
            parent.current = None
            try:
                tidy_connections()
            except Exception:
                logger.exception("job %s: could not tidy the child's connections", job.id)
        parent.send_outcome(job.id, outcome, pending)
    if loop is not None:
        loop.close()
    connections.close_all()


def _is_async(task_name: str) -> bool:
    task = find_task(task_name)
    return bool(task and task.spec.is_async)
