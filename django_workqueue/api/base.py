"""What every view of the API shares: who may call it and how, what it accepts, and how the
library's errors become HTTP answers.

Authentication is HTTP basic or Django's session (DRF's ``SessionAuthentication`` enforces CSRF
for it), JSON is the only format in and out, and a request body is bounded before it is
parsed. The library's own errors map to 400 (a bad request the message explains) or 404 (an
unknown job, workflow, queue or schedule); anything else stays a server error.
"""

from __future__ import annotations

import io
from typing import Any, ClassVar

from django.core.exceptions import PermissionDenied
from django.db import models
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, status
from rest_framework.authentication import BasicAuthentication, SessionAuthentication
from rest_framework.exceptions import ValidationError
from rest_framework.parsers import JSONParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler

from .. import audit, operations
from ..conf import workqueue_settings as conf
from ..exceptions import (
    EnqueueError,
    InvalidFilterValue,
    InvalidSlots,
    UnknownQueue,
    UnknownSchedule,
    UnknownWorker,
)
from ..filter_values import object_id as checked_id
from ..models import AuditSource
from ..operations import OperationResult
from .permissions import HasWorkqueuePermission
from .serializers import SignalSerializer

BODY_SLACK_BYTES = 64 * 1024
"""A request body may exceed ``WORKQUEUE["MAX_PAYLOAD_BYTES"]`` by this much (the options and
the JSON around the arguments); a larger one is refused before it is parsed."""


class RequestTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class BoundedJSONParser(JSONParser):
    """JSON, read only up to the payload limit plus ``BODY_SLACK_BYTES``."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = conf.MAX_PAYLOAD_BYTES + BODY_SLACK_BYTES
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise RequestTooLarge(
                f"the request body is larger than {limit:,} bytes: the arguments may take "
                f"{conf.MAX_PAYLOAD_BYTES:,} (WORKQUEUE['MAX_PAYLOAD_BYTES'])"
            )
        try:
            return super().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError:  # "[[[[…" a hundred thousand deep: json gives up, not a 500
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None


def _handle(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, models.ObjectDoesNotExist | UnknownQueue | UnknownSchedule | UnknownWorker):
        exc = exceptions.NotFound(str(exc))
    elif isinstance(exc, EnqueueError | InvalidSlots | InvalidFilterValue):
        exc = exceptions.ValidationError({"detail": str(exc)})
    elif isinstance(exc, PermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or None)
    return exception_handler(exc, context)


class WorkqueueView:
    """The mix-in of every view: explicit authentication and permission classes (never the
    project's defaults), JSON only, and the library's errors as 400 and 404."""

    authentication_classes: ClassVar[list[Any]] = [BasicAuthentication, SessionAuthentication]
    permission_classes: ClassVar[list[Any]] = [HasWorkqueuePermission]
    parser_classes: ClassVar[list[Any]] = [BoundedJSONParser]
    renderer_classes: ClassVar[list[Any]] = [JSONRenderer]
    schema = AutoSchema()
    metadata_class = None
    http_method_names: ClassVar[list[str]] = ["get", "post", "head"]
    """No OPTIONS descriptions (the OpenAPI schema describes every route), and no PUT, PATCH
    or DELETE: reads are GET, changes are POST."""
    workqueue_actions: ClassVar[dict[str, str]] = {}
    """Route (a viewset action, or an HTTP method in lower case) -> workqueue action."""

    def get_exception_handler(self) -> Any:
        return _handle


def documented(**options: Any) -> Any:
    """``extend_schema(**options)`` over drf-spectacular's ``AutoSchema``, whatever the
    project's ``DEFAULT_SCHEMA_CLASS`` (the API's schema must not depend on it)."""

    def decorate(function: Any) -> Any:
        function.schema = AutoSchema
        return extend_schema(**options)(function)

    return decorate


def object_id(value: Any, what: str) -> int:
    """A path's id as a positive 64-bit integer, or 404 (an id that is not one names nothing)."""
    try:
        return checked_id(str(value), what)
    except InvalidFilterValue:
        raise exceptions.NotFound(f"there is no {what} {str(value)[:40]!r}") from None


def audited(request: Request, action: str, target: Any, result: OperationResult) -> Response:
    """Write the audit record of a change made through the API and answer with its result.

    The record is written after the operation, in a transaction of its own, as the
    ``workqueue`` command does: some operations run in many transactions (a redrive by
    filter, batch by batch) and one record with the total serves the reader."""
    audit.record(request.user, action, target, result.count, AuditSource.API)
    return Response({"action": result.action, "count": result.count, "message": result.message})


def signalled(request: Request, job_id: int = 0, workflow: Any = None) -> Response:
    """Send the signal the request's body names (``SignalSerializer``) to the job ``job_id``
    or to ``workflow``, audited (the payload is not kept in the trail: it may be private)."""
    body = SignalSerializer(data=request.data)
    body.is_valid(raise_exception=True)
    name, payload = body.validated_data["name"], body.validated_data.get("payload")
    try:
        if workflow is not None:
            result = operations.send_signal(workflow, name, payload)
            target: dict[str, Any] = {"workflow": workflow.pk, "signal": name}
        else:
            result = operations.send_signal(job_id, name, payload)
            target = {"ids": [job_id], "signal": name}
    except EnqueueError as exc:  # a bad name or payload
        raise ValidationError({"detail": str(exc)}) from None
    return audited(request, "signal", target, result)
