"""The API's OpenAPI schema (drf-spectacular), made of this package's routes only — whatever
else the project serves — under the prefix the API is mounted at.

>>> build_schema("/api/workqueue/")["paths"]["/api/workqueue/jobs/"]
"""

from __future__ import annotations

from typing import Any

from django.urls import include, path
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import (
    OpenApiJsonRenderer,
    OpenApiJsonRenderer2,
    OpenApiYamlRenderer,
    OpenApiYamlRenderer2,
)
from drf_spectacular.settings import patched_settings
from drf_spectacular.views import SpectacularAPIView
from rest_framework.request import Request
from rest_framework.response import Response

from .base import WorkqueueView, documented
from .routes import routes

DEFAULT_PREFIX = "/api/workqueue/"
"""Where the testproject mounts the API; the generated reference shows paths under it."""

SCHEMA_SETTINGS = {
    "TITLE": "django-workqueue HTTP API",
    "DESCRIPTION": (
        "Jobs, workflows, queues, schedules, workers and statistics of django-workqueue. "
        "HTTP basic or session authentication; every route needs a workqueue permission."
    ),
    "VERSION": "1",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "JobStatusEnum": "django_workqueue.states.Status",
        "WorkflowStatusEnum": "django_workqueue.states.WorkflowStatus",
    },
}


def build_schema(prefix: str = DEFAULT_PREFIX) -> dict[str, Any]:
    """The OpenAPI document of the API mounted at ``prefix`` (an absolute path)."""
    patterns = [path(prefix.lstrip("/"), include(routes))]
    with patched_settings(SCHEMA_SETTINGS):
        generator = SchemaGenerator(patterns=patterns)
        schema: dict[str, Any] = generator.get_schema(request=None, public=True)
    return schema


class SchemaView(WorkqueueView, SpectacularAPIView):
    """``schema/``: the OpenAPI document, JSON (or YAML with ``?format=yaml`` or an Accept
    header asking for it)."""

    renderer_classes = [  # type: ignore[misc]
        OpenApiJsonRenderer, OpenApiJsonRenderer2, OpenApiYamlRenderer, OpenApiYamlRenderer2,
    ]  # fmt: skip
    workqueue_actions = {"get": "view"}

    @documented(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        mount = request.path.removesuffix("schema/")
        return Response(build_schema(mount))
