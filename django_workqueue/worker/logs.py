"""The worker's log output when the project configures none (runworker and its pool's children)."""

from __future__ import annotations

import logging

JOBS_LOGGER = "django_workqueue.jobs"


class WorkerFormatter(logging.Formatter):
    """runworker's own format. A job's line (``django_workqueue.jobs``) may carry its
    exception for error trackers; its traceback is printed only with ``tracebacks`` (-v 2)."""

    def __init__(self, *, tracebacks: bool) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")
        self.tracebacks = tracebacks

    def format(self, record: logging.LogRecord) -> str:
        if self.tracebacks or not record.exc_info or record.name != JOBS_LOGGER:
            return super().format(record)
        saved = record.exc_info, record.exc_text
        record.exc_info, record.exc_text = None, None
        try:
            return super().format(record)
        finally:
            record.exc_info, record.exc_text = saved


def configure_logging(verbosity: int) -> None:
    logger = logging.getLogger("django_workqueue")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(WorkerFormatter(tracebacks=verbosity >= 2))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbosity >= 3 else logging.INFO if verbosity >= 1 else
                    logging.WARNING)  # fmt: skip
    # -v 2: each failed attempt's line carries its traceback (attempt/ending.py, log_endings).
    jobs = logging.getLogger(JOBS_LOGGER)
    jobs.setLevel(logging.DEBUG if verbosity >= 2 else logging.NOTSET)
