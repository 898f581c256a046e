"""The worker's log output when the project configures none (runworker and its pool's children)."""

from __future__ import annotations

import logging


def configure_logging(verbosity: int) -> None:
    logger = logging.getLogger("django_workqueue")
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbosity >= 3 else logging.INFO if verbosity >= 1 else
                    logging.WARNING)  # fmt: skip
    # -v 2: each failed attempt's line carries its traceback (attempt/ending.py, log_endings).
    jobs = logging.getLogger("django_workqueue.jobs")
    jobs.setLevel(logging.DEBUG if verbosity >= 2 else logging.NOTSET)
