"""Every route of the API but the schema's: what the schema describes (``schema.py``), and
what ``urls.py`` mounts together with the schema's route."""

from __future__ import annotations

from django.urls import path
from rest_framework.routers import SimpleRouter

from .views.fleet import QueueViewSet, ScheduleViewSet, StatsView, WorkerListView
from .views.jobs import JobViewSet
from .views.workflows import WorkflowViewSet

# A SimpleRouter: DefaultRouter's root view would take the project's default permissions.
router = SimpleRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("workflows", WorkflowViewSet, basename="workflow")
router.register("queues", QueueViewSet, basename="queue")
router.register("schedules", ScheduleViewSet, basename="schedule")

routes = [
    *router.urls,
    path("workers/", WorkerListView.as_view(), name="worker-list"),
    path("stats/", StatsView.as_view(), name="stats"),
]
