"""``jobs/``: list (filtered, cursor-paginated), one job, enqueue (tasks registered with
``api=True`` only), and the operator's actions on one job or, for redrive, on a filter."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    inline_serializer,
)
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from ... import audit, operations, permissions
from ...conf import workqueue_settings as conf
from ...disclosure import Clearance
from ...enqueue import enqueue_one
from ...exceptions import EnqueueError
from ...models import AuditSource, Job
from ...registry import find_task
from ...states import Status
from ..base import WorkqueueView, audited, documented, object_id, signalled
from ..filters import JobFilters, from_query
from ..pagination import NewestFirst
from ..serializers import (
    EnqueueSerializer,
    ExplanationSerializer,
    JobSerializer,
    JobSummarySerializer,
    OperationResultSerializer,
    RedrivePreviewSerializer,
    RedriveSerializer,
    SignalSerializer,
)

PREVIEW_IDS = 100
"""How many of the ids a dry run would redrive it lists."""

_LIST_PARAMETERS = [
    OpenApiParameter(
        "status", OpenApiTypes.STR, many=True, explode=True,
        enum=[str(value) for value in Status.values],
        description="Jobs in this status (repeat, or separate with commas).",
    ),
    OpenApiParameter(
        "queue", OpenApiTypes.STR, many=True, explode=True,
        description="Jobs of this queue (repeat, or separate with commas).",
    ),
    OpenApiParameter(
        "task", OpenApiTypes.STR, many=True, explode=True,
        description="Jobs of this task, by registered name (repeat, or separate with commas).",
    ),
    OpenApiParameter(
        "error_type", OpenApiTypes.STR, many=True, explode=True,
        description="Jobs with a recorded error of this type, by its full name (e.g. "
        "builtins.ValueError; repeat, or separate with commas). Errors' messages and "
        "tracebacks are not searched.",
    ),
    OpenApiParameter(
        "ids", OpenApiTypes.INT, many=True, explode=True,
        description="These jobs (repeat, or separate with commas).",
    ),
    OpenApiParameter("workflow", OpenApiTypes.INT, description="Jobs of this workflow (its id)."),
    OpenApiParameter(
        "created_after", OpenApiTypes.DATETIME,
        description="Jobs enqueued at or after this time (ISO 8601; UTC without an offset).",
    ),
    OpenApiParameter(
        "created_before", OpenApiTypes.DATETIME, description="Jobs enqueued before this time."
    ),
]  # fmt: skip
_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="A job id.")
_NOT_FOUND = OpenApiResponse(description="There is no such job.")
_ACTED = {200: OperationResultSerializer, 404: _NOT_FOUND}
# Fields a list never shows: reading them would only cost.
_HEAVY = ("args", "kwargs", "result", "errors", "progress_details", "input_shape")
KEY_NAMESPACE = "api"
"""The namespace of the unique keys of jobs enqueued through the API (``enqueue.namespaced_key``):
an API caller can neither take a key the application will use nor reach the application's
jobs through one."""
_DUPLICATE = inline_serializer(
    "DuplicateJob",
    {
        "id": serializers.IntegerField(help_text="The job that holds the unique key."),
        "duplicate": serializers.BooleanField(help_text="Always true: no job was enqueued."),
    },
)


def _operation_doc(summary: str, permission: str, description: str) -> Any:
    return documented(
        summary=summary, parameters=[_ID], request=None, responses=_ACTED,
        description=f"{description}\n\nPermission: `django_workqueue.{permission}`.",
    )  # fmt: skip


class JobViewSet(WorkqueueView, viewsets.GenericViewSet):
    pagination_class = NewestFirst
    workqueue_actions = {
        "list": "view", "retrieve": "view", "create": "enqueue", "cancel": "cancel",
        "retry": "retry", "hold": "hold", "release": "release", "redrive": "redrive",
        "explain": "view", "signal": "signal",
    }  # fmt: skip

    def get_queryset(self) -> Any:
        return Job.objects.using(conf.DATABASE)

    def _context(self) -> dict[str, Any]:
        return {"clearance": Clearance.of(self.request.user)}

    @documented(
        summary="List jobs",
        description="Newest first, a page at a time (follow `next`). "
        "Permission: `django_workqueue.view_job`.",
        parameters=_LIST_PARAMETERS,
        responses={200: JobSummarySerializer(many=True)},
    )
    def list(self, request: Request) -> Response:
        filters = from_query(request.query_params, allowed=("cursor", "limit"))
        jobs = filters.apply(self.get_queryset()).defer(*_HEAVY)
        page = self.paginate_queryset(jobs)
        data = JobSummarySerializer(page, many=True, context=self._context()).data
        return self.get_paginated_response(data)

    @documented(
        summary="Show a job",
        description="Arguments and results with `view_job_payload`, tracebacks with "
        "`view_job_traceback`; error and progress messages are redacted without the payload "
        "permission. Permission: `django_workqueue.view_job`.",
        parameters=[_ID],
        responses={200: JobSerializer, 404: _NOT_FOUND},
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        job = self.get_queryset().filter(pk=object_id(pk, "job")).first()
        if job is None:
            raise NotFound(f"there is no job {pk}")
        return Response(JobSerializer(job, context=self._context()).data)

    @documented(
        summary="Explain why a job is not running",
        description="The reasons that keep a job waiting (scheduled, held, its queue paused, "
        "prerequisites, a concurrency or rate limit, no live worker for its queue, its task "
        "unknown, jobs ahead of it), where it runs, or how it ended. A limit key derived from "
        "the arguments and error messages are masked without `view_job_payload`. "
        "Permission: `django_workqueue.view_job`.",
        parameters=[_ID],
        responses={200: ExplanationSerializer, 404: _NOT_FOUND},
    )
    @action(detail=True, methods=["get"])
    def explain(self, request: Request, pk: str) -> Response:
        job = self.get_queryset().filter(pk=object_id(pk, "job")).first()
        if job is None:
            raise NotFound(f"there is no job {pk}")
        answer = operations.explain(job, clearance=Clearance.of(request.user), alias=conf.DATABASE)
        return Response(answer.as_dict())

    @documented(
        summary="Enqueue a job",
        description="Only tasks registered with `@task(api=True)`; the arguments are checked "
        "against the task function's parameters. Unique keys (`unique_key`, or the one "
        "`unique_on` derives) live in the API's own namespace, apart from the application's. "
        "A key that another job enqueued through the API holds gives that job back (200, "
        "`duplicate: true`): as `view_job` shows it, or only its id without `view_job`. "
        "Permission: `django_workqueue.add_job`.",
        request=EnqueueSerializer,
        responses={
            201: JobSerializer,
            200: PolymorphicProxySerializer(
                component_name="EnqueueDuplicate", serializers=[JobSerializer, _DUPLICATE],
                resource_type_field_name=None,
            ),
            400: OpenApiResponse(description="Not an API task, or arguments that do not fit."),
        },
    )  # fmt: skip
    def create(self, request: Request) -> Response:
        body = EnqueueSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        name = data["task"]
        task = find_task(name)  # a look-up in the registry: a name imports nothing
        if task is None or not task.spec.api:
            # One answer for both, so that it does not tell which other tasks exist.
            raise ValidationError(
                {"task": f"no task the API may enqueue is registered as {name!r}; give the "
                 f"task's registered name (its dotted path), and register the task with "
                 f"@task(api=True) to allow it"}
            )  # fmt: skip
        options = {
            key: data[key]
            for key in ("queue", "priority", "delay", "unique_key", "max_attempts")
            if key in data
        }
        try:
            job = enqueue_one(
                task.using(**options), data["args"], data["kwargs"], namespace=KEY_NAMESPACE
            )
        except EnqueueError as exc:
            raise ValidationError({"detail": str(exc)}) from None
        duplicate = bool(getattr(job, "duplicate", False))
        audit.record(
            request.user, "enqueue", {"ids": [job.pk], "task": name}, int(not duplicate),
            AuditSource.API,
        )  # fmt: skip
        if duplicate and not permissions.allowed(request.user, "view"):
            # Another caller's job: that it exists is all a caller without view_job learns.
            return Response({"id": job.pk, "duplicate": True}, status=status.HTTP_200_OK)
        stored = self.get_queryset().get(pk=job.pk)
        stored.duplicate = duplicate
        return Response(
            JobSerializer(stored, context=self._context()).data,
            status=status.HTTP_200_OK if duplicate else status.HTTP_201_CREATED,
        )

    @_operation_doc(
        "Cancel a job", "cancel_job",
        "A waiting job ends cancelled and never runs; a running one is asked to stop.",
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        job_id = object_id(pk, "job")
        return audited(request, "cancel", {"ids": [job_id]}, operations.cancel_job(job_id))

    @_operation_doc(
        "Retry a job", "retry_job",
        "A failed job is redriven with a fresh attempt budget; a scheduled one is due now.",
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str) -> Response:
        job_id = object_id(pk, "job")
        return audited(request, "retry", {"ids": [job_id]}, operations.retry_job(job_id))

    @_operation_doc(
        "Hold a job", "hold_job", "A waiting job is kept from running until it is released."
    )
    @action(detail=True, methods=["post"])
    def hold(self, request: Request, pk: str) -> Response:
        job_id = object_id(pk, "job")
        return audited(request, "hold", {"ids": [job_id]}, operations.hold_job(job_id))

    @_operation_doc("Release a job", "hold_job", "A held job waits to run again.")
    @action(detail=True, methods=["post"])
    def release(self, request: Request, pk: str) -> Response:
        job_id = object_id(pk, "job")
        return audited(request, "release", {"ids": [job_id]}, operations.release_job(job_id))

    @documented(
        summary="Send a signal to a job",
        description="Sends the signal `name` with a JSON `payload` to the job: a "
        "`context.wait_for_signal(name)` takes it (a waiting job is woken; otherwise it is "
        "kept for the next wait). A finished job refuses it (`unchanged`). "
        "Permission: `django_workqueue.signal_job`.",
        parameters=[_ID], request=SignalSerializer, responses=_ACTED,
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def signal(self, request: Request, pk: str) -> Response:
        return signalled(request, object_id(pk, "job"))

    @documented(
        summary="Redrive failed jobs",
        description="Moves the failed jobs a filter selects back to ready, with a fresh "
        "attempt budget (their error history is kept). Give at least one filter, or "
        "`all: true`; `dry_run: true` counts them and changes nothing. "
        "Permission: `django_workqueue.retry_job`.",
        request=RedriveSerializer,
        responses={
            200: PolymorphicProxySerializer(
                component_name="RedriveOutcome",
                serializers=[OperationResultSerializer, RedrivePreviewSerializer],
                resource_type_field_name=None,
            )
        },
    )
    @action(detail=False, methods=["post"])
    def redrive(self, request: Request) -> Response:
        body = RedriveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        filters = JobFilters(
            ids=tuple(dict.fromkeys(data.get("ids", ()))), queues=tuple(data.get("queue", ())),
            tasks=tuple(data.get("task", ())), error_types=tuple(data.get("error_type", ())),
            workflow=data.get("workflow"), created_after=data.get("created_after"),
            created_before=data.get("created_before"),
        )  # fmt: skip
        if not filters.given and not data["all"]:
            raise ValidationError(
                {"all": "give a filter (ids, queue, task, error_type, workflow, created_after, "
                 "created_before), or all: true to redrive every failed job"}
            )  # fmt: skip
        selection = filters.apply(self.get_queryset()).filter(status=Status.FAILED)
        if data["dry_run"]:
            ids = list(selection.order_by("pk").values_list("pk", flat=True)[:PREVIEW_IDS])
            preview = {"dry_run": True, "matched": selection.count(), "ids": ids}
            return Response(RedrivePreviewSerializer(preview).data)
        result = operations.redrive(selection, attempts=data.get("attempts"))
        target: dict[str, Any] = {"filter": filters.as_target()}
        if not filters.given:
            target["all"] = True
        return audited(request, "redrive", target, result)
