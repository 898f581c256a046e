"""What the worker's line per job costs: ``python bench/job_lines.py``.

Times ``attempt.ending.log_endings`` — what the worker's control thread calls once a batch of
outcomes is written — for batches of successes and of retries, with the line on (INFO, written
by runworker's own handler and format to a null stream) and off (the ``django_workqueue.jobs``
logger at WARNING, so successes are skipped). Prints microseconds per job, the best of
``--repeat`` runs of ``--jobs`` outcomes each (the numbers in docs/explanation/performance.md
and docs/guides/observability.md). No database: the outcomes are built in memory.
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django  # noqa: E402

django.setup()

from django_workqueue.attempt.ending import job_logger, log_endings  # noqa: E402
from django_workqueue.outcomes import Outcome, OutcomeKind  # noqa: E402


def outcomes(kind: OutcomeKind, count: int) -> list[Outcome]:
    error = None
    if kind == OutcomeKind.RETRY:
        error = {"type": "builtins.ValueError", "message": "no", "traceback": "Traceback..."}
    return [
        Outcome(job_id=n, attempt=1, kind=kind, max_attempts=5, task_name="shop.tasks.receipt",
                queue="default", duration=0.012, delay=8.0, error=error)
        for n in range(count)
    ]  # fmt: skip


def per_job(batch: list[Outcome], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        log_endings(batch)
        best = min(best, time.perf_counter() - started)
    return best / len(batch) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("", "django_workqueue", "django_workqueue.jobs"):  # only ours
        logging.getLogger(name).handlers = []
    logging.getLogger("django_workqueue").addHandler(handler)
    logging.getLogger("django_workqueue").propagate = False
    print("| ending | line on (INFO) | line off (WARNING) |")
    print("|---|---|---|")
    for kind in (OutcomeKind.SUCCEEDED, OutcomeKind.RETRY):
        batch = outcomes(kind, options.jobs)
        timings = []
        for level in (logging.INFO, logging.WARNING):
            job_logger.setLevel(level)
            handler.stream = io.StringIO()
            timings.append(per_job(batch, options.repeat))
        print(f"| {kind} | {timings[0]:.2f} µs/job | {timings[1]:.2f} µs/job |")


if __name__ == "__main__":
    main()
