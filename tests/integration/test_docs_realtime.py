"""The realtime guide says what the code does: its channel-layer settings pass the checks and
reach Redis, its close codes are the consumers', and its example messages have the shape the
websockets send."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings

from django_workqueue.checks import check_settings
from django_workqueue.realtime import consumers, messages
from tests.support.factories import JobFactory
from tests.support.guides import Guide
from tests.support.settings import workqueue_settings
from tests.support.users import VIEWER, user_with
from tests.support.websockets import communicator, receive, session_cookie

GUIDE = Guide("realtime")


def settings_example() -> dict[str, Any]:
    [(_, code)] = GUIDE.blocks("channel-layer-settings", "python")
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    return namespace


def test_the_channel_layer_example_passes_the_checks() -> None:
    example = settings_example()
    with (
        override_settings(CHANNEL_LAYERS=example["CHANNEL_LAYERS"]),
        workqueue_settings(**example["WORKQUEUE"]),
    ):
        assert [m for m in check_settings() if "REALTIME" in m.msg] == []


def test_the_channel_layer_example_waits_on_redis_longer_than_5_seconds() -> None:
    """With redis-py 8, a layer without the socket timeout drops an idle socket after 5 s."""
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=1).close()
    except OSError:
        pytest.skip("no Redis at 127.0.0.1:6379")
    from channels.layers import get_channel_layer

    layers = settings_example()["CHANNEL_LAYERS"]
    layers["default"]["CONFIG"]["prefix"] = "wqdocs"

    async def idle_receive() -> Any:
        layer = get_channel_layer()
        channel = await layer.new_channel()

        async def later() -> None:
            await asyncio.sleep(6)
            await layer.send(channel, {"type": "hello"})

        sender = asyncio.ensure_future(later())
        message = await layer.receive(channel)
        await sender
        return message

    with override_settings(CHANNEL_LAYERS=layers):
        assert async_to_sync(idle_receive)() == {"type": "hello"}


def test_the_close_codes_table_is_the_consumers() -> None:
    _, table = GUIDE.section("close-codes")
    documented = {int(code) for code in re.findall(r"^\| (\d{4}) \|", table, re.M)}
    actual = {value for name, value in vars(consumers).items() if name.startswith("CLOSE_")}
    assert documented == actual


@pytest.mark.django_db(transaction=True)
def test_the_example_messages_have_the_shape_the_websockets_send() -> None:
    examples = [
        json.loads(line)
        for _, block in GUIDE.blocks("messages", "json")
        for line in re.split(r"\n(?=\{)", block.strip())
    ]
    job_example = next(m for m in examples if m["type"] == "job" and "progress" in m["job"])
    workflow_example = next(m for m in examples if m["type"] == "workflow")
    job = JobFactory(running=True, progress_current=1, progress_total=2)
    cookie = session_cookie(user_with(*VIEWER))

    async def first(path: str) -> dict[str, Any]:
        socket = communicator(path, cookie)
        assert (await socket.connect())[0]
        message = await receive(socket)
        await socket.disconnect()
        return message

    sent = async_to_sync(first)(f"/ws/workqueue/jobs/{job.pk}/")
    assert set(sent) == set(job_example)
    assert set(sent["job"]) == set(job_example["job"])
    assert set(sent["job"]["progress"]) == set(job_example["job"]["progress"])
    assert set(workflow_example["workflow"]) == set(messages.WORKFLOW_FIELDS)
