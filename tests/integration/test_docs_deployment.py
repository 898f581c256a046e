"""The deployment guide's logging recipes work as written: its ``LOGGING`` example is a valid
``dictConfig``, and its error-tracker handler receives the dead-lettered job's exception,
tagged with the job (SQLite and PostgreSQL)."""

from __future__ import annotations

import logging
import logging.config
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.conf import settings

from testproject.testapp.tasks import always_fails

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "deployment.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(), flags=re.S)


def block_with(text: str) -> str:
    (block,) = [b for b in python_blocks() if text in b]
    return block


@pytest.fixture
def restore_logging():
    yield
    logging.config.dictConfig(settings.LOGGING)


def test_the_logging_example_is_a_valid_dict_config(restore_logging):
    namespace: dict = {}
    exec(block_with("LOGGING = {"), namespace)

    logging.config.dictConfig(namespace["LOGGING"])

    assert logging.getLogger("django_workqueue").level == logging.INFO
    assert logging.getLogger("django_workqueue").handlers


@pytest.mark.django_db(transaction=True)
def test_the_error_tracker_handler_gets_the_dead_lettered_jobs_exception(drain):
    captured: list[tuple[BaseException, dict, str]] = []
    tracker = SimpleNamespace(
        capture_exception=lambda exc, tags, level: captured.append((exc, tags, level))
    )
    namespace: dict = {"tracker": tracker}
    exec(block_with("class ErrorTrackerHandler"), namespace)
    handler = namespace["ErrorTrackerHandler"](level=logging.ERROR)
    logger = logging.getLogger("django_workqueue")
    logger.addHandler(handler)
    try:
        job = always_fails.enqueue()
        drain()
    finally:
        logger.removeHandler(handler)

    ((exc, tags, level),) = captured  # the two retried attempts are WARNING: not sent
    assert isinstance(exc, ValueError) and str(exc) == "boom on attempt 3"
    assert tags == {"job_id": job.pk, "task": "testproject.testapp.tasks.always_fails"}
    assert level == "error"
