"""An open websocket checks its user again every ``access_check_seconds``: a user who logs out,
is deactivated or loses ``view_job`` stops receiving (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from django.contrib.auth.models import User
from django.test import Client

from django_workqueue.realtime import consumers
from django_workqueue.realtime.consumers import (
    CLOSE_FORBIDDEN,
    CLOSE_UNAUTHENTICATED,
    Subscription,
)
from tests.support.factories import JobFactory
from tests.support.users import VIEWER, user_with
from tests.support.websockets import closed_with, communicator, receive

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_passwords")]


@pytest.fixture(autouse=True)
def frequent_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Subscription, "access_check_seconds", 0.05)


def logged_in(user: User) -> tuple[Client, bytes]:
    client = Client()
    client.force_login(user)
    return client, f"sessionid={client.cookies['sessionid'].value}".encode()


def closed_after(change: Any, route: str = "jobs/{job}/") -> int | None:
    """The close code of a viewer's socket after ``change(user, client)`` ran on it."""
    user = user_with(*VIEWER)
    client, cookie = logged_in(user)
    job = JobFactory(running=True)

    async def scenario() -> int | None:
        socket = communicator("/ws/workqueue/" + route.format(job=job.pk), cookie)
        assert (await socket.connect())[0]
        assert (await receive(socket))["event"] == "snapshot"
        await database_sync_to_async(change)(user, client)
        code = await closed_with(socket)
        await socket.disconnect()
        return code

    return async_to_sync(scenario)()


@pytest.mark.parametrize("route", ["jobs/{job}/", "workflows/{job}/", "queues/default/"])
def test_a_user_who_loses_view_job_is_closed_with_4403(route: str) -> None:
    if route.startswith("workflows"):
        from django_workqueue.models import Workflow

        route = f"workflows/{Workflow.objects.create(name='w').pk}/"

    def revoke(user: User, client: Client) -> None:
        user.user_permissions.clear()

    assert closed_after(revoke, route) == CLOSE_FORBIDDEN


def test_a_user_who_logs_out_is_closed_with_4401() -> None:
    def log_out(user: User, client: Client) -> None:
        client.logout()  # deletes the session the socket was opened with

    assert closed_after(log_out) == CLOSE_UNAUTHENTICATED


def test_a_deactivated_user_is_closed_with_4401() -> None:
    def deactivate(user: User, client: Client) -> None:
        User.objects.filter(pk=user.pk).update(is_active=False)

    assert closed_after(deactivate) == CLOSE_UNAUTHENTICATED


def test_a_user_who_keeps_view_job_keeps_the_socket_through_the_checks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = user_with(*VIEWER)
    _, cookie = logged_in(user)
    job = JobFactory(running=True)
    checked = asyncio.Event()
    checks = 0
    current_user = consumers._current_user

    async def counted(scope: Any) -> Any:
        nonlocal checks
        checks += 1
        if checks >= 3:
            checked.set()
        return await current_user(scope)

    monkeypatch.setattr(consumers, "_current_user", counted)

    async def scenario() -> dict[str, Any]:
        socket = communicator(f"/ws/workqueue/jobs/{job.pk}/", cookie)
        assert (await socket.connect())[0]
        assert (await receive(socket))["event"] == "snapshot"
        await asyncio.wait_for(checked.wait(), timeout=20)
        await socket.send_to(text_data='{"type": "ping"}')
        answer = await receive(socket)
        await socket.disconnect()
        return answer

    assert async_to_sync(scenario)() == {"type": "pong"}
