"""The permission matrix of the HTTP API: every route by every role (anonymous, authenticated
without permissions, viewer, operator, superuser). A refused change changes nothing and is
not audited; an allowed one is audited with source "api"."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission

from django_workqueue.models import AuditRecord, Workflow
from tests.support.api import ROLES, basic, client_as
from tests.support.api_routes import MUTATIONS, READS, Route
from tests.support.factories import JobFactory
from tests.support.users import OPERATOR, VIEWER, user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

HELD = {"anonymous": (), "nobody": (), "viewer": VIEWER, "operator": OPERATOR}


def expected_status(role: str, codename: str, allowed_status: int) -> int:
    if role == "anonymous":
        return 401
    if role == "superuser" or codename in HELD[role]:
        return allowed_status
    return 403


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("route", MUTATIONS, ids=lambda route: route.name)
def test_a_change_is_made_only_by_a_role_holding_its_permission(route: Route, role: str):
    client = client_as(role)
    path, body = route.prepare()

    response = client.post(path, body, format="json")

    expected = expected_status(role, route.codename, route.status)
    assert response.status_code == expected, response.content
    assert route.changed() is (expected == route.status)
    audited = list(AuditRecord.objects.values_list("source", "action"))
    assert audited == ([("api", route.name)] if expected == route.status else [])


@pytest.mark.parametrize("route", MUTATIONS, ids=lambda route: route.name)
def test_a_change_needs_exactly_its_permission_and_no_other_grants_it(route: Route):
    ours = Permission.objects.filter(content_type__app_label="django_workqueue")
    others = set(ours.exclude(codename=route.codename).values_list("codename", flat=True))
    path, body = route.prepare()
    user_with(*others, username="others")

    refused = _client("others").post(path, body, format="json")

    assert refused.status_code == 403
    assert f"django_workqueue.{route.codename}" in refused.json()["detail"]
    assert not route.changed()
    user_with(route.codename, username="holder")
    assert _client("holder").post(path, body, format="json").status_code == route.status
    assert route.changed()


def _client(username: str):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic(username))
    return client


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize("read", READS)
def test_every_read_needs_view_job(read: str, role: str):
    workflow = Workflow.objects.create(name="wf")
    job = JobFactory(workflow=workflow)
    path = "/api/workqueue/" + read.format(job=job.pk, workflow=workflow.pk)

    response = client_as(role).get(path)

    assert response.status_code == expected_status(role, "view_job", 200), response.content


def test_an_anonymous_client_is_told_to_authenticate_with_http_basic():
    response = client_as("anonymous").get("/api/workqueue/jobs/")

    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Basic")


def test_wrong_credentials_are_refused():
    user_with(*VIEWER, username="viewer")
    client = _client("viewer")
    client.credentials(HTTP_AUTHORIZATION=basic("viewer", "wrong"))

    assert client.get("/api/workqueue/jobs/").status_code == 401


def test_an_inactive_superuser_may_do_nothing():
    from django.contrib.auth.models import User

    User.objects.create_superuser(username="gone", password="x", is_active=False)

    assert _client("gone").get("/api/workqueue/jobs/").status_code == 401
