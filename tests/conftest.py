"""Shared fixtures. The database comes from DATABASE_URL (SQLite file by default).

Tests that run a worker use real committed data (``transaction=True``): the worker's slot
threads and subprocesses have their own connections and cannot see a test's open transaction.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.models import Model

from django_workqueue.models import Job
from django_workqueue.worker.runner import Worker
from tests.support.pgbouncer import (
    ADMIN_ENV,
    Pooler,
    admin,
    console_name,
    direct_server,
    release_server_connections,
)

# The jobs_alias fixture.
pytest_plugins = ["tests.support.jobs_database"]


def pytest_configure(config: pytest.Config) -> None:
    # The plugin users get from the package's pytest11 entry point; registered here too for
    # an environment installed before the entry point existed.
    from django_workqueue.testing import pytest_plugin

    if not config.pluginmanager.is_registered(pytest_plugin):
        config.pluginmanager.register(pytest_plugin, "django_workqueue")
    # tests/sample_project runs a user's suite in a subprocess with the pytester fixture.
    config.pluginmanager.import_plugin("pytester")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if connection.vendor != "postgresql":
        skip = pytest.mark.skip(
            reason="PostgreSQL only by design (set DATABASE_URL to a postgres://)"
        )
        marker = "postgres_only"
    elif os.environ.get(ADMIN_ENV):
        skip = pytest.mark.skip(reason="needs the test connection straight to PostgreSQL")
        marker = "postgres_direct"
    else:
        return
    for item in items:
        if item.get_closest_marker(marker):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None) -> Iterator[None]:
    """The test database, set up by pytest-django; through PgBouncer (tests/support/pgbouncer.py)
    the pooler's server connections to it are closed before pytest-django drops it."""
    yield
    if connection.vendor == "postgresql":
        release_server_connections(connection.settings_dict["NAME"])


@pytest.fixture(autouse=True)
def _no_retention_thread_left() -> Iterator[None]:
    """A run of retention a test started in the background (a maintainer's, on PostgreSQL)
    ends within the test: left running, it would delete in the next test's tables."""
    yield
    for thread in threading.enumerate():
        if thread.name == "workqueue-retention":
            thread.join(10)
            assert not thread.is_alive(), "a run of retention outlived its test"


@pytest.fixture
def small_pooler() -> Iterator[Pooler]:
    """A PgBouncer of this test's own (transaction pooling, 2 server connections per database)
    in front of the test server. PostgreSQL only."""
    host, port = direct_server()
    settings = connection.settings_dict
    pooler = Pooler(
        host=host, port=port, user=settings["USER"] or "postgres",
        password=settings["PASSWORD"] or "", pool_size=2,
    ).start()  # fmt: skip
    yield pooler
    with contextlib.suppress(Exception):  # the test database is dropped after this test
        admin(pooler.url("pgbouncer"), f"KILL {console_name(settings['NAME'])}")
    pooler.stop()


@pytest.fixture
def vendor() -> str:
    return connection.vendor


@pytest.fixture
def drain() -> Callable[..., Worker]:
    """Run a burst worker in this thread until no job is ready or running."""

    def run(**options: Any) -> Worker:
        options.setdefault("concurrency", 2)
        options.setdefault("poll_interval", 0.05)
        worker = Worker(burst=True, **options)
        worker.run()
        return worker

    return run


@pytest.fixture
def background_worker() -> Iterator[Callable[..., Worker]]:
    """Start workers on threads; each is stopped (gracefully) when the test ends."""
    started: list[tuple[Worker, threading.Thread]] = []

    def start(**options: Any) -> Worker:
        options.setdefault("concurrency", 2)
        options.setdefault("poll_interval", 0.05)
        worker = Worker(**options)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        assert worker.started.wait(10), "worker did not start"
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(30)
        assert not thread.is_alive(), "worker did not stop"


@pytest.fixture
def hold_row() -> Iterator[Callable[..., threading.Event]]:
    """Lock a job's row (or ``model``'s: ``hold_row(wf.pk, Workflow)``) ``FOR UPDATE`` in
    another session until the returned event is set."""
    releases: list[threading.Event] = []
    threads: list[threading.Thread] = []

    def hold(pk: int, model: type[Model] = Job) -> threading.Event:
        held, release = threading.Event(), threading.Event()

        def run() -> None:
            try:
                with transaction.atomic():
                    list(model._default_manager.select_for_update().filter(pk=pk))
                    held.set()
                    release.wait(30)
            finally:
                connections.close_all()

        thread = threading.Thread(target=run)
        thread.start()
        assert held.wait(10)
        releases.append(release)
        threads.append(thread)
        return release

    yield hold
    for release in releases:
        release.set()
    for thread in threads:
        thread.join(10)


@pytest.fixture
def fast_passwords(settings: Any) -> None:
    """A cheap password hasher: tests that log in (HTTP basic checks the password on every
    request) would spend most of their time in PBKDF2's million iterations."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
