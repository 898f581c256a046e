"""Websocket clients for the realtime tests: ``WebsocketCommunicator``s against the test
project's ASGI application (origin validation, session auth, the routes), logged in as a user."""

from __future__ import annotations

import json
from typing import Any

from channels.testing import WebsocketCommunicator
from django.test import Client

ORIGIN = b"http://testserver"


def session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


class Communicator(WebsocketCommunicator):
    """``WebsocketCommunicator`` whose handshake waits as long as ``receive`` does: channels'
    default of 1 s timed out in CI's loaded runs (the consumer's first query behind others).
    A wait on a condition, not a timed assertion: a quick handshake returns at once."""

    async def connect(self, timeout: float = 20.0) -> Any:
        return await super().connect(timeout)


def communicator(path: str, cookie: bytes | None = None, origin: bytes = ORIGIN) -> Any:
    """A client of the full application at ``path`` (call ``session_cookie`` synchronously
    first: it writes a session)."""
    from testproject.asgi import application

    headers = [(b"origin", origin), (b"host", b"testserver")]
    if cookie:
        headers.append((b"cookie", cookie))
    return Communicator(application, path, headers=headers)


async def receive(socket: Any, timeout: float = 20.0) -> dict[str, Any]:
    """The next message, decoded; a close raises AssertionError naming its code."""
    output = await socket.receive_output(timeout)
    if output["type"] == "websocket.close":
        raise AssertionError(f"the server closed the websocket with code {output.get('code')}")
    return json.loads(output["text"])


async def closed_with(socket: Any, timeout: float = 20.0) -> int | None:
    """The code the server closed with (skipping data messages before it)."""
    while True:
        output = await socket.receive_output(timeout)
        if output["type"] == "websocket.close":
            return output.get("code")


async def until(socket: Any, condition: Any, timeout: float = 20.0) -> list[dict[str, Any]]:
    """Messages up to and including the first for which ``condition`` holds."""
    seen = []
    while True:
        message = await receive(socket, timeout)
        seen.append(message)
        if condition(message):
            return seen
