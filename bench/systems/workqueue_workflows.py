"""Client actions of the workflow measurements (``bench/workflow_metrics.py``), on the engine
databases (``bench.systems.workqueue_engine`` re-exports them).

Workflows are built through the public API (``group``, ``chain``, ``Task.s``); the completion
cost is counted around ``django_workqueue.workflow.release.record``, the call through which a
worker writes a batch of outcomes and, in the same transaction, what they do to workflows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

# Statements that only open or close a transaction or savepoint: not counted (PostgreSQL's
# BEGIN and COMMIT never reach Django's query log, SQLite's BEGIN IMMEDIATE does).
_TRANSACTION_CONTROL = ("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK")


def _tasks() -> ModuleType:
    import django

    django.setup()
    from bench import workqueue_tasks

    return workqueue_tasks


def client_workflow_fanin(n: int, timeout: float = 600.0) -> dict[str, Any]:
    """``group(noop.s(i) for i in range(n)).then(fanin_callback.s())`` against a running worker.

    A warm-up job goes first, so that the worker is known to claim; then, as a yardstick, ``n``
    plain no-op jobs (one ``enqueue_many``) drained by the same worker. Every time is read from
    the database (its clock): the workflow's ``created_at`` (the first statement of the
    enqueue), the members' first start and last end, the callback's start; the plain jobs'
    ``enqueued_at`` and last end.
    """
    tasks = _tasks()
    from django.db.models import Max, Min

    from django_workqueue import group
    from django_workqueue.models import Job

    tasks.noop.enqueue(-1).wait(timeout=60)
    plain = tasks.noop.enqueue_many([((key,), {}) for key in range(n)])
    ids = [job.pk for job in plain]
    deadline = time.monotonic() + timeout
    while Job.objects.filter(pk__in=ids).exclude(status="succeeded").exists():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} plain jobs not drained in {timeout}s")
        time.sleep(0.05)
    span = Job.objects.filter(pk__in=ids).aggregate(
        first=Min("enqueued_at"), last=Max("finished_at")
    )
    started = time.perf_counter()
    workflow = group(tasks.noop.s(key) for key in range(n)).then(tasks.fanin_callback.s())
    workflow = workflow.enqueue(name="bench fan-in")
    enqueue_ms = (time.perf_counter() - started) * 1000
    workflow.wait(timeout=timeout, interval=0.05)
    callback = workflow.jobs.get(task_name=tasks.fanin_callback.name)
    if workflow.status != "succeeded" or callback.result != n:
        raise RuntimeError(
            f"fan-in: workflow {workflow.status}, {workflow.counts}; callback result "
            f"{callback.result!r} (expected {n})"
        )
    members = workflow.jobs.exclude(pk=callback.pk).aggregate(
        first=Min("started_at"), last=Max("finished_at")
    )

    def ms(later: Any, earlier: Any) -> float:
        return (later - earlier).total_seconds() * 1000

    return {
        "plain_ms": ms(span["last"], span["first"]),
        "to_last_member_ms": ms(members["last"], workflow.created_at),
        "to_callback_ms": ms(callback.started_at, workflow.created_at),
        "enqueue_ms": enqueue_ms,
        "to_first_member_ms": ms(members["first"], workflow.created_at),
        "members_ms": ms(members["last"], members["first"]),
        "release_ms": ms(callback.started_at, members["last"]),
    }


def client_release_cost(batch: int) -> dict[str, Any]:
    """SQL statements per completed step, counted around ``release.record`` for successes of:
    plain jobs, chain steps that each release their next step, and the members of a fan-in
    (one batch, and one by one). Each case starts from empty tables."""
    tasks = _tasks()
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from django_workqueue import chain, group
    from django_workqueue.conf import workqueue_settings
    from django_workqueue.db import driver_for
    from django_workqueue.models import Job, Workflow
    from django_workqueue.outcomes import Outcome, OutcomeKind
    from django_workqueue.workflow import release

    alias = workqueue_settings.DATABASE
    driver = driver_for(alias)
    owner = "bench-release-cost"
    noop, step, callback = tasks.noop, tasks.step, tasks.fanin_callback

    def count(make: Callable[[], object], per_call: int) -> dict[str, Any]:
        Workflow.objects.using(alias).all().delete()
        Job.objects.using(alias).all().delete()
        make()
        claimed = driver.claim(["default"], batch, owner)
        if len(claimed) != batch:
            raise RuntimeError(f"claimed {len(claimed)} of {batch} jobs")
        outcomes = [
            Outcome(job_id=job.id, attempt=job.attempt, kind=OutcomeKind.SUCCEEDED,
                    max_attempts=job.max_attempts, result_json="null")
            for job in claimed
        ]  # fmt: skip
        statements: list[str] = []
        started = time.perf_counter()
        for start in range(0, batch, per_call):
            with CaptureQueriesContext(connections[alias]) as captured:
                recorded = release.record(
                    driver, owner, outcomes[start : start + per_call], skip_locked=True
                )
            statements += [
                q["sql"] for q in captured.captured_queries
                if not q["sql"].lstrip().upper().startswith(_TRANSACTION_CONTROL)
            ]  # fmt: skip
            if len(recorded.written) != len(outcomes[start : start + per_call]):
                raise RuntimeError(f"only {len(recorded.written)} outcomes written")
        elapsed = time.perf_counter() - started
        released = Job.objects.using(alias).filter(status="ready").count()
        return {
            "per_step": len(statements) / batch,
            "statements": len(statements),
            "steps": batch,
            "per_call": per_call,
            "released": released,
            "ms_per_step": elapsed * 1000 / batch,
            "sql": [" ".join(sql.split())[:120] for sql in statements[:12]],
        }

    def plain() -> object:
        return noop.enqueue_many([((key,), {}) for key in range(batch)])

    def chains() -> object:  # each first step releases its own next step
        return group(chain(noop.s(key), step.s()) for key in range(batch)).enqueue()

    def fanin() -> object:  # every member counts down the callback; the last releases it
        return group(noop.s(key) for key in range(batch)).then(callback.s()).enqueue()

    cases = {"plain": plain, "chain": chains, "fanin": fanin}
    out = {name: count(make, batch) for name, make in cases.items()}
    out.update({f"{name}_singly": count(make, 1) for name, make in cases.items()})
    return out
