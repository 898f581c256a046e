"""HTTP views: ``metrics`` serves Prometheus' text format of the fleet's stats.

Denied by default. A request passes with ``Authorization: Bearer <WORKQUEUE["METRICS_TOKEN"]>``
(a scraper), or from a logged-in user with the ``django_workqueue.view_job`` permission (staff
browsing it; superusers have every permission). Route it yourself:

>>> path("workqueue/metrics", django_workqueue.views.metrics)
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from .conf import workqueue_settings as conf

PERMISSION = "django_workqueue.view_job"


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """The fleet's queues, tasks and workers as Prometheus metrics (``metrics.exposition``)."""
    if not _allowed(request):
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return HttpResponse("permission denied\n", status=403, content_type="text/plain")
        response = HttpResponse("authentication required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="workqueue metrics"'
        return response
    try:  # imported here: prometheus-client is an optional extra (prometheus)
        from . import metrics as prometheus
    except ImportError as exc:  # the extra is not installed: say so, not a bare 500
        return HttpResponse(f"{exc}\n", status=501, content_type="text/plain")
    return HttpResponse(prometheus.exposition(), content_type=prometheus.CONTENT_TYPE)


def _allowed(request: HttpRequest) -> bool:
    token = conf.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[len("Bearer ") :].encode(), str(token).encode())
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_authenticated and user.has_perm(PERMISSION))
