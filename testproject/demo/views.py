"""The live progress demo: ``/demo/progress/`` starts a long job, ``/demo/progress/<id>/``
watches it move over the job's websocket (``django_workqueue/live-progress.js``).
``/demo/receipts/`` is an async view that enqueues with ``await task.aenqueue(...)``."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from django_workqueue.models import Job
from testproject.demo.tasks import crunch_numbers, send_receipt

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


@login_required
@require_POST
async def receipt(request: HttpRequest) -> JsonResponse:
    """Enqueue an order's receipt from an async view: one receipt per order, so a repeated
    POST returns the job already waiting (``duplicate``). The job is committed when the
    ``await`` returns (async code holds no transaction for it to join)."""
    order_id, email = request.POST.get("order_id", ""), request.POST.get("email", "")
    if not order_id.isdigit() or not email:
        return JsonResponse({"error": "POST order_id (a number) and email"}, status=400)
    job = await send_receipt.using(unique_key=f"receipt:{order_id}").aenqueue(int(order_id), email)
    status = 200 if job.duplicate else 201
    return JsonResponse({"job": job.pk, "duplicate": job.duplicate}, status=status)
