"""``operations.workers()`` and ``operations.scale_worker`` against registration rows (SQLite and
PostgreSQL): who is live, what a request writes, and the errors that name the fix. Workers
applying a request are covered in ``test_worker_slots``."""

from __future__ import annotations

import datetime as dt

import pytest

from django_workqueue import operations
from django_workqueue.exceptions import InvalidSlots, UnknownWorker
from django_workqueue.models import WorkerProcess
from django_workqueue.worker.slots import MAX_SLOTS
from tests.support.database import db_now

pytestmark = pytest.mark.django_db


def registered(worker_id: str, **fields) -> WorkerProcess:
    fields.setdefault("concurrency", 4)
    return WorkerProcess.objects.create(id=worker_id, host="h", pid=1, queues=["default"], **fields)


def requested(worker_id: str) -> int | None:
    return WorkerProcess.objects.get(pk=worker_id).requested_concurrency


def test_workers_lists_the_workers_seen_lately():
    registered("live")
    registered("gone")
    WorkerProcess.objects.filter(pk="gone").update(last_seen_at=db_now() - dt.timedelta(minutes=10))

    assert [w.id for w in operations.workers()] == ["live"]


def test_scale_worker_writes_the_request_for_the_workers_heartbeat():
    registered("w1")

    result = operations.scale_worker("w1", 12)

    assert (result.action, result.count) == ("scale_requested", 1)
    assert "w1: 12 slots requested (applied at its next heartbeat)" in result.message
    assert requested("w1") == 12
    assert WorkerProcess.objects.get(pk="w1").concurrency == 4  # until the worker applies it


def test_scale_worker_of_an_unknown_worker_names_the_fix():
    with pytest.raises(UnknownWorker, match=r"no worker 'nope' is registered .*workers\(\)"):
        operations.scale_worker("nope", 2)


@pytest.mark.parametrize("slots", [0, -1, MAX_SLOTS + 1, 2.5, "4", True, None])
def test_scale_worker_refuses_a_number_no_worker_can_take(slots):
    registered("w1")

    with pytest.raises(InvalidSlots, match=f"slots must be a whole number from 1 to {MAX_SLOTS}"):
        operations.scale_worker("w1", slots)
    assert requested("w1") is None


def test_scale_worker_keeps_an_autoscaling_worker_within_its_range():
    registered("auto", concurrency=2, concurrency_min=2, concurrency_max=8)

    with pytest.raises(InvalidSlots, match="autoscales between 2 and 8 slots; ask for a number"):
        operations.scale_worker("auto", 9)
    assert requested("auto") is None
    operations.scale_worker("auto", 8)
    assert requested("auto") == 8


def test_scale_worker_refuses_a_worker_with_slots_per_queue():
    registered("budgets", concurrency=10, queue_slots={"default": 8, "mail": 2})

    with pytest.raises(InvalidSlots, match=r"slots per queue .* restart it with other --queues"):
        operations.scale_worker("budgets", 4)
    assert requested("budgets") is None
