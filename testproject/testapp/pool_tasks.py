"""Tasks of the process-pool tests (tests/acceptance/test_process_pool.py), on their own queue.

Never imported by the test project's settings: two of them declare ``hard_timeout``, and a worker
with the thread pool refuses to start when a task of a queue it serves declares one (it could not
enforce it). The tests' workers run ``tests.acceptance.settings_pools``, which adds the queue
``pool`` and this module; a worker of the default settings never serves that queue.

Every attempt writes a ``start`` line (with the pid of the process that runs the body) to the
chaos ledger file named in its arguments, and a finished body an ``effect`` line (see
``chaos_ledger`` in ``tasks.py``): the tests tell from it which child ran what, and that nothing
ran twice.
"""

import asyncio
import os
import signal
import threading
import time

from django_workqueue import task

from .tasks import chaos_ledger

QUEUE = "pool"
HARD_TIMEOUT = 1.0  # seconds: the declared limit of ``hang``

#: What ``pool_work`` keeps: memory a child holds until it is replaced (``--max-memory-per-child``).
_kept: list[bytes] = []


@task(queue=QUEUE, max_attempts=3, backoff=0, lease_seconds=5)
def pool_work(context, ledger, sleep=0.0, megabytes=0):
    """A job of the stream: ``start``, the work, ``effect``; returns the pid that ran it.

    ``megabytes`` > 0 keeps that much memory, written through so that it counts in the RSS, in a
    module-level list: the child's RSS after the job is at least that much."""
    chaos_ledger(ledger, "start", context)
    if megabytes:
        _kept.append(b"\x01" * (megabytes * 2**20))
    if sleep:
        time.sleep(sleep)
    chaos_ledger(ledger, "effect", context)
    return os.getpid()


def _hang(how):
    if how == "sleep":
        time.sleep(600)
    elif how == "busy":
        # Deaf to SIGTERM, then days of C code that holds the GIL and never returns to the
        # interpreter: no Python signal handler (nor any other thread of the child) runs, and
        # only SIGKILL ends it.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        sum(range(10**15))
    else:
        raise ValueError(f"unknown way to hang: {how!r}")


@task(queue=QUEUE, max_attempts=2, backoff=0, hard_timeout=HARD_TIMEOUT)
def hang(context, ledger, how="sleep"):
    """Never returns by itself; its own ``hard_timeout`` ends every attempt."""
    chaos_ledger(ledger, "start", context)
    _hang(how)


@task(queue=QUEUE, max_attempts=2, backoff=0)
def hang_without_limit(context, ledger, how="sleep"):
    """Never returns by itself; only the worker's ``--hard-timeout`` can end it."""
    chaos_ledger(ledger, "start", context)
    _hang(how)


@task(queue=QUEUE, max_attempts=3, backoff=0)
def die(context, ledger, how):
    """Takes its child process down on every attempt: a poison pill."""
    chaos_ledger(ledger, "start", context)
    if how == "exit":
        os._exit(3)
    if how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    raise ValueError(f"unknown way to die: {how!r}")


@task(queue=QUEUE, max_attempts=3, backoff=0, lease_seconds=5)
def stall_first_attempt(context, ledger):
    """Attempt 1 sleeps (for the test to kill its child); later attempts finish at once."""
    chaos_ledger(ledger, "start", context)
    if context.attempt == 1:
        time.sleep(600)
    chaos_ledger(ledger, "effect", context)
    return os.getpid()


@task(queue=QUEUE, max_attempts=3, backoff=0, lease_seconds=3)
def report_until_cancelled(context, ledger):
    """Reports progress naming its pid, then runs until cancelled (at most 60 s)."""
    chaos_ledger(ledger, "start", context)
    context.set_progress(1, None, f"running in pid {os.getpid()}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        context.raise_if_cancelled()
        time.sleep(0.02)
    return "finished without cancellation"


@task(queue=QUEUE, max_attempts=2, backoff=0, timeout=0.3)
def overrun_cooperatively(context, ledger):
    """Runs past its cooperative ``timeout``, checking for it as a well-behaved task does."""
    chaos_ledger(ledger, "start", context)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        context.raise_if_cancelled()
        time.sleep(0.01)


@task(queue=QUEUE)
async def async_pid(value):
    await asyncio.sleep(0.01)
    return [value, os.getpid()]


@task(queue=QUEUE)
def pid_of(value=None):
    """A workflow step: its input (the previous step's result) and the pid that ran it."""
    return [value, os.getpid()]


@task(queue=QUEUE, max_attempts=1)
def leave_a_thread(ledger):
    """Returns at once, leaving a (non-daemon) thread of its own running in its process, as
    some client libraries do: the interpreter waits for it before it exits."""
    threading.Thread(target=time.sleep, args=(600,), name="left-behind").start()
    return os.getpid()


@task(queue=QUEUE, max_attempts=2, backoff=0, timeout=0.6)
def short_with_timeout(context, ledger):
    """0.3 s of work, well within its cooperative ``timeout`` of 0.6 s, checking for it."""
    chaos_ledger(ledger, "start", context)
    deadline = time.monotonic() + 0.3
    while time.monotonic() < deadline:
        context.raise_if_cancelled()
        time.sleep(0.01)
    chaos_ledger(ledger, "effect", context)
    return os.getpid()
