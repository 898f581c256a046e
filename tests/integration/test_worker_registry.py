"""The worker registry (SQLite and PostgreSQL): each live worker's row shows where it runs, what
it serves and how many jobs it runs now; the reaper removes the rows of workers long gone."""

from __future__ import annotations

import datetime as dt
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from django_workqueue.maintenance.reaper import Reaper
from django_workqueue.models import WorkerProcess
from tests.support import observability_tasks
from tests.support.database import db_now
from tests.support.observability_tasks import waits_for_gate
from tests.support.settings import workqueue_settings
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gate() -> Iterator[Any]:
    observability_tasks.gate.clear()
    yield observability_tasks.gate
    observability_tasks.gate.set()


def row(worker_id: str) -> WorkerProcess:
    return WorkerProcess.objects.get(pk=worker_id)


def test_a_workers_row_shows_where_it_runs_and_the_jobs_it_runs_now(
    background_worker: Any, gate: Any
) -> None:
    with workqueue_settings(HEARTBEAT_INTERVAL=0.05):
        worker = background_worker(concurrency=3, queues=["default"])
        first, second = waits_for_gate.enqueue(), waits_for_gate.enqueue()
        wait_until(lambda: row(worker.id).running == 2, message="a heartbeat showing 2 jobs")
        registered = row(worker.id)
        assert (registered.host, registered.pid, registered.queues) == (
            socket.gethostname(), os.getpid(), ["default"],
        )  # fmt: skip
        assert registered.concurrency == 3
        assert registered.started_at <= registered.last_seen_at

        gate.set()
        first.wait(), second.wait()
        wait_until(lambda: row(worker.id).running == 0, message="a heartbeat showing 0 jobs")
        assert row(worker.id).last_seen_at > registered.last_seen_at


def test_the_reaper_removes_the_rows_of_workers_gone_for_five_minutes() -> None:
    now = db_now()
    for worker_id, seen_ago in (("gone", 301), ("late", 299), ("live", 0)):
        WorkerProcess.objects.create(
            id=worker_id, host="h", pid=1, queues=["default"], concurrency=1,
            last_seen_at=now - dt.timedelta(seconds=seen_ago),
        )  # fmt: skip

    Reaper("default", interval=1.0).run_once(now=now)

    assert sorted(WorkerProcess.objects.values_list("id", flat=True)) == ["late", "live"]


def test_a_worker_that_stops_removes_its_own_row(background_worker: Any) -> None:
    worker = background_worker()
    assert WorkerProcess.objects.filter(pk=worker.id).exists()
    worker.stop()
    wait_until(lambda: not WorkerProcess.objects.filter(pk=worker.id).exists())
