"""The live progress demo: ``/demo/progress/`` starts a long job, ``/demo/progress/<id>/``
watches it move over the job's websocket (``django_workqueue/live-progress.js``)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods

from django_workqueue.models import Job
from testproject.demo.tasks import crunch_numbers

SECONDS = 10.0
STEPS = 20


@login_required
@require_http_methods(["GET", "POST"])
def start(request: HttpRequest) -> HttpResponse:
    """A button that enqueues ``crunch_numbers`` (about 10 s, 20 reports) and shows it."""
    if request.method == "POST":
        job = crunch_numbers.enqueue(seconds=SECONDS, steps=STEPS)
        return redirect("demo-progress", job_id=job.pk)
    recent = Job.objects.filter(task_name=crunch_numbers.name).order_by("-id")[:5]
    return render(request, "demo/start.html", {"recent": recent, "seconds": SECONDS})


@login_required
def progress(request: HttpRequest, job_id: int) -> HttpResponse:
    """A live progress bar for one job (any job: the websocket checks the permissions)."""
    job = get_object_or_404(Job, pk=job_id)
    return render(request, "demo/progress.html", {"job": job})
