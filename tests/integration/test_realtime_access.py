"""Who may follow what over the websockets: the origin, the login, ``view_job`` per
subscription, and what of a job's progress each user sees (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from django_workqueue.models import Workflow
from django_workqueue.realtime.consumers import (
    CLOSE_DISABLED,
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_UNAUTHENTICATED,
)
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.users import VIEWER, user_with
from tests.support.websockets import communicator, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

SECRET_MESSAGE = "page 3 of 9, api_key=k-12345"


@pytest.fixture
def job() -> Any:
    return JobFactory(
        running=True, progress_current=3, progress_total=9, progress_message=SECRET_MESSAGE,
        progress_details={"page": 3, "file": "export.csv"},
    )  # fmt: skip


def first_message(path: str, cookie: bytes | None, origin: bytes | None = None) -> Any:
    """What the server answers a connection: ("message", decoded) or ("closed", code)."""

    async def scenario() -> Any:
        socket = communicator(path, cookie, **({"origin": origin} if origin else {}))
        connected, code = await socket.connect()
        if not connected:
            return ("refused", code)
        output = await socket.receive_output(20)
        await socket.disconnect()
        if output["type"] == "websocket.close":
            return ("closed", output.get("code"))
        return ("message", json.loads(output["text"]))

    return async_to_sync(scenario)()


def test_a_viewer_gets_the_jobs_state_with_the_message_redacted_and_no_details(job: Any) -> None:
    kind, message = first_message(f"/ws/workqueue/jobs/{job.pk}/", session_cookie(
        user_with(*VIEWER)))  # fmt: skip
    assert kind == "message"
    assert message["type"] == "job" and message["event"] == "snapshot"
    progress = message["job"]["progress"]
    assert (progress["current"], progress["total"]) == (3, 9)
    assert "k-12345" not in progress["message"] and progress["message"].startswith("page 3 of 9")
    assert progress["details"] is None and message["job"]["details_hidden"] is True


def test_a_user_with_the_payload_permission_sees_message_and_details(job: Any) -> None:
    user = user_with("view_job", "view_job_payload")
    kind, message = first_message(f"/ws/workqueue/jobs/{job.pk}/", session_cookie(user))
    assert kind == "message"
    assert message["job"]["progress"]["message"] == SECRET_MESSAGE
    assert message["job"]["progress"]["details"] == {"page": 3, "file": "export.csv"}
    assert message["job"]["details_hidden"] is False


@pytest.mark.parametrize("route", ["jobs/{job}/", "workflows/{workflow}/", "queues/default/"])
def test_anonymous_clients_are_closed_with_4401(job: Any, route: str) -> None:
    workflow = Workflow.objects.create(name="w")
    path = "/ws/workqueue/" + route.format(job=job.pk, workflow=workflow.pk)
    assert first_message(path, None) == ("closed", CLOSE_UNAUTHENTICATED)


@pytest.mark.parametrize("route", ["jobs/{job}/", "workflows/{workflow}/", "queues/default/"])
def test_a_user_without_view_job_is_closed_with_4403_and_a_viewer_is_let_in(
    job: Any, route: str
) -> None:
    workflow = Workflow.objects.create(name="w")
    path = "/ws/workqueue/" + route.format(job=job.pk, workflow=workflow.pk)
    stranger = session_cookie(user_with("view_job_payload", username="stranger"))
    assert first_message(path, stranger) == ("closed", CLOSE_FORBIDDEN)
    kind, message = first_message(path, session_cookie(user_with(*VIEWER)))
    assert kind == "message" and message["event"] == "snapshot"


def test_a_superuser_may_follow_without_explicit_permissions(job: Any) -> None:
    admin = user_with(username="root", is_superuser=True)
    kind, message = first_message(f"/ws/workqueue/jobs/{job.pk}/", session_cookie(admin))
    assert kind == "message" and message["job"]["progress"]["message"] == SECRET_MESSAGE


def test_a_foreign_origin_is_refused_before_any_check(job: Any) -> None:
    cookie = session_cookie(user_with(*VIEWER))
    kind, _ = first_message(f"/ws/workqueue/jobs/{job.pk}/", cookie, b"https://evil.example")
    assert kind == "refused"


@pytest.mark.parametrize("route", ["jobs/987654/", "workflows/987654/", "queues/no-such-queue/"])
def test_unknown_jobs_workflows_and_queues_are_closed_with_4404(route: str) -> None:
    cookie = session_cookie(user_with(*VIEWER))
    assert first_message("/ws/workqueue/" + route, cookie) == ("closed", CLOSE_NOT_FOUND)


def test_with_live_progress_off_every_route_closes_with_4503(job: Any) -> None:
    cookie = session_cookie(user_with(*VIEWER))
    with workqueue_settings(REALTIME=None):
        answer = first_message(f"/ws/workqueue/jobs/{job.pk}/", cookie)
    assert answer == ("closed", CLOSE_DISABLED)


def test_the_queue_stream_starts_with_a_snapshot_naming_the_queue() -> None:
    cookie = session_cookie(user_with(*VIEWER))
    kind, message = first_message("/ws/workqueue/queues/mail/", cookie)
    assert (kind, message) == (
        "message", {"type": "queue", "event": "snapshot", "queue": {"name": "mail"}},
    )  # fmt: skip
