"""Fixtures for the acceptance tests: real ``runworker`` subprocesses on the test database.

Tests here use ``@pytest.mark.django_db(transaction=True)``: a subprocess has its own connection
and sees only committed rows. The subprocess connects to the database pytest-django created
(``connection.settings_dict`` names it once the test database exists). Every process a test
starts is SIGKILLed at teardown if it is still alive, before the database is flushed, so no
worker outlives its test; the logs of every process are printed at teardown, which pytest shows
only when the test failed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.support.processes import StartWorker, stop_started, worker_environment, worker_starter


@pytest.fixture
def worker_env(transactional_db: None) -> Callable[..., dict[str, str]]:
    """Build a subprocess environment for the live test database, with setting overrides.

    >>> worker_env(WORKQUEUE_GRACE="0.2")
    """

    def build(**overrides: str) -> dict[str, str]:
        return worker_environment(connection.settings_dict, **overrides)

    return build


@pytest.fixture
def start_worker(
    worker_env: Callable[..., dict[str, str]], tmp_path: Path
) -> Iterator[StartWorker]:
    """Start ``manage.py runworker`` subprocesses; all are killed when the test ends.

    >>> worker = start_worker("--concurrency", "4", name="a", env={"WORKQUEUE_GRACE": "0.2"})
    """
    start, started = worker_starter(worker_env, tmp_path)
    yield start
    stop_started(started)
