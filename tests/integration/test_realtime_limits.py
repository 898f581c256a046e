"""What a websocket client cannot do: send big messages, flood the server, or make it queue
messages without bound when it reads slowly (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import pytest
from asgiref.sync import async_to_sync
from channels.auth import AuthMiddlewareStack
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from django.urls import path

from django_workqueue.realtime import messages
from django_workqueue.realtime.consumers import (
    CLOSE_FLOODING,
    CLOSE_TOO_LARGE,
    JobConsumer,
    Subscription,
)
from django_workqueue.realtime.events import EVENT_TYPE
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.users import VIEWER, user_with
from tests.support.websockets import (
    Communicator,
    closed_with,
    communicator,
    receive,
    session_cookie,
)

pytestmark = pytest.mark.django_db(transaction=True)

REPORTS = 90


@pytest.fixture
def viewer() -> bytes:
    return session_cookie(user_with(*VIEWER))


def test_a_message_over_4_kib_closes_the_connection_with_4413(viewer: bytes) -> None:
    job = JobFactory(running=True)

    async def scenario() -> None:
        socket = communicator(f"/ws/workqueue/jobs/{job.pk}/", viewer)
        assert (await socket.connect())[0]
        assert (await receive(socket))["event"] == "snapshot"
        await socket.send_to(text_data='{"type": "ping"}' + " " * 4096)
        assert await closed_with(socket) == CLOSE_TOO_LARGE

    async_to_sync(scenario)()


def test_pings_are_answered_until_a_client_sends_more_than_five_in_a_second(
    viewer: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = JobFactory(running=True)
    monkeypatch.setattr(Subscription, "clock", staticmethod(lambda: 1000.0))  # one instant

    async def scenario() -> None:
        socket = communicator(f"/ws/workqueue/jobs/{job.pk}/", viewer)
        assert (await socket.connect())[0]
        assert (await receive(socket))["event"] == "snapshot"
        for _ in range(Subscription.max_messages_per_second):
            await socket.send_json_to({"type": "ping"})
            assert await receive(socket) == {"type": "pong"}
        await socket.send_json_to({"type": "ping"})
        assert await closed_with(socket) == CLOSE_FLOODING

    async_to_sync(scenario)()


def test_the_message_window_slides_a_second_at_a_time(
    viewer: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = JobFactory(running=True)
    now = [1000.0]
    monkeypatch.setattr(Subscription, "clock", staticmethod(lambda: now[0]))

    async def scenario() -> None:
        socket = communicator(f"/ws/workqueue/jobs/{job.pk}/", viewer)
        assert (await socket.connect())[0]
        await receive(socket)
        for _ in range(3 * Subscription.max_messages_per_second):
            now[0] += 0.25  # four a second: under the limit
            await socket.send_to(text_data="hello")
            assert (await receive(socket))["type"] == "error"
        await socket.disconnect()

    async_to_sync(scenario)()


class SlowJobConsumer(JobConsumer):
    """A job consumer whose client takes nothing until ``gate`` opens, like a stalled socket."""

    gate: ClassVar[asyncio.Event]
    instances: ClassVar[list[SlowJobConsumer]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.instances.append(self)

    async def send(
        self, text_data: Any = None, bytes_data: Any = None, close: bool = False
    ) -> None:
        await self.gate.wait()
        await super().send(text_data=text_data, bytes_data=bytes_data, close=close)


def test_a_slow_client_gets_the_latest_progress_not_a_backlog(viewer: bytes) -> None:
    job = JobFactory(running=True, attempt=1, progress_current=0, progress_total=REPORTS)
    application = AuthMiddlewareStack(
        URLRouter([path("ws/workqueue/jobs/<int:job_id>/", SlowJobConsumer.as_asgi())])
    )
    SlowJobConsumer.instances.clear()

    async def scenario() -> None:
        SlowJobConsumer.gate = asyncio.Event()
        socket = Communicator(
            application, f"/ws/workqueue/jobs/{job.pk}/", headers=[(b"cookie", viewer)]
        )
        assert (await socket.connect())[0]
        for _ in range(2000):  # until it has joined the job's group and read the snapshot
            if SlowJobConsumer.instances and SlowJobConsumer.instances[0].sender is not None:
                break
            await asyncio.sleep(0.01)
        layer = get_channel_layer()
        # 90 reports: the in-memory layer holds 100 messages per channel.
        for n in range(1, REPORTS + 1):
            report = {"attempt": 1, "current": n, "total": REPORTS, "message": f"row {n}",
                      "details": None}  # fmt: skip
            await layer.group_send(
                messages.job_group(job.pk),
                {"type": EVENT_TYPE, "event": "progress", "job_id": job.pk, "progress": report},
            )
        consumer = SlowJobConsumer.instances[0]
        for _ in range(2000):  # until the consumer has taken every report off the layer
            if consumer.state and consumer.state["progress"]["current"] == REPORTS:
                break
            await asyncio.sleep(0.01)
        assert consumer.state is not None and consumer.state["progress"]["current"] == REPORTS
        assert len(consumer.outbox) == 1  # the older reports were replaced, none queued
        SlowJobConsumer.gate.set()
        first, second = await receive(socket), await receive(socket)
        assert first["event"] == "snapshot" and first["job"]["progress"]["current"] == 0
        assert second["event"] == "progress" and second["job"]["progress"]["current"] == REPORTS
        await socket.send_json_to({"type": "ping"})
        assert await receive(socket) == {"type": "pong"}  # nothing else was waiting
        await socket.disconnect()

    with workqueue_settings(REALTIME="channel_layer"):
        async_to_sync(scenario)()
