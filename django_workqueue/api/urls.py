"""The API's routes. Mount them under any prefix:

>>> path("api/workqueue/", include("django_workqueue.api.urls"))
"""

from __future__ import annotations

from django.urls import path

from .routes import router, routes
from .schema import SchemaView

app_name = "workqueue-api"

__all__ = ["app_name", "router", "routes", "urlpatterns"]

urlpatterns = [*routes, path("schema/", SchemaView.as_view(), name="schema")]
