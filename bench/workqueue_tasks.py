"""The tasks django-workqueue runs in the benchmarks."""

import time

from bench.cancellation import note
from bench.stamp import stamp
from django_workqueue import task


@task(name="bench.noop")
def noop(key):
    stamp(key)


def spin(iterations):
    """Pure-Python work, no I/O and no sleep: ``iterations`` turns of an arithmetic loop (the
    pools measurement calibrates the count to about 20 ms, ``bench/pool_metrics.py``)."""
    total = 0
    for n in range(iterations):
        total += n * n % 7
    return total


@task(name="bench.io")
def io(seconds):
    """An I/O-bound job: it waits ``seconds`` with the interpreter lock released."""
    time.sleep(seconds)


@task(name="bench.cpu")
def cpu(iterations):
    """A CPU-bound job: it holds the interpreter lock for all its run."""
    spin(iterations)


# A 3 s lease renews every second: the heartbeat, the only path for a cancellation on SQLite
# (and on PostgreSQL without NOTIFY), then delivers one within about a second.
@task(name="bench.wait_for_cancel", lease_seconds=3, max_attempts=1)
def wait_for_cancel(context, key):
    """Wait for ``context.cancelled``, noting when the wait starts and when the event fires."""
    note("started", key)
    if context.cancelled.wait(timeout=120):
        note("cancelled", key)
    context.raise_if_cancelled()


@task(name="bench.step")
def step(previous):
    """A chain's next step: it receives the previous step's value."""
    return previous


@task(name="bench.fanin_callback")
def fanin_callback(results):
    """A fan-in callback (``group(...).then(fanin_callback.s())``): the members' results."""
    return len(results)
