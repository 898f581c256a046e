"""Tasks for the skip-queue and idempotency-claim tests. Importing this module registers them,
so workers in this process can run them (subprocess workers run the test app's tasks)."""

from __future__ import annotations

import os
import threading
from typing import Any

from django.db import transaction

from django_workqueue import registry, task
from testproject.testapp.models import Effect, LedgerEntry

#: What each attempt's claim returned: (job id, attempt) -> [results of context.claim].
claimed: dict[tuple[int, int], list[bool]] = {}


def _note(context: Any, result: bool) -> None:
    claimed.setdefault((context.job_id, context.attempt), []).append(result)


@task(max_attempts=3, backoff=0)
def claims_then_fails_once(context: Any, key: str) -> str:
    """Claims ``key``, then (on attempt 1) crashes before its side effect."""
    won = context.claim(key)
    _note(context, won)
    if context.attempt == 1:
        raise ConnectionError("crashed after the claim, before the side effect")
    return "did it" if won else "skipped"


@task(atomic=True, max_attempts=3, backoff=0)
def atomic_claims_then_fails_once(context: Any, key: str) -> str:
    """Claims ``key`` and writes an Effect in its transaction; attempt 1 then fails."""
    won = context.claim(key)
    _note(context, won)
    if won:
        Effect.objects.create(job_id=context.job_id, attempt=context.attempt, value=key)
    if context.attempt == 1:
        raise ConnectionError("failed after the claim: everything rolls back")
    return "did it" if won else "skipped"


@task(max_attempts=1)
def claims_inside_own_transaction(context: Any, key: str) -> bool:
    """A task without atomic=True that claims inside a transaction.atomic() it opened, which
    then rolls back."""
    result: list[bool] = []
    try:
        with transaction.atomic():
            result.append(context.claim(key))
            raise LookupError("the body's own transaction rolls back")
    except LookupError:
        pass
    return result[0]


@task(concurrency=2)
def limited_task() -> None:
    """A task under flow control (skip-queue refuses it)."""


# Unregistered at once: a worker made while a flow task is registered runs the flow claim, and
# the refusal under test needs the task object only.
registry._registry.pop(limited_task.name)


#: A gate per job id, opened by the test: skip-queue tests hold a body at a known point.
gates: dict[int, threading.Event] = {}
#: Set per job id once its body has started.
started: dict[int, threading.Event] = {}


@task(lease_seconds=1, max_attempts=3)
def waits_for_gate(context: Any) -> str:
    """Runs until the test opens its gate; records the attempt with its process id."""
    LedgerEntry.objects.create(
        job_id=context.job_id, attempt=context.attempt, pid=os.getpid(), note="started"
    )
    started.setdefault(context.job_id, threading.Event()).set()
    gate = gates.setdefault(context.job_id, threading.Event())
    assert gate.wait(20), "the test never opened the gate"
    return "done" if not context.cancelled.is_set() else f"aborted: {context.abort_reason}"


@task
def where_am_i() -> dict[str, Any]:
    return {"pid": os.getpid(), "thread": threading.get_ident()}
