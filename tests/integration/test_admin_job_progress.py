"""The admin job page's progress bar and how the page follows the job (SQLite and PostgreSQL):
a websocket only where the project's ASGI application routes one and the job is unfinished,
polling where there is none, and a finished job shows no motion (a full still bar, or none)."""

from __future__ import annotations

import json
import re

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import reverse

from django_workqueue.realtime.mounted import job_route_mounted
from tests.support.factories import JobFactory
from tests.support.settings import workqueue_settings
from tests.support.users import user_with

pytestmark = pytest.mark.django_db

WITH_ROUTES = "testproject.asgi.application"
WITHOUT_ROUTES = "tests.support.asgi_routes.http_only"


@pytest.fixture
def client() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "x"))
    return client


def page(client: Client, job) -> str:
    response = client.get(reverse("admin:django_workqueue_job_change", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()


def bar(html: str) -> dict[str, str] | None:
    """The attributes of the page's ``<progress>``, or ``None`` when it has none."""
    tag = re.search(r"<progress\b([^>]*)>", html)
    if tag is None:
        return None
    return dict(re.findall(r'([\w-]+)(?:="([^"]*)")?', tag.group(1)))


def follows(html: str) -> bool:
    return "live-progress.js" in html


@pytest.mark.parametrize(
    "fields",
    [
        {"status": "failed", "finished": True},
        {"status": "cancelled", "finished": True},
    ],
    ids=["failed", "cancelled"],
)
def test_a_finished_job_without_a_total_shows_no_bar_and_is_not_followed(client, fields):
    job = JobFactory(status=fields["status"], attempt=1)

    html = page(client, job)

    assert bar(html) is None
    assert not follows(html)
    assert f'class="wq-progress-status" data-wq-job="{job.pk}">{job.status}<' in html


def test_a_job_that_succeeded_without_a_total_shows_a_full_still_bar(client):
    html = page(client, JobFactory(status="succeeded", attempt=1))

    assert bar(html) == {"class": "wq-progress", "data-wq-job": bar(html)["data-wq-job"],
                         "max": "1", "value": "1", "data-wq-follow": "off"}  # fmt: skip
    assert not follows(html)


def test_a_finished_job_with_a_total_keeps_its_last_value(client):
    job = JobFactory(status="cancelled", attempt=1, progress_current=3, progress_total=10)

    shown = bar(page(client, job))

    assert (shown["max"], shown["value"], shown["data-wq-follow"]) == ("10", "3", "off")


@override_settings(ASGI_APPLICATION=WITH_ROUTES)
def test_a_running_job_is_followed_over_the_websocket_where_a_route_exists(client):
    job = JobFactory(running=True)

    html = page(client, job)

    assert job_route_mounted()
    assert bar(html)["data-wq-follow"] == "websocket"
    assert "value" not in bar(html)  # busy: running, no total reported yet
    assert follows(html)


@pytest.mark.parametrize(
    "where",
    [
        override_settings(ASGI_APPLICATION=WITHOUT_ROUTES),
        override_settings(ASGI_APPLICATION=None),
        workqueue_settings(REALTIME=None),
    ],
    ids=["routes-not-mounted", "no-asgi-application", "realtime-off"],
)
def test_without_a_websocket_route_an_unfinished_job_is_polled(client, where):
    job = JobFactory(status="ready")

    with where:
        html = page(client, job)
        mounted = job_route_mounted()

    shown = bar(html)
    assert not mounted
    assert shown["data-wq-follow"] == "poll"
    assert shown["data-wq-poll-url"] == reverse(
        "admin:django_workqueue_job_progress", args=[job.pk]
    )
    assert (shown["max"], shown["value"]) == ("1", "0")  # waiting: an empty, still bar
    assert follows(html)


def test_the_polled_answer_is_the_websockets_snapshot_as_the_user_may_see_it():
    job = JobFactory(
        running=True, progress_current=2, progress_total=9, progress_message="page 2",
        progress_details={"secret": "x"},
    )  # fmt: skip
    viewer = Client()
    viewer.force_login(user_with("view_job", is_staff=True))
    url = reverse("admin:django_workqueue_job_progress", args=[job.pk])

    message = json.loads(viewer.get(url).content)

    assert message["type"] == "job" and message["event"] == "snapshot"
    assert message["job"]["status"] == "running"
    assert message["job"]["progress"] == {
        "current": 2, "total": 9, "message": "page 2", "details": None
    }  # fmt: skip
    assert message["job"]["details_hidden"] is True


def test_the_polled_answer_needs_view_job():
    job = JobFactory(running=True)
    stranger = Client()
    stranger.force_login(user_with(username="nobody", is_staff=True))

    response = stranger.get(reverse("admin:django_workqueue_job_progress", args=[job.pk]))

    assert response.status_code == 403
