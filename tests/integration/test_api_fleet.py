"""``workflows/`` (with the graph), ``queues/`` (pause, resume), ``schedules/`` (run now),
``workers/`` and ``stats/``."""

from __future__ import annotations

import pytest

from django_workqueue import chain, group, operations
from django_workqueue.models import AuditRecord, Job, Queue, Schedule, WorkerProcess
from django_workqueue.states import Status
from testproject.testapp.tasks import api_add
from tests.support.api import API, client_as
from tests.support.factories import JobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


def get(path: str, role: str = "viewer"):
    response = client_as(role).get(f"{API}{path}")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_workflow_shows_its_counters_and_its_graph_in_layers():
    workflow = chain(api_add.s(1), group(api_add.s(2), api_add.s(3))).enqueue()
    first, second, third = Job.objects.filter(workflow=workflow).order_by("id")

    shown = get(f"workflows/{workflow.pk}/")

    assert (shown["id"], shown["total"], shown["open"]) == (workflow.pk, 3, 3)
    layers = {node["id"]: node["layer"] for node in shown["graph"]["nodes"]}
    assert layers == {first.pk: 0, second.pk: 1, third.pk: 1}
    edges = {(edge["from"], edge["to"]) for edge in shown["graph"]["edges"]}
    assert edges == {(first.pk, second.pk), (first.pk, third.pk)}
    assert shown["graph"]["truncated"] is False


def test_the_workflow_list_is_newest_first():
    older = chain(api_add.s(1)).enqueue()
    newer = chain(api_add.s(2)).enqueue()

    rows = get("workflows/")["results"]

    assert [row["id"] for row in rows] == [newer.pk, older.pk]


def test_a_workflow_result_is_redacted_without_the_payload_permission():
    workflow = chain(api_add.s(1)).enqueue()
    workflow.result = {"password": "hunter2"}
    workflow.save(update_fields=["result"])

    assert "hunter2" not in str(get(f"workflows/{workflow.pk}/"))
    assert get(f"workflows/{workflow.pk}/", "operator")["result"] == {"password": "hunter2"}


def test_cancel_a_workflow_stops_its_jobs_and_is_audited():
    workflow = chain(api_add.s(1), api_add.s()).enqueue()

    response = client_as("operator").post(f"{API}workflows/{workflow.pk}/cancel/")

    assert response.json()["action"] == "cancelled"
    assert response.json()["count"] == 2
    assert set(Job.objects.values_list("status", flat=True)) == {Status.CANCELLED}
    record = AuditRecord.objects.get()
    assert (record.action, record.target, record.changed) == (
        "cancel_workflow", {"workflow": workflow.pk}, 2,
    )  # fmt: skip


def test_cancelling_an_unknown_workflow_is_a_404():
    response = client_as("operator").post(f"{API}workflows/424242/cancel/")

    assert response.status_code == 404
    assert not AuditRecord.objects.exists()


def test_queues_list_every_configured_queue_and_whether_it_is_paused():
    operations.pause_queue("mail")

    rows = {row["name"]: row for row in get("queues/")}

    assert set(rows) == {"default", "mail", "reports", "low"}
    assert rows["mail"]["paused"] is True
    assert rows["mail"]["paused_at"] is not None
    assert rows["default"]["paused"] is False


def test_pause_and_resume_a_queue():
    client = client_as("operator")

    paused = client.post(f"{API}queues/mail/pause/")
    again = client.post(f"{API}queues/mail/pause/")
    resumed = client.post(f"{API}queues/mail/resume/")

    assert [r.json()["action"] for r in (paused, again, resumed)] == [
        "paused", "unchanged", "resumed",
    ]  # fmt: skip
    assert not Queue.objects.get(name="mail").paused
    targets = list(AuditRecord.objects.order_by("id").values_list("action", "target"))
    assert targets[0] == ("pause", {"queues": ["mail"]})


def test_an_unknown_queue_is_a_404():
    response = client_as("operator").post(f"{API}queues/nowhere/pause/")

    assert response.status_code == 404
    assert "WORKQUEUE['QUEUES']" in response.json()["detail"]
    assert not AuditRecord.objects.exists()


def make_schedule(**fields) -> Schedule:
    fields = {
        "name": "nightly", "task_name": "testproject.testapp.tasks.scheduled_tick",
        "cron": "0 3 * * *", "kwargs": {"label": "token=abc"}, **fields,
    }  # fmt: skip
    return Schedule.objects.create(**fields)


def test_schedules_are_listed_with_their_arguments_redacted_for_viewers():
    make_schedule()

    (row,) = get("schedules/")
    (shown,) = get("schedules/", "operator")

    assert (row["name"], row["cron"], row["enabled"]) == ("nightly", "0 3 * * *", True)
    assert "abc" not in str(row["kwargs"])
    assert shown["kwargs"] == {"label": "token=abc"}


def test_run_a_schedule_now_enqueues_one_run():
    make_schedule(enabled=False)

    response = client_as("operator").post(f"{API}schedules/nightly/run/")

    assert response.status_code == 201
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.task_name, job.kwargs) == (
        "testproject.testapp.tasks.scheduled_tick",
        {"label": "token=abc"},
    )
    record = AuditRecord.objects.get()
    assert (record.action, record.target) == (
        "run_schedule",
        {"schedule": "nightly", "ids": [job.pk]},
    )


def test_an_unknown_schedule_is_a_404():
    assert client_as("operator").post(f"{API}schedules/nope/run/").status_code == 404


def test_a_schedule_whose_task_is_gone_is_a_400_naming_it():
    make_schedule(task_name="gone.task")

    response = client_as("operator").post(f"{API}schedules/nightly/run/")

    assert response.status_code == 400
    assert "gone.task" in response.json()["detail"]


def test_workers_lists_the_live_workers():
    WorkerProcess.objects.create(id="w-1", host="h", pid=7, queues=["default"], concurrency=4)

    (row,) = get("workers/")

    assert (row["id"], row["host"], row["pid"], row["concurrency"]) == ("w-1", "h", 7, 4)


def test_stats_counts_unfinished_jobs_per_queue_and_task():
    JobFactory.create_batch(2)
    JobFactory(status=Status.HELD, queue="mail")

    snapshot = get("stats/")

    queues = {row["queue"]: row for row in snapshot["queues"]}
    assert queues["default"]["counts"]["ready"] == 2
    assert queues["default"]["backlog"] == 2
    assert queues["mail"]["counts"]["held"] == 1
    assert [window["minutes"] for window in queues["default"]["windows"]] == [1, 5, 15]
    assert {row["task_name"] for row in snapshot["tasks"]} == {"testproject.testapp.tasks.add"}
