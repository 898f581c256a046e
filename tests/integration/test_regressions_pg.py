"""Regressions found by the PostgreSQL faults of the battery (tests/chaos/test_postgres_faults.py,
tests/chaos/test_connection_budget.py), each reduced to a test that needs no server fault.

- A worker that lost its connection retried every 50 ms, not at its backoff, once a lease
  renewal was due (at once when it held jobs, within 10 s when idle): some 20 connection attempts
  per second against a database that was down or refusing it, while its log said "retrying in
  5.0s". Vendor-neutral, so it runs on both databases.
- ``runworker`` exited (status 1, a traceback) when the database could not be reached at start,
  so under a supervisor a database restart made workers crash-loop (systemd gives up after a
  few quick failures).
- Every connection a worker opens is named ``workqueue:<worker id>`` (PostgreSQL's
  ``application_name``), its listener's too, also on ``LISTEN_DSN``: ``pg_stat_activity`` shows
  which backends are whose (the battery counts a worker's connection budget that way).
"""

from __future__ import annotations

import signal
import socket
import time
from typing import Any

import pytest
from django.db import OperationalError, connection
from psycopg.conninfo import make_conninfo

from django_workqueue.models import Job
from django_workqueue.worker import wakeup
from testproject.testapp.tasks import record, sleep_for
from tests.support.database import fresh
from tests.support.processes import RunworkerProcess, wait_for, worker_environment
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_lost_connection_is_retried_at_the_backoff_pace(background_worker: Any) -> None:
    worker = background_worker(concurrency=1, poll_interval=0.05)
    job = sleep_for.enqueue(2.5)  # a 2 s lease: a renewal is due every 0.67 s while it runs
    wait_until(lambda: fresh(job).status == "running", timeout=20)
    attempts: list[float] = []
    refusing = True
    ensure_session = worker._ensure_session

    def refused() -> None:  # what a stopped or refusing server answers
        if refusing:
            attempts.append(time.monotonic())
            raise OperationalError("connection failed: Connection refused")
        ensure_session()

    worker._ensure_session = refused
    try:
        wait_until(lambda: len(attempts) >= 8, timeout=30, message="8 attempts to reconnect")
    finally:
        refusing = False
    # The backoff doubles from 0.1 s, capped by the renewal interval (0.67 s here): the eighth
    # attempt comes 0.1 + 0.2 + 0.4 + 4 x 0.67 = 3.4 s after the first. It came after 0.8 s
    # when every attempt past a due renewal followed the last by 50 ms.
    assert attempts[7] - attempts[0] >= 2.5, [round(t - attempts[0], 2) for t in attempts]
    wait_until(lambda: fresh(job).status == "succeeded", timeout=30)


@pytest.mark.postgres_only  # a server that cannot be reached; SQLite has none
def test_runworker_waits_for_a_database_it_cannot_reach(tmp_path: Any) -> None:
    with socket.socket() as probe:  # bound but never listening: connections to it are refused
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings_dict = {**connection.settings_dict, "HOST": "127.0.0.1", "PORT": port}
    worker = RunworkerProcess("unreachable", [], worker_environment(settings_dict), tmp_path)
    try:
        wait_for(
            lambda: worker.stderr.count("cannot be reached") >= 3, alive=[worker], timeout=60,
            message="3 attempts to reach the database",
        )  # fmt: skip
        assert "Traceback" not in worker.stderr
        worker.send(signal.SIGTERM)  # still stoppable while it waits, and cleanly
        assert worker.wait(timeout=30) == 0
        assert "stopped while waiting for the database" in worker.stdout
    finally:
        worker.kill()


@pytest.mark.postgres_only  # application_name and pg_stat_activity are PostgreSQL's
def test_every_connection_of_a_worker_carries_its_name(background_worker: Any) -> None:
    worker = background_worker(concurrency=2, poll_interval=0.05)
    held = [sleep_for.enqueue(1.5), sleep_for.enqueue(1.5)]  # each slot opens its connection
    wait_until(lambda: Job.objects.filter(status="running").count() == 2, timeout=20)
    name = f"workqueue:{worker.id}"

    def sessions() -> list[tuple[str, str]]:
        """(application_name, last query) of every other session of the test database (this
        test's own database: only this test's worker connects to it)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT application_name, query FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND backend_type = 'client backend'"
            )
            return cursor.fetchall()

    def queries_when_all_four_are_up() -> list[str] | None:
        queries = [query for app, query in sessions() if app == name]
        return queries if len(queries) == 4 else None

    # The control thread, two slots and the listener: concurrency + 2, all named.
    queries = wait_until(queries_when_all_four_are_up, timeout=20, message="4 named sessions")
    assert sum(query.startswith("LISTEN") for query in queries) == 1
    # No session without the name (a stopped worker of an earlier test lets go within 1 s).
    wait_until(lambda: all(app == name for app, _ in sessions()), timeout=10)
    for job in held:
        wait_until(lambda job=job: fresh(job).status == "succeeded", timeout=30)
    later = record.enqueue("after")  # later jobs reuse the slots' connections: no new ones
    wait_until(lambda: fresh(later).status == "succeeded", timeout=30)
    assert len([app for app, _ in sessions() if app == name]) == 4


@pytest.mark.postgres_only  # LISTEN and application_name are PostgreSQL's
def test_a_listener_on_its_own_dsn_carries_the_worker_name_too(
    background_worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wakeup, "wake", lambda queues: None)  # only NOTIFY can wake it
    db = connection.settings_dict
    dsn = make_conninfo(
        host=db["HOST"] or "127.0.0.1", port=db["PORT"] or 5432, dbname=db["NAME"],
        user=db["USER"], password=db["PASSWORD"] or None, application_name="from-the-dsn",
    )  # fmt: skip
    with workqueue_settings(LISTEN_DSN=dsn):
        worker = background_worker(concurrency=1, poll_interval=30)

    def listener_names() -> list[str]:
        """application_name of every LISTEN backend (a listener of an earlier test's worker may
        still be closing: only this worker's must carry this worker's name)."""
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() "
                "AND query LIKE 'LISTEN%%' AND pid <> pg_backend_pid()"
            )
            return [row[0] for row in cursor.fetchall()]

    name = f"workqueue:{worker.id}"
    wait_until(lambda: name in listener_names(), timeout=20, message=f"a listener named {name}")
    assert "from-the-dsn" not in listener_names()
    job = record.enqueue("woken")  # polling every 30 s: NOTIFY wakes it through that listener
    wait_until(lambda: fresh(job).status == "succeeded", timeout=8)
