"""The worker's line thread (``worker/lines.py``): every line handed over is written, in
order, by the one thread; a failing handler loses its line, not the thread; a logger that
writes nothing starts no thread."""

from __future__ import annotations

import logging

import pytest

from django_workqueue.outcomes import Outcome, OutcomeKind
from django_workqueue.worker.lines import LineWriter


def ended(job_id: int) -> Outcome:
    return Outcome(job_id=job_id, attempt=1, kind=OutcomeKind.SUCCEEDED, max_attempts=1,
                   task_name="t", queue="default")  # fmt: skip


class Failing(logging.Handler):
    """Fails on job 2's line, keeps the others."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[int, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.job_id == 2:  # type: ignore[attr-defined]
            raise RuntimeError("handler down")
        self.seen.append((record.job_id, record.threadName))  # type: ignore[attr-defined]


@pytest.fixture
def handler():
    job_logger = logging.getLogger("django_workqueue.jobs")
    handler, level = Failing(), job_logger.level
    job_logger.addHandler(handler)
    job_logger.setLevel(logging.INFO)
    yield handler
    job_logger.removeHandler(handler)
    job_logger.setLevel(level)


def test_the_lines_are_written_in_order_by_one_thread_and_a_failing_handler_loses_one(handler):
    writer = LineWriter()
    writer.write([ended(1), ended(2), ended(3)], ["succeeded"] * 3)
    writer.write([ended(4)], ["succeeded"])
    writer.close()
    assert handler.seen == [(n, "workqueue-lines") for n in (1, 3, 4)]


def test_no_thread_when_the_job_logger_writes_nothing():
    job_logger = logging.getLogger("django_workqueue.jobs")
    level = job_logger.level
    job_logger.setLevel(logging.CRITICAL)
    try:
        writer = LineWriter()
        writer.write([ended(1)], ["succeeded"])
        assert writer.flush()
        assert writer._thread is None
    finally:
        job_logger.setLevel(level)
