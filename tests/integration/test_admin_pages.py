"""Every admin page of the app renders for a superuser, with data and without; a viewer sees
no payload, no traceback and no action they may not use; GET never changes a job; the list
pages run a bounded number of queries."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_workqueue.models import (
    Dependency,
    FlowLimit,
    Job,
    Queue,
    Schedule,
    WorkerProcess,
    Workflow,
)  # fmt: skip
from tests.support.factories import JobFactory
from tests.support.users import OPERATOR, VIEWER, user_with

pytestmark = pytest.mark.django_db

LISTS = [
    "admin:django_workqueue_job_changelist",
    "admin:django_workqueue_workflow_changelist",
    "admin:django_workqueue_schedule_changelist",
    "admin:django_workqueue_queue_changelist",
    "admin:django_workqueue_workerprocess_changelist",
    "admin:django_workqueue_flowlimit_changelist",
    "admin:django_workqueue_auditrecord_changelist",
    "admin:django_workqueue_dashboard",
]


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def superuser_client() -> Client:
    return client_for(User.objects.create_superuser("root", "root@example.com", "x"))


def some_data() -> dict[str, object]:
    workflow = Workflow.objects.create(name="nightly", total=2, open=1, succeeded=1)
    first = JobFactory(workflow=workflow, status="succeeded", result={"total": 3})
    second = JobFactory(workflow=workflow, status="blocked", waiting_on=1)
    Dependency.objects.create(job=second, prerequisite=first, position=0)
    failed = JobFactory(
        failed=True, args=["secret-arg"],
        errors=[{"attempt": 1, "at": "", "type": "builtins.KeyError", "message": "missing",
                 "traceback": "Traceback: line 1 TRACE-TEXT"}],
    )  # fmt: skip
    Schedule.objects.create(
        name="hourly", task_name="testproject.testapp.tasks.add", cron="0 * * * *"
    )
    WorkerProcess.objects.create(id="w-1", host="h", pid=1, queues=["default"], concurrency=4)
    FlowLimit.objects.create(key="api", starts=[[1, 2]])
    Queue.objects.create(name="mail")
    return {"workflow": workflow, "first": first, "second": second, "failed": failed}


@pytest.mark.parametrize("name", LISTS)
def test_every_list_page_renders_for_a_superuser_empty_and_with_data(superuser_client, name):
    assert superuser_client.get(reverse(name)).status_code == 200
    some_data()
    assert superuser_client.get(reverse(name)).status_code == 200


def test_every_detail_page_renders_for_a_superuser(superuser_client):
    data = some_data()
    pages = [
        reverse("admin:django_workqueue_job_change", args=[data["failed"].pk]),
        reverse("admin:django_workqueue_job_change", args=[data["second"].pk]),
        reverse("admin:django_workqueue_workflow_change", args=[data["workflow"].pk]),
        reverse("admin:django_workqueue_schedule_change",
                args=[Schedule.objects.get().pk]),
        reverse("admin:django_workqueue_workerprocess_change", args=["w-1"]),
        reverse("admin:django_workqueue_flowlimit_change", args=["api"]),
        reverse("admin:django_workqueue_schedule_add"),
        reverse("admin:app_list", args=["django_workqueue"]),
    ]  # fmt: skip
    for url in pages:
        response = superuser_client.get(url)
        assert response.status_code == 200, url


def test_the_job_page_shows_payload_tracebacks_progress_and_links_to_a_superuser(
    superuser_client,
):
    data = some_data()
    job = data["failed"]
    Job.objects.filter(pk=job.pk).update(progress_current=3, progress_total=10,
                                         progress_message="step three")  # fmt: skip
    page = superuser_client.get(reverse("admin:django_workqueue_job_change", args=[job.pk]))
    html = page.content.decode()
    assert "secret-arg" in html
    assert "TRACE-TEXT" in html
    assert "builtins.KeyError" in html
    assert f'data-wq-job="{job.pk}"' in html and 'class="wq-progress"' in html
    assert f'class="wq-progress-message" data-wq-job="{job.pk}">step three<' in html
    assert f'class="wq-progress-count" data-wq-job="{job.pk}">3 / 10<' in html
    assert "django_workqueue/live-progress.js" not in html  # a finished job is not followed
    assert f'action="/admin/django_workqueue/job/{job.pk}/act/redrive/"' in html
    dependent = superuser_client.get(
        reverse("admin:django_workqueue_job_change", args=[data["second"].pk])
    ).content.decode()
    assert reverse("admin:django_workqueue_job_change", args=[data["first"].pk]) in dependent


def test_a_viewer_sees_no_payload_no_traceback_and_no_actions():
    data = some_data()
    viewer = client_for(user_with(*VIEWER, username="viewer", is_staff=True))
    job = data["failed"]
    html = viewer.get(reverse("admin:django_workqueue_job_change", args=[job.pk])).content.decode()
    assert "secret-arg" not in html
    assert "TRACE-TEXT" not in html
    assert "builtins.KeyError" in html  # the error's type is not secret
    assert "/act/" not in html  # no buttons
    listing = viewer.get(reverse("admin:django_workqueue_job_changelist"))
    assert listing.status_code == 200
    listed = listing.content.decode()
    for action in ("cancel_jobs", "retry_jobs", "redrive_jobs", "hold_jobs", "release_jobs",
                   "purge_jobs", "enqueue_copies"):  # fmt: skip
        assert f'value="{action}"' not in listed
    dashboard = viewer.get(reverse("admin:django_workqueue_dashboard")).content.decode()
    assert "builtins.KeyError" in dashboard
    assert "Redrive all like this" not in dashboard
    queues = viewer.get(reverse("admin:django_workqueue_queue_changelist")).content.decode()
    assert "Pause</button>" not in queues


def test_an_operator_is_offered_every_job_action():
    some_data()
    operator = client_for(user_with(*OPERATOR, "add_job", username="operator", is_staff=True))
    listed = operator.get(reverse("admin:django_workqueue_job_changelist")).content.decode()
    for action in ("cancel_jobs", "retry_jobs", "redrive_jobs", "hold_jobs", "release_jobs",
                   "purge_jobs", "enqueue_copies"):  # fmt: skip
        assert f'value="{action}"' in listed


def test_a_user_without_view_job_cannot_open_the_pages():
    some_data()
    nobody = client_for(user_with(username="nobody", is_staff=True))
    for name in ("admin:django_workqueue_job_changelist", "admin:django_workqueue_dashboard"):
        assert nobody.get(reverse(name)).status_code == 403


def test_get_never_changes_a_job(superuser_client):
    data = some_data()
    before = list(Job.objects.order_by("pk").values_list("pk", "status", "attempt"))
    job = data["failed"]
    for url in (
        reverse("admin:django_workqueue_job_act", args=[job.pk, "retry"]),
        reverse("admin:django_workqueue_job_act", args=[job.pk, "purge"]),
        reverse("admin:django_workqueue_dashboard_redrive"),
        reverse("admin:django_workqueue_queue_toggle", args=["default", "pause"]),
        reverse("admin:django_workqueue_job_changelist") + "?action=redrive_jobs",
    ):
        assert superuser_client.get(url).status_code in (200, 302, 405), url
    assert list(Job.objects.order_by("pk").values_list("pk", "status", "attempt")) == before
    assert not Queue.objects.filter(name="default").exists()


def test_jobs_cannot_be_added_changed_or_deleted_by_hand(superuser_client):
    job = JobFactory()
    base = "/admin/django_workqueue/job/"
    assert superuser_client.get(f"{base}add/").status_code == 403
    assert (
        superuser_client.post(f"{base}{job.pk}/change/", {"status": "succeeded"}).status_code == 403
    )
    assert superuser_client.post(f"{base}{job.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Job.objects.get(pk=job.pk).status == "ready"


@pytest.mark.parametrize("name", LISTS)
def test_list_pages_run_a_bounded_number_of_queries(
    superuser_client, django_assert_max_num_queries, name
):
    some_data()
    JobFactory.create_batch(120)  # more than a page
    with django_assert_max_num_queries(14):  # a page of 50 jobs: no query per row
        assert superuser_client.get(reverse(name)).status_code == 200
