"""The workflow graph, the queues, the schedules and the dashboard pages of the admin."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_workqueue.models import (
    AuditRecord,
    Dependency,
    Job,
    Queue,
    Schedule,
    StatsCounter,
    Workflow,
)  # fmt: skip
from django_workqueue.stats import histogram
from tests.support.factories import JobFactory
from tests.support.users import VIEWER, user_with

pytestmark = pytest.mark.django_db


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def staff(*codenames: str) -> Client:
    return client_for(user_with(*codenames, username="staff", is_staff=True))


def messages_of(response) -> str:
    return " ".join(str(m) for m in response.context["messages"])


def test_the_workflow_page_draws_a_node_per_job_and_an_edge_per_dependency():
    workflow = Workflow.objects.create(name="diamond", total=4, open=4)
    top = JobFactory(workflow=workflow, status="succeeded")
    left = JobFactory(workflow=workflow, status="failed")
    right = JobFactory(workflow=workflow, status="running")
    bottom = JobFactory(workflow=workflow, status="blocked")
    edges = [(left, top), (right, top), (bottom, left), (bottom, right)]
    for position, (job, prerequisite) in enumerate(edges):
        Dependency.objects.create(job=job, prerequisite=prerequisite, position=position)

    html = (
        staff(*VIEWER)
        .get(reverse("admin:django_workqueue_workflow_change", args=[workflow.pk]))
        .content.decode()
    )

    svg = html[
        html.index('<svg class="wq-graph"') : html.index(
            "</svg>", html.index('<svg class="wq-graph"')
        )
    ]
    nodes = re.findall(r'class="wq-node" data-job="(\d+)" data-status="(\w+)"', svg)
    assert sorted(nodes) == sorted((str(job.pk), job.status) for job in (top, left, right, bottom))
    drawn = re.findall(r'class="wq-edge" data-from="(\d+)" data-to="(\d+)"', svg)
    assert sorted(drawn) == sorted((str(p.pk), str(j.pk)) for j, p in edges)
    for job in (top, left, right, bottom):
        assert reverse("admin:django_workqueue_job_change", args=[job.pk]) in svg
    assert "<script" not in svg and "http://" not in svg.replace("http://www.w3.org/2000/svg", "")


def test_cancelling_a_workflow_cancels_its_waiting_jobs_and_is_audited():
    workflow = Workflow.objects.create(total=2, open=2)
    jobs = [JobFactory(workflow=workflow), JobFactory(workflow=workflow, status="blocked")]
    client = staff("view_job", "cancel_job")
    response = client.post(
        "/admin/django_workqueue/workflow/",
        {"action": "cancel_workflows", "_selected_action": [workflow.pk], "index": 0},
        follow=True,
    )
    assert [Job.objects.get(pk=j.pk).status for j in jobs] == ["cancelled", "cancelled"]
    assert "2 job(s) of 1 workflow(s) cancelled" in messages_of(response)
    assert AuditRecord.objects.get().action == "cancel_workflow"


def test_a_viewer_cannot_cancel_a_workflow():
    workflow = Workflow.objects.create(total=1, open=1)
    job = JobFactory(workflow=workflow)
    staff(*VIEWER).post(
        "/admin/django_workqueue/workflow/",
        {"action": "cancel_workflows", "_selected_action": [workflow.pk], "index": 0},
    )
    assert Job.objects.get(pk=job.pk).status == "ready"


def test_the_queues_page_lists_configured_queues_and_pauses_and_resumes():
    client = staff("view_job", "manage_queue")
    page = client.get(reverse("admin:django_workqueue_queue_changelist")).content.decode()
    for name in ("default", "mail", "reports", "low"):
        assert f'data-queue="{name}"' in page
    pause = reverse("admin:django_workqueue_queue_toggle", args=["mail", "pause"])
    assert f'action="{pause}"' in page

    response = client.post(pause, follow=True)
    assert Queue.objects.get(name="mail").paused
    assert "queue mail paused" in messages_of(response)
    assert "paused</strong>" in response.content.decode()

    client.post(reverse("admin:django_workqueue_queue_toggle", args=["mail", "resume"]))
    assert not Queue.objects.get(name="mail").paused
    assert [r.action for r in AuditRecord.objects.order_by("id")] == ["pause", "resume"]


def test_pausing_needs_manage_queue():
    client = staff(*VIEWER)
    response = client.post(reverse("admin:django_workqueue_queue_toggle", args=["mail", "pause"]))
    assert response.status_code == 403
    assert not Queue.objects.filter(name="mail").exists()


def test_an_unknown_queue_is_reported_not_created():
    client = staff("view_job", "manage_queue")
    url = reverse("admin:django_workqueue_queue_toggle", args=["nope", "pause"])
    response = client.post(url, follow=True)
    assert "not one of WORKQUEUE['QUEUES']" in messages_of(response)
    assert not Queue.objects.exists()


def make_schedule(**fields) -> Schedule:
    return Schedule.objects.create(
        name="hourly", task_name="testproject.testapp.tasks.add", cron="0 * * * *",
        args=[1, 2], source="runtime", **fields,
    )  # fmt: skip


def test_schedules_are_enabled_disabled_and_run_now_with_manage_schedule():
    schedule = make_schedule()
    client = staff("view_job", "manage_schedule")
    changelist = "/admin/django_workqueue/schedule/"
    post = {"_selected_action": [schedule.pk], "index": 0}

    client.post(changelist, {**post, "action": "disable_schedules"})
    assert not Schedule.objects.get().enabled
    client.post(changelist, {**post, "action": "enable_schedules"})
    assert Schedule.objects.get().enabled
    response = client.post(changelist, {**post, "action": "run_schedules_now"}, follow=True)

    job = Job.objects.get()
    assert (job.task_name, job.args) == ("testproject.testapp.tasks.add", [1, 2])
    assert "1 schedule(s) run now" in messages_of(response)
    assert [r.action for r in AuditRecord.objects.order_by("id")] == [
        "disable_schedule", "enable_schedule", "run_schedule",
    ]  # fmt: skip


def test_schedules_cannot_be_changed_or_run_without_manage_schedule():
    schedule = make_schedule()
    client = staff(*VIEWER)
    changelist = "/admin/django_workqueue/schedule/"
    client.post(changelist, {"_selected_action": [schedule.pk], "index": 0,
                             "action": "run_schedules_now"})  # fmt: skip
    client.post(changelist, {"_selected_action": [schedule.pk], "index": 0,
                             "action": "disable_schedules"})  # fmt: skip
    assert not Job.objects.exists()
    assert Schedule.objects.get().enabled
    assert client.get(f"{changelist}{schedule.pk}/change/").status_code == 200  # view only
    edit = client.post(f"{changelist}{schedule.pk}/change/", {"cron": "* * * * *"})
    assert edit.status_code == 403


def test_editing_a_schedule_checks_its_cron_expression():
    schedule = make_schedule()
    client = staff("view_job", "manage_schedule")
    url = f"/admin/django_workqueue/schedule/{schedule.pk}/change/"
    form = {
        "name": "hourly", "task_name": schedule.task_name, "cron": "61 * * * *",
        "timezone": "UTC", "args": "[1, 2]", "kwargs": "{}", "queue": "", "enabled": "on",
        "catch_up": schedule.catch_up,
    }  # fmt: skip
    bad = client.post(url, form)
    assert bad.status_code == 200  # the form again, with the problem
    assert "is not a valid cron expression" in bad.content.decode()
    assert Schedule.objects.get().cron == "0 * * * *"
    good = client.post(url, {**form, "cron": "*/5 * * * *"})
    assert good.status_code == 302
    assert Schedule.objects.get().cron == "*/5 * * * *"
    assert AuditRecord.objects.get().action == "change_schedule"


def test_the_dashboard_renders_empty():
    html = staff(*VIEWER).get(reverse("admin:django_workqueue_dashboard")).content.decode()
    assert "The dead-letter queue is empty." in html
    assert html.count('<svg class="wq-chart') == 2


def test_the_dashboard_shows_counts_charts_and_dead_letters_by_error_type():
    for _ in range(3):
        JobFactory(queue="mail")
    JobFactory(status="running", queue="mail")
    for error_type, n in (("builtins.KeyError", 2), ("app.Timeout", 1)):
        for _ in range(n):
            JobFactory(failed=True, errors=[
                {"attempt": 1, "type": "builtins.ValueError", "message": "first", "at": ""},
                {"attempt": 2, "type": error_type, "message": "last", "at": ""},
            ])  # fmt: skip
    minute = timezone.now().replace(second=0, microsecond=0)
    StatsCounter.objects.create(minute=minute, queue="mail", task_name="t", name="succeeded",
                                count=7)  # fmt: skip
    StatsCounter.objects.create(minute=minute, queue="mail", task_name="t", name="failed",
                                count=3)  # fmt: skip
    run_class = histogram.bucket(2.0)  # every attempt ran about two seconds
    StatsCounter.objects.create(minute=minute, queue="mail", task_name="t", name="run",
                                bucket=run_class, count=10)  # fmt: skip

    html = staff(*VIEWER).get(reverse("admin:django_workqueue_dashboard")).content.decode()

    assert 'class="wq-count-ready">3<' in html
    assert 'class="wq-count-running">1<' in html
    assert 'class="wq-count-failed">3<' in html
    groups = re.findall(
        r'class="wq-dead-letter" data-error-type="([\w.]+)">\s*<th>.*?</th>\s*<td>(\d+)</td>',
        html,
        re.S,
    )
    assert groups == [("builtins.KeyError", "2"), ("app.Timeout", "1")]
    assert "builtins.ValueError" not in re.findall(r'data-error-type="([\w.]+)"', html)
    bars = re.findall(r'<rect class="wq-bar"[^>]*><title>([^<]+)</title>', html)
    assert "10" in bars  # 7 succeeded + 3 failed this minute
    assert "30%" in bars
    mail = html[html.index('data-queue="mail"') :]
    mail = mail[: mail.index("</tr>")]
    run_seconds = f"{histogram.value(run_class):.3f}"
    assert f"<td>{run_seconds} / {run_seconds}</td>" in mail  # run p50 / p95
    assert "<td>-</td>" in mail  # no wait times recorded


def test_redrive_all_like_this_redrives_the_jobs_whose_last_error_is_of_that_type():
    def failing(last: str) -> Job:
        return JobFactory(failed=True, errors=[
            {"attempt": 1, "type": "builtins.KeyError", "message": "m", "at": ""},
            {"attempt": 2, "type": last, "message": "m", "at": ""},
        ])  # fmt: skip

    alike = [failing("app.Timeout"), failing("app.Timeout")]
    other = failing("builtins.KeyError")
    client = staff("view_job", "retry_job")

    response = client.post(
        reverse("admin:django_workqueue_dashboard_redrive"),
        {"error_type": "app.Timeout"},
        follow=True,
    )

    assert [Job.objects.get(pk=j.pk).status for j in alike] == ["ready", "ready"]
    assert Job.objects.get(pk=other.pk).status == "failed"
    assert "2 job(s) failing with app.Timeout redriven" in messages_of(response)
    record = AuditRecord.objects.get()
    assert (record.action, record.changed) == ("redrive", 2)


def test_redrive_all_like_this_needs_retry_job():
    job = JobFactory(failed=True)
    response = staff(*VIEWER).post(
        reverse("admin:django_workqueue_dashboard_redrive"), {"error_type": "builtins.ValueError"}
    )
    assert response.status_code == 403
    assert Job.objects.get(pk=job.pk).status == "failed"


def test_the_job_list_filters_by_error_type_queue_task_and_workflow():
    workflow = Workflow.objects.create(total=1, open=1)
    in_workflow = JobFactory(workflow=workflow)
    timeout = JobFactory(failed=True, errors=[{"attempt": 1, "type": "app.Timeout",
                                               "message": "", "at": ""}])  # fmt: skip
    mail = JobFactory(queue="mail", task_name="testproject.testapp.tasks.send_mail")
    client = staff(*VIEWER)

    def listed(query: str) -> set[int]:
        response = client.get("/admin/django_workqueue/job/" + query)
        assert response.status_code == 200
        return {job.pk for job in response.context["cl"].result_list}

    assert listed(f"?workflow={workflow.pk}") == {in_workflow.pk}
    assert listed("?error_type=app.Timeout") == {timeout.pk}
    assert listed("?queue=mail") == {mail.pk}
    assert listed("?task=testproject.testapp.tasks.send_mail") == {mail.pk}
    assert listed(f"?q={timeout.pk}") == {timeout.pk}
    assert listed("?q=testproject.testapp.tasks.send_mail") == {mail.pk}
    assert listed("?status__exact=failed") == {timeout.pk}
    assert listed("?enqueued=1h") == {in_workflow.pk, timeout.pk, mail.pk}


def test_the_workflow_page_cancel_button_cancels_it_for_users_allowed_only():
    workflow = Workflow.objects.create(total=1, open=1)
    job = JobFactory(workflow=workflow)
    page = reverse("admin:django_workqueue_workflow_change", args=[workflow.pk])
    button = reverse("admin:django_workqueue_workflow_cancel", args=[workflow.pk])

    viewer = staff(*VIEWER)
    assert button not in viewer.get(page).content.decode()
    assert viewer.post(button).status_code == 403
    assert Job.objects.get(pk=job.pk).status == "ready"

    operator = client_for(user_with("view_job", "cancel_job", username="op", is_staff=True))
    assert button in operator.get(page).content.decode()
    response = operator.post(button, follow=True)
    assert Job.objects.get(pk=job.pk).status == "cancelled"
    assert "1 job(s) of 1 workflow(s) cancelled" in messages_of(response)


@pytest.mark.parametrize("where", ["admin:index", "app_index"])
def test_the_dashboard_is_listed_on_the_admin_index_the_app_index_and_the_sidebar(
    admin_client, where
):
    url = (
        reverse("admin:app_list", args=["django_workqueue"])
        if where == "app_index"
        else reverse("admin:index")
    )
    dashboard = reverse("admin:django_workqueue_dashboard")

    html = admin_client.get(url).content.decode()
    on_a_model_page = admin_client.get(reverse("admin:django_workqueue_job_changelist"))

    assert f'<a href="{dashboard}"' in html
    sidebar = on_a_model_page.content.decode().split('id="nav-sidebar"', 1)[1]
    assert f'<a href="{dashboard}"' in sidebar


def test_the_dashboard_is_not_listed_for_a_user_who_may_not_view_jobs(client):
    client.force_login(user_with("view_schedule", username="scheduler", is_staff=True))

    html = client.get(reverse("admin:index")).content.decode()

    assert reverse("admin:django_workqueue_dashboard") not in html


def test_every_page_calls_the_app_workqueue(admin_client):
    for url in (
        reverse("admin:index"),
        reverse("admin:app_list", args=["django_workqueue"]),
        reverse("admin:django_workqueue_dashboard"),
        reverse("admin:django_workqueue_queue_changelist"),
        reverse("admin:django_workqueue_job_changelist"),
    ):
        html = admin_client.get(url).content.decode()
        assert "Workqueue" in html, url
        assert "Work queue" not in html and "WORK QUEUE" not in html, url
