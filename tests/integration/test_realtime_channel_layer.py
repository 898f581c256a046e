"""The channel-layer delivery (``WORKQUEUE["REALTIME"] = "channel_layer"``) on the in-memory
layer: the signals a change sends reach the job's, the workflow's and the queue's groups, and
from there the websockets (SQLite and PostgreSQL).

The signals are sent the way an ASGI server's thread sends them (inside ``sync_to_async``), so
they are published on the test's event loop; the worker's publisher thread and Redis are the
acceptance test's part (tests/acceptance/test_realtime_redis.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import override_settings

from django_workqueue import signalling, signals
from django_workqueue.models import Job, Workflow
from django_workqueue.operations import cancel_job, send_signal
from django_workqueue.realtime import events
from django_workqueue.testing import drain as drain_here
from testproject.testapp.tasks import send_mail
from tests.support import durable_tasks
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.users import VIEWER, user_with
from tests.support.websockets import communicator, receive, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def channel_layer_mode() -> Iterator[None]:
    layers = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    with override_settings(CHANNEL_LAYERS=layers), workqueue_settings(REALTIME="channel_layer"):
        events.connect()
        yield
        events.disconnect()


@pytest.fixture
def viewer() -> bytes:
    return session_cookie(user_with(*VIEWER))


def report(job: Job, current: int, message: str, attempt: int = 1) -> None:
    signalling.send(signals.job_progress, job_id=job.pk, task_name=job.task_name, attempt=attempt,
                 current=current, total=4, message=message, details={"n": current})  # fmt: skip


def test_progress_signals_reach_the_jobs_websocket_in_order_and_redacted(viewer: bytes) -> None:
    job = JobFactory(running=True, attempt=1)

    async def scenario() -> list[dict[str, Any]]:
        socket = communicator(f"/ws/workqueue/jobs/{job.pk}/", viewer)
        assert (await socket.connect())[0]
        assert (await receive(socket))["event"] == "snapshot"
        seen = []
        for n in range(1, 5):
            await sync_to_async(report)(job, n, f"part {n} password=hunter2")
            seen.append(await receive(socket))
        await socket.disconnect()
        return seen

    seen = async_to_sync(scenario)()
    assert [m["event"] for m in seen] == ["progress"] * 4
    assert [m["job"]["progress"]["current"] for m in seen] == [1, 2, 3, 4]
    assert all("hunter2" not in m["job"]["progress"]["message"] for m in seen)
    assert all(m["job"]["progress"]["details"] is None for m in seen)


def test_a_late_report_of_an_earlier_attempt_is_ignored(viewer: bytes) -> None:
    job = JobFactory(running=True, attempt=2)

    async def scenario() -> dict[str, Any]:
        socket = communicator(f"/ws/workqueue/jobs/{job.pk}/", viewer)
        assert (await socket.connect())[0]
        await receive(socket)
        await sync_to_async(report)(job, 3, "old attempt", attempt=1)
        await sync_to_async(report)(job, 1, "this attempt", attempt=2)
        message = await receive(socket)
        await socket.disconnect()
        return message

    message = async_to_sync(scenario)()
    assert message["job"]["progress"]["message"] == "this attempt"


def test_a_cancellation_reaches_the_job_and_its_queue_as_the_row_says(viewer: bytes) -> None:
    job = JobFactory(queue="mail")

    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        one = communicator(f"/ws/workqueue/jobs/{job.pk}/", viewer)
        stream = communicator("/ws/workqueue/queues/mail/", viewer)
        assert (await one.connect())[0] and (await stream.connect())[0]
        await receive(one)
        await receive(stream)
        await sync_to_async(cancel_job)(job)
        result = await receive(one), await receive(stream)
        await one.disconnect()
        await stream.disconnect()
        return result

    on_job, on_queue = async_to_sync(scenario)()
    assert (on_job["event"], on_job["job"]["status"]) == ("cancelled", "cancelled")
    assert on_queue == {"type": "job", "event": "cancelled", "job": {
        "id": job.pk, "task_name": job.task_name, "queue": "mail", "status": "cancelled",
        "attempt": job.attempt, "workflow_id": None,
    }}  # fmt: skip


def test_an_enqueue_reaches_the_queue_stream_once_committed(viewer: bytes) -> None:
    async def scenario() -> tuple[dict[str, Any], int]:
        stream = communicator("/ws/workqueue/queues/mail/", viewer)
        assert (await stream.connect())[0]
        await receive(stream)
        job = await sync_to_async(send_mail.enqueue)("ada@example.com")
        message = await receive(stream)
        await stream.disconnect()
        return message, job.pk

    message, job_id = async_to_sync(scenario)()
    assert message["event"] == "enqueued"
    assert (message["job"]["id"], message["job"]["status"]) == (job_id, "ready")


def test_a_workflows_end_and_its_jobs_changes_reach_its_websocket(viewer: bytes) -> None:
    workflow = Workflow.objects.create(name="w", total=1, open=1)
    job = JobFactory(workflow=workflow)

    async def scenario() -> list[dict[str, Any]]:
        socket = communicator(f"/ws/workqueue/workflows/{workflow.pk}/", viewer)
        assert (await socket.connect())[0]
        await receive(socket)
        await sync_to_async(Workflow.objects.filter(pk=workflow.pk).update)(open=0, cancelled=1)
        await sync_to_async(signalling.send)(signals.job_cancelled, job_id=job.pk,
                                          task_name=job.task_name, queue=job.queue, attempt=0,
                                          worker_id=None)  # fmt: skip
        changed = await receive(socket)
        await sync_to_async(Workflow.objects.filter(pk=workflow.pk).update)(status="cancelled")
        await sync_to_async(signalling.send)(signals.workflow_finished, sender=Workflow,
                                          workflow_id=workflow.pk, status="cancelled")  # fmt: skip
        finished = await receive(socket)
        await socket.disconnect()
        return [changed, finished]

    changed, finished = async_to_sync(scenario)()
    assert changed["event"] == "changed" and changed["workflow"]["cancelled"] == 1
    assert (finished["event"], finished["workflow"]["status"]) == ("finished", "cancelled")


def test_progress_reports_in_one_batch_are_coalesced_per_job() -> None:
    """The publisher keeps the latest report of each job in a batch (a tight loop of reports
    costs one group message)."""
    job = JobFactory(running=True)
    batch = [("progress", {"job_id": job.pk, "attempt": 1, "current": n}) for n in range(50)]
    sends = events.resolve(batch)
    assert [(group, message["progress"]["current"]) for group, message in sends] == [
        (f"workqueue.job.{job.pk}", 49)
    ]


def test_a_job_parked_for_a_signal_and_woken_by_it_reaches_its_websocket(viewer: bytes) -> None:
    """running -> waiting (its wait parks it) and waiting -> ready (the signal arrives) are
    pushed, each with the status as the row says."""
    job = durable_tasks.waits_for_approval.enqueue()

    async def scenario() -> list[dict[str, Any]]:
        socket = communicator(f"/ws/workqueue/jobs/{job.pk}/", viewer)
        assert (await socket.connect())[0]
        await receive(socket)
        await sync_to_async(drain_here)()
        seen = [await receive(socket)]
        while seen[-1]["job"]["status"] != "waiting":
            seen.append(await receive(socket))
        await sync_to_async(send_signal)(job, "approve", {"by": "ada"})
        seen.append(await receive(socket))
        await socket.disconnect()
        return seen

    seen = async_to_sync(scenario)()
    assert [(m["event"], m["job"]["status"]) for m in seen][-2:] == [
        ("snoozed", "waiting"),
        ("woken", "ready"),
    ]
