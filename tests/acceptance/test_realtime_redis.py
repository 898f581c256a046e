"""Worker → web across processes through Redis: a real ``runworker`` subprocess publishes its
signals to channels-redis (``WORKQUEUE["REALTIME"] = "channel_layer"``), and a websocket in this
process hears the job start, report progress in order, and succeed.

This process does not follow the database in that mode: every message after the snapshot came
through Redis. Needs Redis at 127.0.0.1:6379 (skipped if none answers).
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.test import override_settings

from django_workqueue.realtime import follower
from testproject.demo.tasks import crunch_numbers
from tests.support.processes import StartWorker
from tests.support.settings import workqueue_settings
from tests.support.users import user_with
from tests.support.websockets import communicator, receive, session_cookie, until

pytestmark = [pytest.mark.acceptance, pytest.mark.django_db(transaction=True)]

REDIS_URL = "redis://127.0.0.1:6379"
STEPS = 8


def redis_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 6379), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def prefix() -> Iterator[str]:
    """A channel-layer prefix of this test's own: parallel runs share the Redis server."""
    if not redis_answers():
        pytest.skip("no Redis at 127.0.0.1:6379")
    name = f"wqtest{uuid.uuid4().hex[:12]}"
    layers = {"default": {"BACKEND": "channels_redis.core.RedisChannelLayer",
                          "CONFIG": {"hosts": [{"address": REDIS_URL, "socket_timeout": 30}],
                                     "prefix": name}}}  # fmt: skip
    with override_settings(CHANNEL_LAYERS=layers), workqueue_settings(REALTIME="channel_layer"):
        yield name


def test_a_worker_process_publishes_progress_to_a_websocket_in_this_one(
    start_worker: StartWorker, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_database_following(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the channel_layer mode must not follow the database")

    monkeypatch.setattr(follower.Follower, "subscribe", no_database_following)
    job = crunch_numbers.enqueue(seconds=1.6, steps=STEPS)
    cookie = session_cookie(user_with("view_job", "view_job_payload"))
    env = {"REDIS_URL": REDIS_URL, "CHANNELS_PREFIX": prefix, "WORKQUEUE_REALTIME": "channel_layer"}

    async def scenario() -> list[dict[str, Any]]:
        socket = communicator(f"/ws/workqueue/jobs/{job.pk}/", cookie)
        assert (await socket.connect())[0]
        first = await receive(socket)
        assert (first["event"], first["job"]["status"]) == ("snapshot", "ready")
        await sync_to_async(start_worker)("--queues", "reports", "--burst", env=env)
        seen = await until(socket, lambda m: m["job"]["status"] == "succeeded", timeout=60)
        await socket.disconnect()
        return seen

    seen = async_to_sync(scenario)()
    kinds = [m["event"] for m in seen]
    assert kinds[0] == "started" and kinds[-1] == "succeeded", kinds
    progress = [m["job"]["progress"]["current"] for m in seen if m["event"] == "progress"]
    assert progress, "no progress report came through Redis"
    assert progress == sorted(progress) and set(progress) <= set(range(1, STEPS + 1))
    assert seen[-1]["job"]["progress"] == {
        "current": STEPS, "total": STEPS, "message": f"crunched block {STEPS} of {STEPS}",
        "details": {"block": STEPS},
    }  # fmt: skip
