"""The database-following delivery (``WORKQUEUE["REALTIME"] = "database"``, the default): with
a real worker running jobs, the websockets report each change, in order, from the rows alone
(SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from django_workqueue.models import Workflow
from django_workqueue.realtime.follower import follower
from testproject.testapp.tasks import send_mail
from tests.support import realtime_tasks
from tests.support.realtime_tasks import reports_in_steps
from tests.support.settings import workqueue_settings
from tests.support.users import VIEWER, user_with
from tests.support.websockets import communicator, receive, session_cookie, until

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = 5


@pytest.fixture(autouse=True)
def quick_following() -> Iterator[None]:
    with workqueue_settings(REALTIME="database", REALTIME_POLL_INTERVAL=0.05,
                            PROGRESS_INTERVAL=0.05):  # fmt: skip
        yield


@pytest.fixture
def steps() -> Iterator[Any]:
    while realtime_tasks.steps.acquire(blocking=False):  # no permits left from another test
        pass
    yield realtime_tasks.steps
    for _ in range(STEPS):  # a failed test must not leave the job waiting for its 30 s
        realtime_tasks.steps.release()


def test_progress_arrives_in_order_and_each_user_sees_what_they_may(
    background_worker: Callable[..., Any], steps: Any
) -> None:
    job = reports_in_steps.enqueue(STEPS, secret="s3cr3t")
    operator = session_cookie(user_with("view_job", "view_job_payload", username="operator"))
    viewer = session_cookie(user_with(*VIEWER, username="viewer"))

    async def scenario() -> list[dict[str, Any]]:
        full = communicator(f"/ws/workqueue/jobs/{job.pk}/", operator)
        redacted = communicator(f"/ws/workqueue/jobs/{job.pk}/", viewer)
        assert (await full.connect())[0] and (await redacted.connect())[0]
        first = await receive(full)
        assert first["event"] == "snapshot" and first["job"]["status"] == "ready"
        await sync_to_async(background_worker)(concurrency=1)
        seen = [first]
        step = 0
        while True:
            message = await receive(full)
            seen.append(message)
            if message["job"]["status"] == "succeeded":
                break
            current = message["job"]["progress"]["current"]
            if current is not None and current > step:
                step = current
                steps.release()  # let the task report its next step
        ended = await until(redacted, lambda m: m["job"]["status"] == "succeeded")
        last = ended[-1]["job"]["progress"]
        assert "s3cr3t" not in last["message"] and last["message"].startswith(f"step {STEPS}")
        assert last["details"] is None
        await full.disconnect()
        await redacted.disconnect()
        return seen

    seen = async_to_sync(scenario)()
    # A report may come with the status change that preceded it (ready -> running with step 1
    # in one poll): every distinct report, in the order the messages came.
    reports: list[tuple[Any, ...]] = []
    for m in seen:
        progress = m["job"]["progress"]
        report = (progress["current"], progress["message"], progress["details"])
        if progress["current"] is not None and (not reports or reports[-1] != report):
            reports.append(report)
    assert reports == [
        (n, f"step {n} token=s3cr3t", {"step": n}) for n in range(1, STEPS + 1)
    ]  # every step, in order, in full for the payload permission
    assert [m["job"]["status"] for m in seen][-1] == "succeeded"
    assert seen[-1]["job"]["progress"]["current"] == STEPS


def test_a_workflow_follower_hears_its_counters_change() -> None:
    workflow = Workflow.objects.create(name="nightly", total=2, open=2)
    viewer = session_cookie(user_with(*VIEWER))

    async def scenario() -> None:
        socket = communicator(f"/ws/workqueue/workflows/{workflow.pk}/", viewer)
        assert (await socket.connect())[0]
        first = await receive(socket)
        assert first == {"type": "workflow", "event": "snapshot", "workflow": {
            "id": workflow.pk, "name": "nightly", "status": "running", "total": 2, "open": 2,
            "succeeded": 0, "failed": 0, "cancelled": 0,
        }}  # fmt: skip
        await sync_to_async(Workflow.objects.filter(pk=workflow.pk).update)(open=1, succeeded=1)
        changed = await receive(socket)
        assert changed["event"] == "changed"
        assert (changed["workflow"]["open"], changed["workflow"]["succeeded"]) == (1, 1)
        await socket.disconnect()

    async_to_sync(scenario)()


async def bearings_taken(queue: str) -> None:
    """Wait until this loop's follower has had its first round for ``queue`` (the jobs written
    after it are new to the stream)."""
    for _ in range(2000):
        watch = follower().queues.get(queue)
        if watch is not None and watch.after_id is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"the follower never took its bearings on queue {queue!r}")


def test_a_queue_stream_reports_a_job_from_enqueue_to_its_end(
    background_worker: Callable[..., Any],
) -> None:
    viewer = session_cookie(user_with(*VIEWER))

    async def scenario() -> list[dict[str, Any]]:
        socket = communicator("/ws/workqueue/queues/mail/", viewer)
        assert (await socket.connect())[0]
        assert (await receive(socket))["type"] == "queue"
        await bearings_taken("mail")
        job = await sync_to_async(send_mail.enqueue)("ada@example.com")
        await sync_to_async(background_worker)(queues=["mail"], concurrency=1)
        seen = await until(
            socket, lambda m: m["job"]["id"] == job.pk and m["job"]["status"] == "succeeded"
        )
        await socket.disconnect()
        return [m for m in seen if m["job"]["id"] == job.pk]

    events = async_to_sync(scenario)()
    assert events[-1]["event"] == "succeeded"
    assert {m["job"]["queue"] for m in events} == {"mail"}
    assert set(events[-1]["job"]) == {"id", "task_name", "queue", "status", "attempt",
                                      "workflow_id"}  # fmt: skip
    # Whatever the first round saw, statuses only move forward.
    order = ["ready", "running", "succeeded"]
    assert [order.index(m["job"]["status"]) for m in events] == sorted(
        order.index(m["job"]["status"]) for m in events
    )


def test_one_follower_serves_every_connection_and_stops_with_the_last() -> None:
    workflow = Workflow.objects.create(name="w", total=1, open=1)
    viewer = session_cookie(user_with(*VIEWER))

    async def scenario() -> None:
        sockets = [communicator(f"/ws/workqueue/workflows/{workflow.pk}/", viewer)
                   for _ in range(3)]  # fmt: skip
        for socket in sockets:
            assert (await socket.connect())[0]
            await receive(socket)
        shared = follower()
        assert len(shared.subscribers[("workflow", workflow.pk)]) == 3
        task = shared.task
        assert task is not None and not task.done()
        for socket in sockets:
            await socket.disconnect()
        assert shared.subscribers == {} and shared.task is None
        with pytest.raises(asyncio.CancelledError):
            await task

    async_to_sync(scenario)()


def test_a_job_enqueued_before_the_stream_began_is_reported_when_it_starts(
    background_worker: Callable[..., Any], steps: Any
) -> None:
    job = reports_in_steps.enqueue(1)
    viewer = session_cookie(user_with(*VIEWER))

    async def scenario() -> list[dict[str, Any]]:
        socket = communicator("/ws/workqueue/queues/default/", viewer)
        assert (await socket.connect())[0]
        await receive(socket)
        await bearings_taken("default")
        await sync_to_async(background_worker)(concurrency=1)
        started = await until(socket, lambda m: m["job"]["id"] == job.pk)
        steps.release()  # the job waits, running, until the stream has seen it
        ended = await until(
            socket, lambda m: m["job"]["id"] == job.pk and m["job"]["status"] == "succeeded"
        )
        await socket.disconnect()
        return [m for m in started + ended if m["job"]["id"] == job.pk]

    seen = async_to_sync(scenario)()
    assert [(m["event"], m["job"]["status"]) for m in seen] == [
        ("started", "running"), ("succeeded", "succeeded"),
    ]  # fmt: skip
