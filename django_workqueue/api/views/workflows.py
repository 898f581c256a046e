"""``workflows/``: the list, one workflow with its graph (``workflow.layout``), cancelling one
and sending it a signal."""

from __future__ import annotations

from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response

from ... import operations
from ...conf import workqueue_settings as conf
from ...disclosure import Clearance
from ...models import Workflow
from ...workflow.layout import workflow_graph
from ..base import WorkqueueView, audited, documented, object_id, signalled
from ..filters import refuse_unknown
from ..pagination import NewestFirst
from ..serializers import (
    OperationResultSerializer,
    SignalSerializer,
    WorkflowSerializer,
    WorkflowSummarySerializer,
)

_ID = OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="A workflow id.")
_NOT_FOUND = OpenApiResponse(description="There is no such workflow.")


class WorkflowViewSet(WorkqueueView, viewsets.GenericViewSet):
    pagination_class = NewestFirst
    workqueue_actions = {
        "list": "view", "retrieve": "view", "cancel": "cancel", "signal": "signal",
    }  # fmt: skip

    def get_queryset(self) -> Any:
        return Workflow.objects.using(conf.DATABASE)

    @documented(
        summary="List workflows",
        description="Newest first, a page at a time. Permission: `django_workqueue.view_job`.",
        responses={200: WorkflowSummarySerializer(many=True)},
    )
    def list(self, request: Request) -> Response:
        refuse_unknown(request.query_params, ("cursor", "limit"))
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(WorkflowSummarySerializer(page, many=True).data)

    @documented(
        summary="Show a workflow",
        description="Its counters, result and the graph of its jobs in layers (at most "
        "500 jobs; `truncated` says when there are more). "
        "Permission: `django_workqueue.view_job`.",
        parameters=[_ID],
        responses={200: WorkflowSerializer, 404: _NOT_FOUND},
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        workflow = self.get_queryset().filter(pk=object_id(pk, "workflow")).first()
        if workflow is None:
            raise NotFound(f"there is no workflow {pk}")
        context = {
            "clearance": Clearance.of(request.user),
            "graph": workflow_graph(workflow).as_dict(),
        }
        return Response(WorkflowSerializer(workflow, context=context).data)

    @documented(
        summary="Cancel a workflow",
        description="Its waiting jobs end cancelled and never run, its running jobs are asked "
        "to stop, and steps they add at run time are not written. "
        "Permission: `django_workqueue.cancel_job`.",
        parameters=[_ID], request=None,
        responses={200: OperationResultSerializer, 404: _NOT_FOUND},
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        workflow_id = object_id(pk, "workflow")
        result = operations.cancel_workflow(workflow_id)
        return audited(request, "cancel_workflow", {"workflow": workflow_id}, result)

    @documented(
        summary="Send a signal to a workflow",
        description="Sends the signal `name` with a JSON `payload` to the workflow: a "
        "`context.wait_for_signal(name)` of any of its jobs takes it (one wait, once). A "
        "finished workflow refuses it (`unchanged`). "
        "Permission: `django_workqueue.signal_job`.",
        parameters=[_ID], request=SignalSerializer,
        responses={200: OperationResultSerializer, 404: _NOT_FOUND},
    )  # fmt: skip
    @action(detail=True, methods=["post"])
    def signal(self, request: Request, pk: str) -> Response:
        workflow = self.get_queryset().filter(pk=object_id(pk, "workflow")).first()
        if workflow is None:
            raise NotFound(f"there is no workflow {pk}")
        return signalled(request, workflow=workflow)
