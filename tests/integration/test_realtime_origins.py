"""Which pages may open the websockets: the site's own origin — scheme, host and port — or one
of ``CSRF_TRUSTED_ORIGINS``, as Django's CSRF origin check decides (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.test import override_settings

from django_workqueue.realtime.origins import allowed_origins
from tests.support.factories import JobFactory
from tests.support.users import VIEWER, user_with
from tests.support.websockets import Communicator, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_passwords")]


def opened(origin: bytes, host: bytes = b"testserver", scheme: str = "ws") -> bool:
    """Whether the full application lets a viewer's socket in from ``origin``."""
    from testproject.asgi import application

    job = JobFactory(running=True)
    viewer = User.objects.filter(username="viewer").first() or user_with(*VIEWER, username="viewer")
    cookie = session_cookie(viewer)

    async def scenario() -> bool:
        headers = [(b"origin", origin), (b"host", host), (b"cookie", cookie)]
        socket = Communicator(application, f"/ws/workqueue/jobs/{job.pk}/", headers)
        socket.scope["scheme"] = scheme
        connected, _ = await socket.connect()
        await socket.disconnect()
        return connected

    return async_to_sync(scenario)()


def test_the_sites_own_origin_is_let_in() -> None:
    assert opened(b"http://testserver")


@pytest.mark.parametrize(
    "origin",
    [b"http://testserver:1", b"http://testserver:8000", b"https://testserver", b"ftp://testserver"],
)
def test_another_port_or_scheme_of_the_same_host_is_refused(origin: bytes) -> None:
    assert not opened(origin)


def test_the_port_the_socket_was_opened_on_is_the_sites() -> None:
    assert opened(b"http://testserver:8000", host=b"testserver:8000")
    assert not opened(b"http://testserver", host=b"testserver:8000")


def test_a_secure_socket_takes_https_pages_only() -> None:
    assert opened(b"https://testserver", scheme="wss")
    assert not opened(b"http://testserver", scheme="wss")


@override_settings(ALLOWED_HOSTS=["testserver"])
def test_a_host_outside_allowed_hosts_has_no_origin_of_its_own() -> None:
    assert not opened(b"http://evil.example", host=b"evil.example")


@override_settings(CSRF_TRUSTED_ORIGINS=["https://app.example.com", "https://*.corp.example"])
def test_the_trusted_origins_are_let_in_with_their_scheme_and_port() -> None:
    assert opened(b"https://app.example.com")
    assert opened(b"https://ops.corp.example")
    assert not opened(b"http://app.example.com")
    assert not opened(b"https://app.example.com:8443")


@override_settings(SECURE_PROXY_SSL_HEADER=("HTTP_X_FORWARDED_PROTO", "https"))
def test_behind_a_tls_proxy_the_forwarded_scheme_counts() -> None:
    scope: dict[str, Any] = {
        "scheme": "ws", "headers": [(b"host", b"testserver"), (b"x-forwarded-proto", b"https")],
    }  # fmt: skip
    assert allowed_origins(scope) == ["https://testserver"]


def test_a_missing_origin_is_refused() -> None:
    from testproject.asgi import application

    job = JobFactory(running=True)

    async def scenario() -> bool:
        headers = [(b"host", b"testserver")]
        socket = Communicator(application, f"/ws/workqueue/jobs/{job.pk}/", headers)
        connected, _ = await socket.connect()
        await socket.disconnect()
        return connected

    assert not async_to_sync(scenario)()
