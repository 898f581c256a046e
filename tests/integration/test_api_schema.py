"""The OpenAPI schema: complete (no warning while it is generated), valid, served to viewers;
and schemathesis drives every operation from it as a superuser: no 5xx, and every answer the
schema documents conforms to it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from django.core.handlers.wsgi import WSGIHandler
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.drainage import GENERATOR_STATS
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
)

from django_workqueue.api.schema import build_schema
from tests.support.api import API, basic, client_as
from tests.support.factories import JobFactory
from tests.support.users import user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


def test_the_schema_is_generated_without_a_warning_and_is_valid():
    GENERATOR_STATS.reset()

    schema = build_schema()

    assert not GENERATOR_STATS, "drf-spectacular warned: see the captured output"
    validate_schema(schema)
    operations = {
        (path.removeprefix(API), method)
        for path, methods in schema["paths"].items()
        for method in methods
    }  # fmt: skip
    assert operations == {
        ("jobs/", "get"), ("jobs/", "post"), ("jobs/{id}/", "get"),
        ("jobs/{id}/explain/", "get"),
        ("jobs/{id}/cancel/", "post"), ("jobs/{id}/retry/", "post"),
        ("jobs/{id}/hold/", "post"), ("jobs/{id}/release/", "post"),
        ("jobs/{id}/signal/", "post"),
        ("jobs/redrive/", "post"), ("workflows/", "get"), ("workflows/{id}/", "get"),
        ("workflows/{id}/cancel/", "post"), ("workflows/{id}/signal/", "post"),
        ("schedules/", "get"), ("schedules/{name}/run/", "post"), ("queues/", "get"),
        ("queues/{name}/pause/", "post"), ("queues/{name}/resume/", "post"),
        ("workers/", "get"), ("stats/", "get"),
    }  # fmt: skip


def test_every_operation_has_a_summary_and_names_its_permission():
    for path, methods in build_schema()["paths"].items():
        for method, operation in methods.items():
            assert operation.get("summary"), (path, method)
            assert "django_workqueue." in operation.get("description", ""), (path, method)
            assert {"basicAuth": []} in operation["security"], (path, method)


def test_the_served_schema_is_the_generated_one_and_needs_view_job():
    response = client_as("viewer").get(f"{API}schema/")

    assert response.status_code == 200
    assert response.json()["paths"].keys() == build_schema()["paths"].keys()
    assert client_as("nobody").get(f"{API}schema/").status_code == 403
    assert client_as("anonymous").get(f"{API}schema/").status_code == 401


@pytest.mark.parametrize(
    ("accept", "query", "starts"),
    [
        ("application/json", "", "{"),
        ("application/vnd.oai.openapi+json", "", "{"),
        ("*/*", "", "{"),
        ("*/*", "?format=yaml", "openapi:"),
        ("application/yaml", "", "openapi:"),
    ],
)
def test_the_schema_is_served_as_json_or_yaml(accept, query, starts):
    response = client_as("viewer").get(f"{API}schema/{query}", HTTP_ACCEPT=accept)

    assert response.status_code == 200
    assert response.content.decode().startswith(starts)


@pytest.fixture
def wsgi_app() -> Iterator[WSGIHandler]:
    """The project's WSGI application on this test's connection: as Django's test client does,
    requests must not close the connection that holds the test's transaction."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield WSGIHandler()
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.fixture
def superuser_header() -> dict[str, str]:
    user_with(username="root", is_superuser=True)
    JobFactory.create_batch(3)
    JobFactory(failed=True)
    return {"Authorization": basic("root")}


api_schema = schemathesis.openapi.from_dict(build_schema())


@api_schema.parametrize()
@settings(
    max_examples=25, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                           HealthCheck.filter_too_much],
)  # fmt: skip
def test_no_generated_request_makes_a_server_error(case, wsgi_app, superuser_header):
    response = case.call(app=wsgi_app, headers=superuser_header)

    case.validate_response(
        response,
        checks=[not_a_server_error, response_schema_conformance, content_type_conformance],
    )
