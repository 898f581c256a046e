"""Client actions of the observability measurements (``bench/observability_metrics.py``), on
the engine databases (``bench.systems.workqueue_engine`` re-exports them).

``client_signals_cost`` drains no-op jobs with an in-process burst worker (``Worker(burst=True)``,
8 slots), alternately with no receiver connected and with a no-op receiver connected to every
signal of ``django_workqueue.signals``, and reports jobs/s of each drain. It also times, with
no receiver connected, the signal code one job goes through (the send points of its enqueue,
its start and its outcome's write), in nanoseconds per job.
"""

from __future__ import annotations

import time
from typing import Any


def client_signals_cost(jobs: int, pairs: int) -> dict[str, Any]:
    """``pairs`` pairs of drains of ``jobs`` no-op jobs, one without receivers and one with a
    no-op receiver on every signal, the pair's order alternating; jobs/s of each."""
    import django

    django.setup()
    from bench import workqueue_tasks
    from django_workqueue import signals
    from django_workqueue.conf import workqueue_settings
    from django_workqueue.models import Job
    from django_workqueue.worker.runner import Worker

    alias = workqueue_settings.DATABASE

    def receiver(sender: Any, **kwargs: Any) -> None:
        return None

    every = [getattr(signals, name) for name in signals.__all__]

    def drain(listening: bool) -> float:
        Job.objects.using(alias).all().delete()
        workqueue_tasks.step.enqueue_many([((n,), {}) for n in range(jobs)])
        for signal in every:
            if listening:
                signal.connect(receiver, weak=False)
        try:
            started = time.perf_counter()
            worker = Worker(burst=True, concurrency=8, poll_interval=0.05)
            worker.run()
            elapsed = time.perf_counter() - started
        finally:
            for signal in every:
                signal.disconnect(receiver)
        if worker.finished_count != jobs:
            raise RuntimeError(f"drained {worker.finished_count} of {jobs} jobs")
        return jobs / elapsed

    drain(False)  # warm-up: connections, imports, the first statements' plans
    out: dict[str, Any] = {"off": [], "on": []}
    for pair in range(pairs):
        order = (False, True) if pair % 2 == 0 else (True, False)
        for listening in order:
            out["on" if listening else "off"].append(drain(listening))
    out["gate_ns"] = _gate_ns(signals)
    return out


def _gate_ns(signals: Any) -> float:
    """Nanoseconds per job of the signal code on a job's path with no receiver connected: the
    calls the send points make (enqueue, start, outcome write; the outcome write's call is made
    once per batch, counted here once per job)."""
    from django_workqueue import signalling
    from django_workqueue.db import Recorded
    from django_workqueue.outcomes import Outcome, OutcomeKind

    assert not any(getattr(signals, name).receivers for name in signals.__all__)
    outcome = Outcome(job_id=1, attempt=1, kind=OutcomeKind.SUCCEEDED, max_attempts=3)
    recorded = Recorded(written={(1, 1)}, busy=set())
    rounds = 200_000
    started = time.perf_counter_ns()
    for _ in range(rounds):
        signalling.enqueued("default", "bench.step", "default", [1])
        if signals.job_started.receivers:
            raise AssertionError("no receiver is connected")
        signalling.outcomes_written("default", "bench", [outcome], recorded)
    return (time.perf_counter_ns() - started) / rounds
