"""The fleet: ``queues/`` (pause, resume), ``schedules/`` (run now), ``workers/`` and
``stats/``."""

from __future__ import annotations

import dataclasses
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from ... import audit, operations, stats
from ...conf import workqueue_settings as conf
from ...disclosure import Clearance
from ...models import AuditSource, Queue, Schedule
from ..base import WorkqueueView, audited, documented
from ..filters import refuse_unknown
from ..serializers import (
    JobSummarySerializer,
    OperationResultSerializer,
    QueueSerializer,
    ScheduleSerializer,
    SnapshotSerializer,
    WorkerSerializer,
)

_QUEUE = OpenApiParameter(
    "name", OpenApiTypes.STR, OpenApiParameter.PATH,
    description='A queue of WORKQUEUE["QUEUES"].',
)  # fmt: skip
_NO_QUEUE = OpenApiResponse(description="No such queue.")
_SCHEDULE = OpenApiParameter(
    "name", OpenApiTypes.STR, OpenApiParameter.PATH, description="A schedule's name."
)


class QueueViewSet(WorkqueueView, viewsets.ViewSet):
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    workqueue_actions = {"list": "view", "pause": "pause", "resume": "resume"}

    @documented(
        summary="List queues",
        description='The queues of WORKQUEUE["QUEUES"] (and any other with a paused row), '
        "paused or not. Permission: `django_workqueue.view_job`.",
        responses={200: QueueSerializer(many=True)},
    )
    def list(self, request: Request) -> Response:
        refuse_unknown(request.query_params, ())
        rows = {row.name: row for row in Queue.objects.using(conf.DATABASE)}
        names = sorted(set(conf.QUEUES) | set(rows))
        queues = [
            {
                "name": name,
                "paused": bool(rows.get(name) and rows[name].paused),
                "paused_at": rows[name].paused_at if name in rows else None,
                "configured": name in conf.QUEUES,
            }
            for name in names
        ]
        return Response(QueueSerializer(queues, many=True).data)

    @documented(
        summary="Pause a queue",
        description="No worker claims its jobs until it is resumed; running jobs finish and "
        "enqueue goes on. Permission: `django_workqueue.manage_queue`.",
        parameters=[_QUEUE], request=None,
        responses={200: OperationResultSerializer, 404: _NO_QUEUE},
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def pause(self, request: Request, name: str) -> Response:
        return audited(request, "pause", {"queues": [name]}, operations.pause_queue(name))

    @documented(
        summary="Resume a queue",
        description="Workers claim its jobs again. Permission: `django_workqueue.manage_queue`.",
        parameters=[_QUEUE], request=None,
        responses={200: OperationResultSerializer, 404: _NO_QUEUE},
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def resume(self, request: Request, name: str) -> Response:
        return audited(request, "resume", {"queues": [name]}, operations.resume_queue(name))


class ScheduleViewSet(WorkqueueView, viewsets.ViewSet):
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    workqueue_actions = {"list": "view", "run": "run_schedule"}

    @documented(
        summary="List schedules",
        description="Every cron schedule, by name; arguments are null (`payload_hidden`) "
        "without `view_job_payload`. Permission: `django_workqueue.view_job`.",
        responses={200: ScheduleSerializer(many=True)},
    )
    def list(self, request: Request) -> Response:
        refuse_unknown(request.query_params, ())
        schedules = Schedule.objects.using(conf.DATABASE).order_by("name")
        context = {"clearance": Clearance.of(request.user)}
        return Response(ScheduleSerializer(schedules, many=True, context=context).data)

    @documented(
        summary="Run a schedule now",
        description="Enqueues one run of it now (a disabled schedule too); its next tick is "
        "unchanged. Permission: `django_workqueue.manage_schedule`.",
        parameters=[_SCHEDULE], request=None,
        responses={
            201: JobSummarySerializer, 404: OpenApiResponse(description="No such schedule.")
        },
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def run(self, request: Request, name: str) -> Response:
        if "\x00" in name:  # no name holds one (PostgreSQL would refuse to compare it)
            raise NotFound(f"no schedule is named {name!r}")
        job = operations.run_schedule_now(name)
        audit.record(
            request.user, "run_schedule", {"schedule": name, "ids": [job.pk]}, 1, AuditSource.API
        )
        context = {"clearance": Clearance.of(request.user)}
        return Response(
            JobSummarySerializer(job, context=context).data, status=status.HTTP_201_CREATED
        )


class WorkerListView(WorkqueueView, APIView):
    workqueue_actions = {"get": "view"}

    @documented(
        summary="List live workers",
        description="Workers seen within the last three heartbeats, newest first. "
        "Permission: `django_workqueue.view_job`.",
        responses={200: WorkerSerializer(many=True)},
    )
    def get(self, request: Request) -> Response:
        refuse_unknown(request.query_params, ())
        return Response(
            WorkerSerializer(operations.workers().order_by("-started_at"), many=True).data
        )


class StatsView(WorkqueueView, APIView):
    workqueue_actions = {"get": "view"}

    @documented(
        summary="Queue and task statistics",
        description="Unfinished jobs by status, backlog and oldest wait per queue and task, and "
        "what finished in the last 1, 5 and 15 minutes (throughput, failure rate, wait and run "
        "percentiles). Permission: `django_workqueue.view_job`.",
        responses={200: SnapshotSerializer},
    )
    def get(self, request: Request) -> Response:
        refuse_unknown(request.query_params, ())
        snapshot: Any = dataclasses.asdict(stats.snapshot())
        return Response(SnapshotSerializer(snapshot).data)
