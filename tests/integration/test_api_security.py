"""The API's defences: its own authentication and permission classes on every view (the
testproject's REST_FRAMEWORK defaults are hostile on purpose), CSRF for session
authentication, POST only for changes, reads that change nothing, JSON only."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core import serializers as django_serializers
from django.middleware.csrf import get_token
from django.test import RequestFactory
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.authentication import BasicAuthentication, SessionAuthentication
from rest_framework.test import APIClient

from django_workqueue import operations
from django_workqueue.api import urls as api_urls
from django_workqueue.api.permissions import HasWorkqueuePermission
from django_workqueue.models import AuditRecord, Job, Queue, Schedule, Workflow
from django_workqueue.states import Status
from tests.support.api import API, client_as
from tests.support.api_routes import MUTATIONS, READS, Route
from tests.support.factories import JobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


def views():
    """(route, view class, its actions by method) of every API route."""
    found = []
    for pattern in api_urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        cls = pattern.callback.cls
        found.append((str(pattern.pattern), cls, getattr(pattern.callback, "actions", None)))
    return found


@pytest.mark.parametrize(("route", "cls", "actions"), views(), ids=lambda v: str(v))
def test_every_view_names_its_own_authentication_and_permissions(route, cls, actions):
    assert cls.authentication_classes == [BasicAuthentication, SessionAuthentication]
    assert cls.permission_classes == [HasWorkqueuePermission]
    routes = actions.values() if actions else ["get"]
    assert set(routes) <= set(cls.workqueue_actions), f"{route}: a route with no permission"


def test_the_api_is_mounted_where_the_testproject_says():
    resolver = get_resolver()
    mounted = [
        entry for entry in resolver.url_patterns
        if isinstance(entry, URLResolver) and entry.urlconf_module is api_urls
    ]  # fmt: skip
    assert [str(entry.pattern) for entry in mounted] == ["api/workqueue/"]


def session_client() -> APIClient:
    client = APIClient(enforce_csrf_checks=True)
    User.objects.create_superuser(username="admin", password="x")
    assert client.login(username="admin", password="x")
    return client


def csrf_token(client: APIClient) -> str:
    """A CSRF token for ``client``, as a page with a form would hand it out: the secret in the
    cookie, the masked token to send in the X-CSRFToken header."""
    request = RequestFactory().get("/")
    token = get_token(request)
    client.cookies[settings.CSRF_COOKIE_NAME] = request.META["CSRF_COOKIE"]
    return token


@pytest.mark.parametrize("route", MUTATIONS, ids=lambda route: route.name)
def test_a_session_authenticated_change_needs_the_csrf_token(route: Route):
    client = session_client()
    path, body = route.prepare()

    refused = client.post(path, body, format="json")

    assert refused.status_code == 403
    assert "CSRF" in refused.json()["detail"]
    assert not route.changed()
    token = csrf_token(client)
    allowed = client.post(path, body, format="json", HTTP_X_CSRFTOKEN=token)
    assert allowed.status_code == route.status, allowed.content
    assert route.changed()


def test_a_session_read_needs_no_csrf_token():
    assert session_client().get(f"{API}jobs/").status_code == 200


def test_http_basic_is_not_subject_to_csrf():
    client = client_as("superuser")
    client.handler.enforce_csrf_checks = True
    job = JobFactory()

    assert client.post(f"{API}jobs/{job.pk}/cancel/").status_code == 200


def state() -> str:
    """Every row the API could change, as text."""
    rows = [*Job.objects.order_by("id"), *Workflow.objects.order_by("id"),
            *Queue.objects.order_by("name"), *Schedule.objects.order_by("id"),
            *AuditRecord.objects.order_by("id")]  # fmt: skip
    return django_serializers.serialize("json", rows)


@pytest.mark.parametrize("method", ["get", "head", "options"])
def test_reads_change_nothing(method: str):
    workflow = Workflow.objects.create(name="wf")
    job = JobFactory(workflow=workflow)
    JobFactory(failed=True)
    JobFactory(status=Status.HELD)
    operations.pause_queue("mail")
    Schedule.objects.create(
        name="nightly", task_name="testproject.testapp.tasks.scheduled_tick", cron="0 3 * * *"
    )
    client = client_as("superuser")
    before = state()
    mutations = [
        f"jobs/{job.pk}/cancel/", f"jobs/{job.pk}/retry/", f"jobs/{job.pk}/hold/",
        f"jobs/{job.pk}/release/", "jobs/redrive/", "queues/mail/pause/", "queues/mail/resume/",
        "schedules/nightly/run/", f"workflows/{workflow.pk}/cancel/",
    ]  # fmt: skip

    for path in [read.format(job=job.pk, workflow=workflow.pk) for read in READS]:
        response = getattr(client, method)(f"{API}{path}")
        expected = 405 if method == "options" else 200  # the schema describes the routes
        assert response.status_code == expected, (path, response.content)
    for path in mutations:
        assert getattr(client, method)(f"{API}{path}").status_code == 405, path

    assert state() == before


@pytest.mark.parametrize("method", ["put", "patch", "delete"])
def test_no_route_takes_put_patch_or_delete(method: str):
    job = JobFactory()
    client = client_as("superuser")

    for path in ["jobs/", f"jobs/{job.pk}/", f"jobs/{job.pk}/cancel/", "queues/mail/pause/"]:
        assert getattr(client, method)(f"{API}{path}").status_code == 405
    assert Job.objects.filter(pk=job.pk).exists()


def test_only_json_is_accepted():
    job = JobFactory(failed=True)
    client = client_as("superuser")

    form = client.post(f"{API}jobs/redrive/", {"all": "true"})  # multipart
    text = client.post(f"{API}jobs/redrive/", "all=true", content_type="text/plain")
    broken = client.post(f"{API}jobs/redrive/", "{", content_type="application/json")

    assert (form.status_code, text.status_code, broken.status_code) == (415, 415, 400)
    assert Job.objects.get(pk=job.pk).status == Status.FAILED


def test_answers_are_json_whatever_the_client_asks_for():
    response = client_as("superuser").get(f"{API}jobs/", HTTP_ACCEPT="text/html")

    assert response.status_code == 406 or response["Content-Type"] == "application/json"


def test_an_unknown_route_is_a_404():
    assert client_as("superuser").get(f"{API}nothing/").status_code == 404


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("get", "jobs/?queue=%00", None, 400),
        ("get", "jobs/?task=a%00b", None, 400),
        ("post", "jobs/redrive/", {"queue": ["\x00"]}, 400),
        ("post", "jobs/", {"task": "x\x00"}, 400),
        ("post", "schedules/a%00/run/", None, 404),
        ("post", "queues/a%00/pause/", None, 404),
    ],
)
def test_a_nul_character_is_refused_before_it_reaches_the_database(method, path, body, status):
    # PostgreSQL cannot compare text with NUL in it: unchecked, each of these was a 500 there.
    client = client_as("superuser")

    response = getattr(client, method)(f"{API}{path}", body, format="json")

    assert response.status_code == status


def test_json_nested_too_deeply_is_a_400():
    body = "[" * 100_000 + "]" * 100_000

    response = client_as("superuser").post(
        f"{API}jobs/redrive/", body, content_type="application/json"
    )

    assert response.status_code == 400
    assert "nested too deeply" in response.json()["detail"]
