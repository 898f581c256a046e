"""The process pool (``runworker --pool processes``): each slot thread drives one child process.

Threads suit I/O-bound jobs; CPU-bound jobs serialise on one interpreter lock, and a job stuck
in C code cannot be stopped in a thread. With the process pool the worker keeps everything it
does with threads (claims, heartbeat, outcome batches, NOTIFY, shutdown), and each slot thread
hands its jobs to a child process of its own (``child.py``), one at a time. While the child
runs a job, its slot thread:

- passes the job's progress reports on to the worker, which writes them as usual;
- passes on every reason to stop (``cancel_job``, a ``timeout``, the shutdown) as an abort,
  which the child's ``JobContext`` raises as it would in a thread;
- stops the child at once when the job is no longer this worker's (its lease was lost, it was
  completed elsewhere or deleted) or was given back at the end of a shutdown's grace: a
  process, unlike a thread, can be stopped, so the attempt never runs on beside the next one;
- kills the child once the task's ``hard_timeout`` has passed (SIGTERM, then SIGKILL after
  ``KILL_GRACE_SECONDS``): the attempt fails with ``JobTimeout``;
- notices the child dying on its own (a crash in C code, the OOM killer, ``os._exit``): the
  attempt fails with ``ProcessDied``, saying how it died.

Either way the slot gets a fresh child and the job is retried under its own policy, so a poison
pill ends in the dead-letter queue after ``max_attempts``. After a job, a child that has run
``max_jobs_per_child`` jobs or holds more than ``max_memory_per_child`` resident is replaced;
the replacement starts at once, so its start-up overlaps the wait for the next job.

A child acknowledges each job (``began``) just before its body begins. One that ends before the
acknowledgement died idle (the OOM killer, a kill from outside), before or after the job was
sent: the body never began there, so its death costs the job nothing (``budgets.py``) and the
job goes to a fresh child. Asking the process before sending cannot tell: a killed child whose
other threads are still exiting shows as a zombie in /proc, yet ``waitpid`` does not report it
and its socket still takes the job until its last thread has gone. A replacement child that
cannot start (the project fails to import in it, or not within ``START_TIMEOUT_SECONDS``) never
began the job either: another fresh child gets it, uncharged; after ``HANDOVER_TRIES`` such
children in a row the job goes back to ready and the worker stops, as it stops when its first
children cannot start.

Children are fresh interpreters (``python -m django_workqueue.worker.spawned``), not forks of a
worker that already runs threads and holds database connections: they import the project from
``DJANGO_SETTINGS_MODULE`` and the worker's ``sys.path``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured

from ..attempt import ending
from ..context import AbortReason
from ..db import ClaimedJob, Outcome
from ..exceptions import JobTimeout, ProcessDied
from ..registry import find_task
from . import wire

if TYPE_CHECKING:
    from ..attempt.lease import RunningJob
    from ..context import JobContext

logger = logging.getLogger("django_workqueue.worker")

KILL_GRACE_SECONDS = 2.0
"""How long a child past its hard timeout has between SIGTERM and SIGKILL."""
RETIRE_GRACE_SECONDS = 5.0
"""How long a replaced child has to exit after its last job before it is killed (a thread one of
its jobs left running keeps its interpreter from exiting)."""
START_TIMEOUT_SECONDS = 120.0
"""How long a child may take to import the project before it counts as failed to start."""
HANDOVER_TRIES = 3
"""How many children in a row may end before acknowledging a job before the slot gives the job
back, uncharged (something keeps killing this worker's children: its log says so)."""
_CHECK_INTERVAL = 0.1  # how often a waiting slot looks for an abort to pass on
# Looked up by name: Windows lacks SIGHUP and SIGKILL, and the package must import there too.
_STOP_SIGNALS = frozenset(
    getattr(signal, name) for name in ("SIGTERM", "SIGINT", "SIGHUP") if hasattr(signal, name)
)
POSIX = os.name == "posix"
"""Whether this system can run a process pool: its children inherit a socket (``pass_fds``),
run in a session of their own and are stopped with POSIX signals."""


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ChildLimits:
    """What ``runworker --pool processes`` was given (None: no limit)."""

    max_jobs: int | None = None
    """Replace a child after it ran this many jobs (``--max-jobs-per-child``)."""
    max_memory_bytes: int | None = None
    """Replace a child whose resident memory passed this after a job
    (``--max-memory-per-child``)."""
    hard_timeout: float | None = None
    """The hard timeout of tasks that give none (``--hard-timeout``)."""
    verbosity: int = 1
    """The children's log level, as runworker's ``--verbosity``."""


def require_settings_module() -> None:
    """Children load the project's settings by name: refuse a process pool without one, and
    on a system that cannot run one."""
    if not POSIX:
        raise ImproperlyConfigured(
            f"the process pool runs on POSIX systems only (Linux, macOS), not on {sys.platform}: "
            f"run the thread pool (--pool threads)"
        )
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        raise ImproperlyConfigured(
            "the process pool starts its children from DJANGO_SETTINGS_MODULE, which is not "
            "set (settings.configure() cannot be repeated in another process): set it, or run "
            "the thread pool (--pool threads)"
        )


class Child:
    """One child process and the worker's end of its socket."""

    def __init__(self, worker_id: str, limits: ChildLimits) -> None:
        self.conn, jobs = wire.channel_pair()
        self.control, control = wire.channel_pair()
        # The worker's import path, so that the child finds what the worker found (manage.py's
        # directory, --pythonpath).
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
        try:
            self.process = subprocess.Popen(  # noqa: S603 - our interpreter, our module
                [sys.executable, "-m", "django_workqueue.worker.spawned", str(jobs.fileno()),
                 str(control.fileno()), worker_id, str(limits.verbosity), str(os.getpid())],
                pass_fds=(jobs.fileno(), control.fileno()), env=env, stdin=subprocess.DEVNULL,
                start_new_session=True,  # a Ctrl-C at the terminal reaches the worker only
            )  # fmt: skip
        except BaseException:
            self.close()
            raise
        finally:
            jobs.close()
            control.close()
        self.pid = self.process.pid
        self.measure = limits.max_memory_bytes is not None
        """Whether the child reports its resident memory after each job (only a memory limit
        needs it: reading it costs a system call or three)."""
        self.ready = False
        self.jobs_run = 0
        self.resident_bytes = 0

    def wait_ready(self, timeout: float = START_TIMEOUT_SECONDS) -> None:
        """Wait for the child to have imported the project; ``ProcessDied`` if it could not."""
        if self.ready:
            return
        arrived = False
        try:
            arrived = self.conn.poll(timeout)
            if arrived and self.conn.receive()[0] == "ready":
                self.ready = True
                return
        except (EOFError, OSError, ValueError):
            pass  # it closed its end: it is exiting
        if not arrived:
            self.kill()
            raise ProcessDied(
                f"the worker's child process (pid {self.pid}) did not start within "
                f"{timeout:.0f}s (importing the project took too long, or it hangs at import)"
            )
        try:
            self.process.wait(KILL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            self.kill()
        raise ProcessDied(
            f"the worker's child process (pid {self.pid}) {self.how_it_died()} before it was "
            f"ready; the worker's log above shows why (an import error in the project?)"
        )

    def send(self, message: list[Any], channel: wire.Channel | None = None) -> bool:
        """Send ``message`` on the job channel (or ``channel``); False if the child is gone."""
        try:
            (channel or self.conn).send(message)
        except OSError:
            return False
        return True

    def abort(self, job_id: int, attempt: int, reason: str) -> bool:
        """Ask the child to abort this attempt of a job, which it runs (or is about to)."""
        return self.send(["abort", job_id, attempt, reason], self.control)

    def how_it_died(self) -> str:
        """How the (ended) process ended: its signal or its exit code."""
        code = self.process.wait()
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"was killed by signal {name}"
        return f"exited with code {code}"

    def stopped_by_signal(self) -> bool:
        code = self.process.poll()
        return code is not None and code < 0 and -code in _STOP_SIGNALS

    def kill(self) -> None:
        """SIGTERM, then SIGKILL after the grace; waits for the process to end."""
        for sig, wait in ((signal.SIGTERM, KILL_GRACE_SECONDS), (signal.SIGKILL, None)):
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)
            try:
                self.process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.close()

    def retire(self) -> None:
        """Ask the child to exit after its current job (it closes its connections first)."""
        self.send(["exit"])

    def close(self) -> None:
        self.conn.close()
        self.control.close()


class _Ended(Exception):
    """The child ended before handing back an outcome (``outcome`` stands for it)."""

    def __init__(self, outcome: Outcome | None) -> None:
        self.outcome = outcome


class _NotBegun(Exception):
    """The child ended before it acknowledged the job: the job's body never began in it.

    ``failed_to_start`` says why when the child never became ready (``Child.wait_ready``):
    the project could not be imported in it, or not in time."""

    def __init__(self, failed_to_start: ProcessDied | None = None) -> None:
        super().__init__(str(failed_to_start or "ended before it began the job"))
        self.failed_to_start = failed_to_start


@dataclasses.dataclass(frozen=True)
class SlotHost:
    """What a process slot needs of its worker, and nothing more."""

    worker_id: str
    stopping: threading.Event
    """Set once the worker stops: a child that ended then was stopped with it."""
    stop: Callable[[], None]
    """Stop the worker (its children cannot start any more)."""
    generation: Callable[[], int]
    """The worker's database generation: bumped when it lost its connection, so that a child
    drops its own connections before the next job."""
    on_progress: Callable[[JobContext], None]
    """A job's progress report, handed to the worker's completer."""


class ProcessSlot:
    """The executor of one slot thread of a process pool: its child, replaced as needed."""

    def __init__(self, host: SlotHost, pool: ProcessPool, child: Child | None = None) -> None:
        self.host = host
        self.pool = pool
        self.limits = pool.limits
        self.child = child or Child(host.worker_id, self.limits)
        self._retired: list[Child] = []

    def run(self, job: ClaimedJob, item: RunningJob) -> tuple[Outcome | None, bool]:
        """Run ``job`` in the child; return (outcome, whether it still has to be written)."""
        self._reap()
        try:
            return self._run(job, item)
        except _Ended as ended:
            self._replace_child()
            return ended.outcome, ended.outcome is not None
        finally:
            self._replace_if_spent()

    def close(self) -> None:
        """The slot retires: so does its child."""
        self.child.retire()
        self._retired.append(self.child)
        for child in self._retired:
            try:
                child.process.wait(KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
            child.close()

    def _run(self, job: ClaimedJob, item: RunningJob) -> tuple[Outcome | None, bool]:
        """Hand ``job`` to the slot's child, or to a fresh one while children end before
        acknowledging it (at most ``HANDOVER_TRIES``)."""
        not_started = 0  # children in a row that never became ready
        last_failure: ProcessDied | None = None
        for handed in range(HANDOVER_TRIES):
            if handed:
                self._replace_child()
            try:
                return self._hand_over(job, item)
            except _NotBegun as not_begun:
                child = self.child
                if self.host.stopping.is_set() and child.stopped_by_signal():
                    raise _Ended(self._died(job, child)) from None  # released
                if not_begun.failed_to_start is not None:
                    not_started += 1
                    last_failure = not_begun.failed_to_start
                    logger.warning(
                        "worker %s: %s; job %s is not charged for it",
                        self.host.worker_id, not_begun.failed_to_start, job.id,
                    )  # fmt: skip
                    continue
                logger.warning(
                    "worker %s: its child process %s %s before it began job %s; the job is "
                    "not charged for it",
                    self.host.worker_id, child.pid, child.how_it_died(), job.id,
                )  # fmt: skip
        if not_started == HANDOVER_TRIES:
            # Nothing this worker claims could run: stop it, as at its start (``ProcessPool``).
            logger.error(
                "job %s: %s child processes in a row could not start; it goes back to ready "
                "uncharged and worker %s stops (fix the project's import, the lines above say "
                "why, then start the worker again)",
                job.id, HANDOVER_TRIES, self.host.worker_id,
            )  # fmt: skip
            if self.pool.failed is None:
                self.pool.failed = last_failure  # runworker exits with it (status 1)
            self.host.stop()
        else:
            logger.error(
                "job %s: %s child processes in a row ended before they began it; it goes back "
                "to ready uncharged (something kills this worker's children: the OOM killer? "
                "see the lines above)",
                job.id, HANDOVER_TRIES,
            )  # fmt: skip
        raise _Ended(ending.released(job))

    def _hand_over(self, job: ClaimedJob, item: RunningJob) -> tuple[Outcome | None, bool]:
        """Run ``job`` in the slot's child; ``_NotBegun`` if the child ends before it
        acknowledged the job."""
        child, context = self.child, item.context
        if not child.ready:  # a fresh child imports the project: not the job's time
            item.started = math.inf
            try:
                child.wait_ready()
            except ProcessDied as exc:  # the job never began: not its doing (budgets.py)
                raise _NotBegun(exc) from None
            finally:
                item.started = time.monotonic()
        if context.lease_lost or context.released:  # while it waited for the child
            logger.info("job %s: %s; not beginning it", job.id, context._why())
            return None, False
        if not child.send(
            ["run", wire.job_to_wire(job), context.owner, self.host.generation(),
             child.measure]
        ):  # fmt: skip
            raise _NotBegun
        began = False  # whether the child acknowledged the job (its body may have begun)
        task = find_task(job.task_name)
        hard_timeout = (task.spec.hard_timeout if task else None) or self.limits.hard_timeout
        atomic = bool(task and task.spec.atomic)
        started = time.monotonic()
        forwarded = False
        while True:
            wait = _CHECK_INTERVAL
            if hard_timeout is not None:
                wait = min(wait, max(0.0, started + hard_timeout - time.monotonic()))
            try:
                message = child.conn.receive() if child.conn.poll(wait) else None
            except (EOFError, OSError, ValueError):
                if not began:
                    raise _NotBegun from None
                raise _Ended(self._died(job, child)) from None
            if message is not None:
                if message[0] == "began":
                    began = True
                elif message[0] == "done":
                    _, _, fields, pending, resident = message
                    child.jobs_run += 1
                    if resident is not None:
                        child.resident_bytes = resident
                    return (wire.outcome_from_wire(fields) if fields else None), pending
                elif message[0] == "progress":  # then the checks below, even under a flood
                    current, total, text, details = message[2]
                    context.progress = (current, total, text, details)
                    self.host.on_progress(context)
            if context.released:  # given back at shutdown: it must not run on beside its retry
                child.kill()
                raise _Ended(ending.released(job))
            if context.lease_lost and not (
                # An atomic task's child records its success itself: the heartbeat may see
                # that commit before the child's outcome arrives. Nothing to stop then.
                atomic and context.abort_reason == AbortReason.COMPLETED_ELSEWHERE
            ):  # another worker runs it now: this attempt must not go on
                logger.info(
                    "job %s: %s; stopping its process %s", job.id, context._why(), child.pid
                )
                child.kill()
                raise _Ended(None)
            if context.abort_reason is not None and not forwarded:
                forwarded = child.abort(job.id, job.attempt, context.abort_reason.value)
            if hard_timeout is not None and time.monotonic() - started >= hard_timeout:
                logger.warning(
                    "job %s (%s): past its hard timeout of %ss; killing its process %s",
                    job.id, job.task_name, hard_timeout, child.pid,
                )  # fmt: skip
                child.kill()
                if not began:  # a child stuck before it began the job (a thread's C code?)
                    raise _NotBegun
                late = JobTimeout(
                    f"{job.task_name} ran past its hard timeout of {hard_timeout}s; its process "
                    f"(pid {child.pid}) was killed"
                )
                raise _Ended(self._failed(job, late))

    def _died(self, job: ClaimedJob, child: Child) -> Outcome:
        how = child.how_it_died()
        if self.host.stopping.is_set() and child.stopped_by_signal():
            # Stopped with the worker (a service manager signals the whole group): the job
            # goes back to ready uncharged, as the shutdown gives back every unfinished job.
            logger.info("job %s: its process %s stopped with the worker", job.id, child.pid)
            return ending.released(job)
        died = ProcessDied(
            f"the process running {job.task_name} (pid {child.pid}) {how} before the job "
            f"ended (a crash in C code, the kernel's OOM killer, os._exit or a kill from "
            f"outside)"
        )
        return self._failed(job, died)

    def _failed(self, job: ClaimedJob, exc: BaseException) -> Outcome:
        return ending.not_run(job, find_task(job.task_name), exc)

    def _replace_child(self) -> None:
        """The slot's child ended (or was killed): start another."""
        self.child.close()
        self.child = Child(self.host.worker_id, self.limits)

    def _replace_if_spent(self) -> None:
        child, limits = self.child, self.limits
        if not child.ready:
            return
        why = None
        if limits.max_jobs is not None and child.jobs_run >= limits.max_jobs:
            why = f"it ran {child.jobs_run} jobs (--max-jobs-per-child {limits.max_jobs})"
        elif limits.max_memory_bytes is not None and child.resident_bytes > limits.max_memory_bytes:
            why = (
                f"it holds {child.resident_bytes / 2**20:.0f} MiB "
                f"(--max-memory-per-child {limits.max_memory_bytes // 2**20})"
            )
        if why is None:
            return
        logger.info(
            "worker %s: replacing child process %s: %s", self.host.worker_id, child.pid, why
        )
        child.retire()
        self._retired.append(child)
        threading.Thread(
            target=_end_retired, args=(child,), name=f"workqueue-retire-{child.pid}", daemon=True
        ).start()
        self.child = Child(self.host.worker_id, limits)

    def _reap(self) -> None:
        """Collect retired children that have exited (no zombies left behind)."""
        for child in list(self._retired):
            if child.process.poll() is not None:
                child.close()
                self._retired.remove(child)


def _end_retired(child: Child) -> None:
    """Give a replaced child ``RETIRE_GRACE_SECONDS`` to exit, then kill it: a replacement
    must never leave the old process (and the memory it was replaced for) behind."""
    try:
        child.process.wait(RETIRE_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
        logger.warning(
            "child process %s did not exit within %ss of being replaced (a thread one of its "
            "jobs started keeps its interpreter alive?); killing it",
            child.pid, RETIRE_GRACE_SECONDS,
        )  # fmt: skip
        child.kill()
    child.close()


class ProcessPool:
    """The children of one worker, started together at its start, then one per slot thread.

    The worker claims nothing until every first child has imported the project, but it does
    not wait for them to register, beat and reap: a worker restarted after a crash recovers
    orphaned jobs while its children start. A project the children cannot import stops the
    worker (``failed`` says why) before it has claimed a single job; so do replacement children
    that cannot start, ``HANDOVER_TRIES`` in a row (``ProcessSlot._run``).
    """

    def __init__(self, limits: ChildLimits) -> None:
        require_settings_module()
        self.limits = limits
        self.ready = threading.Event()
        self.failed: ProcessDied | None = None
        self._spares: queue.SimpleQueue[Child] = queue.SimpleQueue()

    def start(self, worker_id: str, count: int, on_done: Callable[[bool], None]) -> None:
        """Start ``count`` children; ``on_done(ok)`` is called once each is ready, or once one
        could not start (the others are then stopped)."""
        children = [Child(worker_id, self.limits) for _ in range(count)]
        for child in children:
            self._spares.put(child)

        def wait() -> None:
            try:
                for child in children:
                    child.wait_ready()
            except ProcessDied as exc:
                self.failed = exc
                for child in children:
                    child.kill()
                on_done(False)
                return
            self.ready.set()
            on_done(True)

        threading.Thread(target=wait, name="workqueue-children-start", daemon=True).start()

    def slot(self, host: SlotHost) -> ProcessSlot:
        """The executor of a new slot thread, with a child started at the worker's start if
        one is left."""
        try:
            child = self._spares.get_nowait()
        except queue.Empty:
            child = None
        return ProcessSlot(host, self, child)
