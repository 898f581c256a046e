"""The demo's workflow: launching a product, with a fan-out, a fan-in and an approval.

::

    group(
        group(render_photo.s(sku, n) for n ...).then(build_gallery.s(sku)),   fan-out, fan-in
        auto_reject.using(delay=timedelta(hours=2)).s(sku),                  the approval
    ).then(publish_product.s(sku), announce.s(...), close_launch.s(sku))

``publish_product`` waits for the gallery and the approval. The demo plays the manager: once
the gallery is built it approves with ``operations.complete_job``, which ends the approval
``succeeded`` with the manager's answer as its result and releases ``publish_product`` in the
same transaction. ``announce`` fans out at run time (``context.add``); ``close_launch`` waits for
it and for every mail it added.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.db import transaction

from django_workqueue import group
from django_workqueue.models import Dependency, Job, Workflow
from django_workqueue.operations import complete_job
from testproject.demo import tasks

SKU = "sku-42"
APPROVAL = {"approved_by": "demo manager"}
# What the demo's story says about some steps, shown beside them in the graph.
NOTES = {
    tasks.auto_reject.name: "approved from outside: complete_job()",
    tasks.notify_subscriber.name: "added at run time by announce (context.add)",
}


def subscribers(quick: bool) -> list[str]:
    return [f"fan{n}@example.com" for n in range(1, (2 if quick else 3) + 1)]


def enqueue(alias: str, quick: bool) -> Workflow:
    """Write the launch workflow (every job, edge and counter in one transaction)."""
    photos = 3 if quick else 4
    launch = group(
        group(tasks.render_photo.s(SKU, n) for n in range(1, photos + 1)).then(
            tasks.build_gallery.s(SKU)
        ),
        tasks.auto_reject.using(delay=timedelta(hours=2)).s(SKU),
    ).then(
        tasks.publish_product.s(SKU),
        tasks.announce.s(subscribers=subscribers(quick)),
        tasks.close_launch.s(SKU),
    )
    with transaction.atomic(using=alias):
        return launch.enqueue(name=f"launch {SKU}")


def approve_when_ready(alias: str, workflow: Workflow, say: Callable[[str], None]) -> bool:
    """Play the manager: once the gallery is built (the approval is all ``publish_product``
    still waits for), approve the launch. Returns whether it approved just now."""
    jobs = Job.objects.using(alias).filter(workflow_id=workflow.pk)
    approval = jobs.filter(task_name=tasks.auto_reject.name, status="scheduled").first()
    publish = jobs.filter(task_name=tasks.publish_product.name).first()
    if approval is None or publish is None or publish.waiting_on != 1:
        return False
    result = complete_job(approval, APPROVAL, alias=alias)
    publish.refresh_from_db(fields=["status"])
    say(
        f"  >> the manager approves: complete_job(#{approval.pk} auto_reject, {APPROVAL}) -> "
        f"{result.action}; publish_product #{publish.pk} is {publish.status} now"
    )
    return True


def report(alias: str, workflow: Workflow, write: Callable[[str], None]) -> None:
    """The workflow as a graph: each job with what it waited for, its status and result."""
    workflow.refresh_from_db(using=alias)
    jobs = list(Job.objects.using(alias).filter(workflow_id=workflow.pk).order_by("id"))
    waits: dict[int, list[int]] = {}
    for job_id, prerequisite in (
        Dependency.objects.using(alias)
        .filter(job__workflow_id=workflow.pk)
        .order_by("job_id", "position")
        .values_list("job_id", "prerequisite_id")
    ):
        waits.setdefault(job_id, []).append(prerequisite)
    took = ""
    if workflow.finished_at is not None:
        took = f" in {(workflow.finished_at - workflow.created_at).total_seconds():.1f}s"
    write(f'\nWorkflow #{workflow.pk} "{workflow.name}": {workflow.status}{took}')
    counts = workflow.counts
    write("  counters: " + ", ".join(f"{name} {counts[name]}" for name in counts))
    write(f"  {'job':<6}{'task':<19}{'status':<11}{'waits for':<18}result")
    for job in jobs:
        name = job.task_name.rsplit(".", 1)[-1]
        after = " ".join(f"#{pk}" for pk in waits.get(job.pk, [])) or "-"
        write(f"  #{job.pk:<5}{name:<19}{job.status:<11}{after:<18}{_result(job)}")
        if job.task_name in NOTES:
            write(f"  {'':<6}{'':<19}{'':<11}{'':<18}({NOTES[job.task_name]})")
    write(f"  result: {_short(workflow.result, 100)}")


def _result(job: Job) -> str:
    if job.status == "succeeded":
        return _short(job.result, 60)
    if job.errors:
        return str(job.errors[-1].get("message", ""))[:60]
    return ""


def _short(value: Any, width: int) -> str:
    text = json.dumps(value)
    return text if len(text) <= width else text[: width - 1] + "…"
