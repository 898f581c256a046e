"""Tasks for the durable-wait tests (``context.step``, ``context.sleep``). Importing this module
registers them; subprocess workers import it through ``WORKQUEUE_TASK_MODULES``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from django.db import transaction

from django_workqueue import task
from django_workqueue.exceptions import SignalTimeout
from testproject.testapp.models import Effect
from testproject.testapp.tasks import chaos_ledger

#: Each call of a step's function in this process: (job id, attempt, step name).
calls: list[tuple[int, int, str]] = []


def _called(context: Any, name: str, value: Any = None) -> Any:
    calls.append((context.job_id, context.attempt, name))
    return {"step": name, "attempt": context.attempt} if value is None else value


@task(max_attempts=3, backoff=0)
def step_then_fails_once(context: Any) -> Any:
    """Stores a step, then fails its first attempt: the retry gets the step from the store."""
    charged = context.step("charge", _called, context, "charge")
    if context.attempt == 1:
        raise ConnectionError("failed after the step")
    return charged


@task(atomic=True, max_attempts=3, backoff=0)
def atomic_step_then_fails_once(context: Any, value: str) -> Any:
    """An atomic task whose step writes an Effect; its first attempt then fails, which rolls
    back the Effect and the checkpoint together."""

    def write() -> Any:
        Effect.objects.create(job_id=context.job_id, attempt=context.attempt, value=value)
        return _called(context, "write")

    written = context.step("write", write)
    if context.attempt == 1:
        raise ConnectionError("failed after the step: everything rolls back")
    return written


@task(max_attempts=3)
def sleeps_between_steps(context: Any, seconds: float) -> Any:
    """A step, a sleep, another step."""
    before = context.step("before", _called, context, "before")
    context.sleep(seconds)
    after = context.step("after", _called, context, "after")
    return [before, after]


@task(atomic=True, max_attempts=3)
def atomic_sleeps_after_a_write(context: Any, value: str) -> Any:
    """An atomic task that writes an Effect through a step, then sleeps: the write commits
    with its checkpoint and the sleep."""

    def write() -> int:
        Effect.objects.create(job_id=context.job_id, attempt=context.attempt, value=value)
        return len(calls)

    context.step("write", write)
    context.sleep(3600)
    return Effect.objects.filter(job_id=context.job_id).count()


@task(max_attempts=1)
def runs_a_step(context: Any, name: Any, value: Any) -> Any:
    """Stores ``value`` as the step ``name``."""
    return context.step(name, lambda: value)


@task(max_attempts=3, lease_seconds=2)
def step_then_waits_for_file(context: Any, where: str) -> Any:
    """A step whose function appends this process's pid to ``where``/calls (a side effect
    outside the database), then says so in ``where``/stepped and waits for ``where``/go."""
    folder = Path(where)

    def side_effect() -> int:
        with (folder / "calls").open("a") as calls_file:
            calls_file.write(f"{os.getpid()}\n")
        return os.getpid()

    pid = context.step("side effect", side_effect)
    (folder / "stepped").write_text(str(os.getpid()))
    while not (folder / "go").exists():
        time.sleep(0.05)
    return pid


@task(max_attempts=3)
def waits_for_approval(context: Any, timeout: float | None = None) -> Any:
    """A step, then a wait for ``approve``: returns the step's result and the payload (or
    ``"timed out"``)."""
    before = context.step("before", _called, context, "before")
    try:
        decision = context.wait_for_signal("approve", timeout=timeout)
    except SignalTimeout:
        decision = "timed out"
    return [before, decision]


@task(max_attempts=3)
def waits_twice(context: Any) -> Any:
    """Two waits for ``go``: each takes its own signal."""
    return [context.wait_for_signal("go"), context.wait_for_signal("go")]


@task(atomic=True, max_attempts=3, backoff=0)
def atomic_waits_then_fails_once(context: Any) -> Any:
    """An atomic task whose first attempt fails after its wait took a signal: the signal goes
    back with the rollback and the retry's wait takes it again."""
    payload = context.wait_for_signal("go")
    _called(context, "took")
    if context.attempt == 1:
        raise ConnectionError("failed after the wait")
    return payload


@task(max_attempts=1)
def sleeps_inside_its_own_transaction(context: Any) -> Any:
    """A task without atomic=True that sleeps inside a transaction.atomic() it opened."""
    with transaction.atomic():
        context.sleep(60)


@task(max_attempts=3, version=2)
def sleeps_at_version_2(context: Any, seconds: float) -> Any:
    """``sleeps_between_steps`` at version 2, which resumes no other version's checkpoints."""
    return sleeps_between_steps.spec.func(context, seconds)


@task(max_attempts=3, version=3, compatible_versions=(2,))
def sleeps_at_version_3_resuming_2(context: Any, seconds: float) -> Any:
    """At version 3, resuming the checkpoints of version 2 (and of no other)."""
    return sleeps_between_steps.spec.func(context, seconds)


@task(max_attempts=20, backoff=0, lease_seconds=2)
def sleeps_then_waits(context: Any, ledger: str, seconds: float) -> Any:
    """The chaos battery's durable job (tests/chaos/test_durable_waits.py): a step that writes
    'start' to the ledger, a sleep of ``seconds``, a wait for ``approve``; returns the step's
    attempt and the signal's payload."""

    def charge() -> int:
        chaos_ledger(ledger, "start", context)
        time.sleep(0.05)  # busy long enough for a kill to find it
        return int(context.attempt)

    charged = context.step("charge", charge)
    context.sleep(seconds)
    decision = context.wait_for_signal("approve")
    time.sleep(0.02)
    return {"charged_in": charged, "decision": decision}
