"""Tasks used by the test suite (integration and acceptance)."""

import asyncio
import json
import os
import threading
import time
from pathlib import Path

from django_workqueue import Discard, Retry, Snooze, task

from .models import Effect, LedgerEntry, WorkflowEffect


def _ledger(context, note=""):
    LedgerEntry.objects.create(
        job_id=context.job_id, attempt=context.attempt, pid=os.getpid(), note=note
    )


@task
def add(a, b):
    return a + b


@task
def scheduled_tick(label=""):
    """Fired by the cron schedules of the scheduler tests."""
    return label


@task(queue="mail", priority=5)
def send_mail(to, subject=""):
    return {"to": to, "subject": subject}


@task(max_attempts=5, backoff=0)
def record(context, note=""):
    _ledger(context, note)
    return context.attempt


@task(max_attempts=3, backoff=0)
def always_fails(context):
    _ledger(context)
    raise ValueError(f"boom on attempt {context.attempt}")


@task(max_attempts=4, backoff=0)
def flaky(context, succeed_on=3):
    _ledger(context)
    if context.attempt < succeed_on:
        raise ConnectionError(f"flaky failure on attempt {context.attempt}")
    return f"succeeded on attempt {context.attempt}"


@task(max_attempts=3)
def retry_later(context, delay):
    if context.attempt == 1:
        raise Retry(delay=delay, reason="try again later")
    return context.attempt


@task(max_attempts=1)
def snooze_once(context, delay=0):
    _ledger(context)
    if context.attempt == 1:
        raise Snooze(delay=delay)
    return context.attempt


@task(max_attempts=5)
def discard_me(context):
    _ledger(context)
    raise Discard("the account was deleted")


@task(max_attempts=5, on_failure=lambda exc: "discard" if isinstance(exc, KeyError) else None)
def classified(context, key_error=True):
    _ledger(context)
    raise KeyError("missing") if key_error else OSError("transient")


@task(max_attempts=3, lease_seconds=2)
def wait_for_cancel(context, limit=30.0):
    """Runs until cancelled (or ``limit`` seconds); records each attempt."""
    _ledger(context, "started")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        context.raise_if_cancelled()
        time.sleep(0.02)
    return "finished without cancellation"


@task(max_attempts=3, lease_seconds=2)
def sleep_for(context, seconds, marker=None):
    """Sleeps ``seconds`` without looking at cancellation, then records success."""
    _ledger(context, "started")
    if marker:
        Path(marker).write_text(str(os.getpid()))
    time.sleep(seconds)
    _ledger(context, "finished")
    return seconds


@task(max_attempts=3, timeout=0.3)
def times_out(context):
    _ledger(context)
    while True:
        context.raise_if_cancelled()
        time.sleep(0.01)


@task(atomic=True, max_attempts=3, lease_seconds=2)
def atomic_effect(context, value="", fail=False, sleep=0.0, marker=None):
    """Writes an Effect inside the completion transaction."""
    Effect.objects.create(job_id=context.job_id, attempt=context.attempt, value=value)
    if marker:
        Path(marker).write_text(str(os.getpid()))
    if sleep:
        time.sleep(sleep)
    if fail:
        raise RuntimeError("rolled back")
    return value


@task(max_attempts=3, lease_seconds=1)
def crash(context):
    """Kills its own worker process every time: a poison pill."""
    _ledger(context)
    os._exit(17)


@task
def slow_progress(context, steps, step_seconds=0.5):
    """Long enough to be watched: one progress report per step (the browser tests)."""
    for n in range(1, steps + 1):
        time.sleep(step_seconds)
        context.set_progress(n, steps, f"step {n} of {steps}")
    return steps


@task
def progress(context, steps):
    for n in range(1, steps + 1):
        context.set_progress(n, steps, f"step {n}")
    return steps


@task
async def async_add(a, b):
    await asyncio.sleep(0.01)
    return a + b


@task(timeout=0.2, max_attempts=1)
async def async_too_slow():
    await asyncio.sleep(10)


@task
def returns_object():
    return object()


@task
def ledger_noop(context):
    _ledger(context)


# --- The fault battery (tests/chaos): every attempt is written to an append-only ledger file. ---
# A file, not a table: one os.write per line reaches the kernel before the call returns, so the
# line survives a SIGKILL of the writer, and it is independent of the database being faulted.


def chaos_ledger(path, kind, context):
    line = json.dumps(
        {
            "kind": kind,
            "job": context.job_id,
            "attempt": context.attempt,
            "owner": context.owner,
            "pid": os.getpid(),
            "t": time.time(),
        }
    )
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@task(max_attempts=20, backoff=0, lease_seconds=2)
def chaos_work(context, ledger, sleep=0.0):
    """A job with an external effect: 'start', then the work, then the effect ('effect')."""
    chaos_ledger(ledger, "start", context)
    if sleep:
        time.sleep(sleep)
    chaos_ledger(ledger, "effect", context)
    return context.attempt


@task(atomic=True, max_attempts=20, backoff=0, lease_seconds=2)
def chaos_atomic(context, ledger, sleep=0.0):
    """The transactional variant: its Effect row commits with the job's success, or not at all."""
    chaos_ledger(ledger, "start", context)
    Effect.objects.create(job_id=context.job_id, attempt=context.attempt, value=context.owner)
    if sleep:
        time.sleep(sleep)
    return context.attempt


# Poison pills (tests/chaos/test_poison_pills.py): each attempt writes 'start', then takes its
# whole worker process down, so only lease expiry and the reaper can end the job. A short lease
# recovers each attempt quickly; a small budget sends the job to the dead-letter queue soon.
POISON_EXIT_CODE = 86


@task(max_attempts=3, backoff=0, lease_seconds=1)
def chaos_exit(context, ledger):
    """Ends its worker with ``os._exit``: no cleanup, no outcome, no log line."""
    chaos_ledger(ledger, "start", context)
    os._exit(POISON_EXIT_CODE)


@task(max_attempts=3, backoff=0, lease_seconds=1)
def chaos_segfault(context, ledger):
    """Crashes its worker with a segmentation fault (reads address 0 through ctypes)."""
    import ctypes

    chaos_ledger(ledger, "start", context)
    ctypes.string_at(0)


# --- Progress reports that must never cost an outcome (tests/acceptance/test_progress_reports.py).
# Each attempt writes one LedgerEntry, so the test can count the bodies that really ran.

# Values just outside PostgreSQL's bigint (the columns' type), on each side and in each field.
BEYOND_BIGINT = {
    "current=10**30": (10**30, None),
    "current=-2**63-1": (-(2**63) - 1, None),
    "total=2**63": (1, 2**63),
}


@task(max_attempts=3, backoff=0, lease_seconds=2)
def progress_short(context, sleep=0.0):
    """A short job (2 s lease, so a stalled heartbeat would lose it) that reports once."""
    _ledger(context)
    if sleep:
        time.sleep(sleep)
    context.set_progress(1, 1, "done")
    return context.attempt


@task(max_attempts=3, backoff=0)
def progress_message(context, codepoint, length):
    """Reports ``chr(codepoint) * length``: built here, as arguments may not hold a NUL."""
    _ledger(context)
    context.set_progress(1, None, chr(codepoint) * length)
    return length


@task(max_attempts=3, backoff=0)
def progress_beyond_bigint(context):
    """Reports the largest bigint, then counters beyond bigint, keeping each call's ValueError.

    The refused calls come last: were they accepted, one of them would be the report the worker
    writes (it writes each job's latest report)."""
    _ledger(context)
    context.set_progress(2**63 - 1, 2**63 - 1, "largest")
    refused = {}
    for label, (current, total) in BEYOND_BIGINT.items():
        try:
            context.set_progress(current, total, label)
        except ValueError as exc:
            refused[label] = f"{type(exc).__name__}: {exc}"
        else:
            refused[label] = None
    return {"refused": refused}


@task(max_attempts=3, backoff=0, lease_seconds=30)
def progress_often(context, seconds, every=0.01):
    """Reports progress every ``every`` seconds for ``seconds``; returns how many reports it
    made and when (wall clock) its body ended. The 30 s lease outlasts the test's row lock."""
    _ledger(context)
    reports = 0
    deadline = time.monotonic() + seconds
    while True:
        reports += 1
        context.set_progress(reports, None, f"report {reports}")
        if time.monotonic() >= deadline:
            break
        time.sleep(every)
    return {"reports": reports, "ended": time.time()}


@task(max_attempts=20, backoff=0, lease_seconds=20)
def chaos_progress(context, ledger, sleep=0.0, every=0.01):
    """``chaos_work`` that reports progress every ``every`` seconds while it works; returns the
    number of reports, the last of which must be the one stored. Its 20 s lease lets the fault
    battery hold its row locked for up to 5 s (more than twice the worker's 2 s
    ``lock_timeout``) without it expiring (see tests/chaos/test_progress_under_locks.py)."""
    chaos_ledger(ledger, "start", context)
    reports = 0
    total = max(1, round(sleep / every)) if every else 1
    deadline = time.monotonic() + sleep
    while True:
        reports += 1
        context.set_progress(reports, total, f"report {reports}")
        if time.monotonic() >= deadline:
            break
        time.sleep(every)
    chaos_ledger(ledger, "effect", context)
    return reports


# --- workflows ---------------------------------------------------------------------------------


@task
def echo(value=None):
    return value


@task
def double(value):
    return value * 2


@task
def total(values, extra=0):
    """A fan-in callback: the list of a group's results comes first."""
    return sum(values) + extra


@task(max_attempts=1)
def fail_step(reason="failed on purpose"):
    raise ValueError(reason)


@task(max_attempts=5)
def discard_step(reason="discarded on purpose"):
    raise Discard(reason)


@task
def fan_out(context, count, then=None):
    """Adds ``count`` doubling steps at run time, then continues with ``then`` (a task name
    among this module's) if given."""
    for n in range(count):
        context.add(double.s(n))
    if then == "collect":
        context.continue_with(collect.s())
    return f"added {count}"


@task
def collect(context):
    """Its prerequisites' results, in declared order."""
    return [dependency.result for dependency in context.dependencies]


@task
def describe_dependencies(context):
    return [[d.task_name, d.status, d.result] for d in context.dependencies]


# --- workflows under SIGKILLs (tests/acceptance/test_workflows_under_kills.py) ---------------
# chain(workflow_begin, group(workflow_branch x 10), workflow_gather, workflow_finish). Each
# attempt writes a "start" line to the chaos ledger (so the fault battery's checker can tell
# re-runs after a kill from others); the last two steps write a WorkflowEffect row in their
# completion transaction, at most one per (workflow, step) by a unique constraint. A 2 s lease
# and no backoff: an attempt orphaned by a kill is taken over within seconds.


@task(max_attempts=20, backoff=0, lease_seconds=2)
def workflow_begin(context, number, ledger, sleep=0.0):
    chaos_ledger(ledger, "start", context)
    if sleep:
        time.sleep(sleep)
    return number


@task(max_attempts=20, backoff=0, lease_seconds=2)
def workflow_branch(context, value, index, ledger, sleep=0.0):
    chaos_ledger(ledger, "start", context)
    if sleep:
        time.sleep(sleep)
    return value + index


def _workflow_effect(context, step, ledger, sleep):
    """Writes the step's WorkflowEffect in the completion transaction (the caller is atomic)."""
    chaos_ledger(ledger, "start", context)
    WorkflowEffect.objects.create(
        workflow_id=context.job.workflow_id, step=step, job_id=context.job_id,
        attempt=context.attempt,
    )  # fmt: skip
    if sleep:
        time.sleep(sleep)


@task(atomic=True, max_attempts=20, backoff=0, lease_seconds=2)
def workflow_gather(context, values, ledger, sleep=0.0):
    """The fan-in: its value is the sum of the branches' values."""
    _workflow_effect(context, "gather", ledger, sleep)
    return sum(values)


@task(atomic=True, max_attempts=20, backoff=0, lease_seconds=2)
def workflow_finish(context, value, ledger, sleep=0.0):
    _workflow_effect(context, "finish", ledger, sleep)
    return value * 2


# --- batch tasks (flow control) ------------------------------------------------------------------


def _echo_batch(items):
    # Each job's result shows its own item and the whole call it ran in, in call order.
    return [{"item": item, "batch": list(items)} for item in items]


@task(batch_size=3, batch_wait=60)
def batch_echo(items):
    return _echo_batch(items)


@task(batch_size=50, batch_wait=0.2)
def batch_echo_soon(items):
    return _echo_batch(items)


@task(batch_size=10, batch_wait=0)
async def batch_echo_async(items):
    await asyncio.sleep(0)
    return _echo_batch(items)


@task(batch_size=10, batch_wait=0)
def batch_wrong_count(items):
    return items[:-1]


@task(batch_size=10, batch_wait=0, max_attempts=3, backoff=0)
def batch_fails(items):
    raise ValueError(f"the batch of {len(items)} failed")


@task(batch_size=10, batch_wait=0, max_attempts=3)
def batch_discards(items):
    raise Discard(f"none of the {len(items)} items can be embedded")


@task(batch_size=10, batch_wait=0)
def batch_double(items):
    return [item * 2 for item in items]


#: Opened by a test to let ``batch_gated`` return (in-process workers only).
batch_gate = threading.Event()


@task(batch_size=2, batch_wait=0)
def batch_gated(items):
    assert batch_gate.wait(20), "the test never opened the batch gate"
    return _echo_batch(items)


@task(api=True)
def api_add(a: int, b: int = 0) -> int:
    """Open to the HTTP API (tests/integration/test_api_*.py)."""
    return a + b


@task(api=True, queue="reports")
def api_report(context, customer_id, *, period="month"):
    """Open to the HTTP API; takes the context, which the API's callers never pass."""
    return {"customer_id": customer_id, "period": period}


# A body that raises a BaseException that is not an Exception: the body's failure, like any
# other (tests/integration/test_body_base_exceptions.py, tests/acceptance/test_body_exits.py).
BODY_EXITS = {"SystemExit": SystemExit, "KeyboardInterrupt": KeyboardInterrupt,
              "GeneratorExit": GeneratorExit}  # fmt: skip


def _body_exit(kind):
    return BODY_EXITS[kind](f"{kind} raised by the task's body")


@task(max_attempts=1, backoff=0)
def exits(kind="SystemExit"):
    raise _body_exit(kind)


@task(max_attempts=1, backoff=0)
async def exits_async(kind="SystemExit"):
    await asyncio.sleep(0)
    raise _body_exit(kind)


@task(batch_size=10, batch_wait=0, max_attempts=1, backoff=0)
def batch_exits(items):
    raise _body_exit(items[0])


@task(batch_size=10, batch_wait=0, max_attempts=1, backoff=0)
async def batch_exits_async(items):
    await asyncio.sleep(0)
    raise _body_exit(items[0])
