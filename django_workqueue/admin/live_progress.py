"""The job page's progress bar and how it stays current.

One rule for the bar, drawn by the template and kept by ``live-progress.js`` alike: a reported
total gives a bar with a value; a job that succeeded without one shows a full bar; any other
finished job shows none; a running job without a total is busy (an indeterminate bar); a
waiting job shows an empty, still bar. A finished job's page never shows motion.

How the page follows an unfinished job: over the websocket when the project's ASGI application
routes it (``realtime.mounted``), else by polling ``progress_view`` every ``POLL_SECONDS``,
which answers what the websocket would (``realtime.messages``). A finished job is not followed.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, JsonResponse
from django.urls import reverse

from ..disclosure import Clearance
from ..models import Job
from ..realtime.messages import JOB_FIELDS, job_message, job_state
from ..realtime.mounted import job_route_mounted
from ..states import Status

POLL_SECONDS = 2
"""How often the job page asks for news of an unfinished job where there is no websocket."""


def bar(job: Job) -> dict[str, Any] | None:
    """The bar's ``max`` and ``value`` (``busy``: none, indeterminate), or ``None``: no bar."""
    if job.progress_total:
        return {
            "max": job.progress_total,
            "value": min(job.progress_current or 0, job.progress_total),
        }
    if job.status == Status.SUCCEEDED:
        return {"max": 1, "value": 1}
    if job.is_finished:
        return None
    if job.status == Status.RUNNING:
        return {"busy": True}
    return {"max": 1, "value": 0}


def follow(job: Job) -> dict[str, Any] | None:
    """How the page follows ``job``: ``{"mode": "websocket"}``, ``{"mode": "poll", "url": ...,
    "seconds": ...}``, or ``None`` for a finished job."""
    if job.is_finished:
        return None
    if job_route_mounted():
        return {"mode": "websocket"}
    url = reverse("admin:django_workqueue_job_progress", args=[job.pk])
    return {"mode": "poll", "url": url, "seconds": POLL_SECONDS}


def context(job: Job) -> dict[str, Any]:
    return {"wq_bar": bar(job), "wq_follow": follow(job)}


def progress_view(request: HttpRequest, job: Job) -> JsonResponse:
    """The job's state as the websocket's snapshot message, as ``request.user`` may see it."""
    row = Job.objects.using(job._state.db).filter(pk=job.pk).values(*JOB_FIELDS).get()
    return JsonResponse(job_message("snapshot", job_state(row), Clearance.of(request.user)))
