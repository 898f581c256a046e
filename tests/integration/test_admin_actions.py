"""The job list's actions and the job page's buttons: each changes the jobs through
``operations``, says how many it changed, writes an audit record, and changes nothing for a
user without its permission. POSTs only, CSRF-protected."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_workqueue.models import AuditRecord, Dependency, Job, Workflow
from django_workqueue.states import Status
from tests.support.factories import JobFactory
from tests.support.users import VIEWER, user_with

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/django_workqueue/job/"


def client_for(user: User, **options: object) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def act(client: Client, action: str, jobs: list[Job]) -> str:
    response = client.post(
        CHANGELIST,
        {"action": action, "_selected_action": [job.pk for job in jobs], "index": 0},
        follow=True,
    )
    assert response.status_code == 200
    return " ".join(str(message) for message in response.context["messages"])


def statuses(jobs: list[Job]) -> list[str]:
    return [Job.objects.get(pk=job.pk).status for job in jobs]


# action, permission codename, (factory traits of the jobs), expected statuses after, message
CASES = [
    ("cancel_jobs", "cancel_job", [{}, {}], ["cancelled", "cancelled"], "2 job(s) cancelled"),
    ("retry_jobs", "retry_job", [{"failed": True}, {"status": "scheduled"}], ["ready", "ready"],
     "2 job(s) retried"),
    ("redrive_jobs", "retry_job", [{"failed": True}, {"failed": True}], ["ready", "ready"],
     "2 job(s) redriven"),
    ("hold_jobs", "hold_job", [{}, {"status": "scheduled"}], ["held", "held"], "2 job(s) held"),
    ("release_jobs", "hold_job", [{"status": "held"}, {"status": "held"}], ["ready", "ready"],
     "2 job(s) released"),
]  # fmt: skip


@pytest.mark.parametrize(("action", "codename", "traits", "after", "message"), CASES)
def test_each_action_changes_the_jobs_reports_the_count_and_is_audited(
    action, codename, traits, after, message
):
    jobs = [JobFactory(**trait) for trait in traits]
    bystander = JobFactory(**traits[0])
    client = client_for(user_with("view_job", codename, username="op", is_staff=True))

    said = act(client, action, jobs)

    assert statuses(jobs) == after
    assert message in said
    assert Job.objects.get(pk=bystander.pk).status == bystander.status
    record = AuditRecord.objects.get()
    assert (record.actor, record.changed, record.source) == ("op", 2, "admin")
    assert record.target == {"ids": [job.pk for job in jobs]}


@pytest.mark.parametrize(("action", "codename", "traits", "after", "message"), CASES)
def test_each_action_changes_nothing_without_its_permission(
    action, codename, traits, after, message
):
    jobs = [JobFactory(**trait) for trait in traits]
    before = statuses(jobs)
    client = client_for(user_with(*VIEWER, username="viewer", is_staff=True))

    act(client, action, jobs)

    assert statuses(jobs) == before
    assert not AuditRecord.objects.exists()


def test_purge_deletes_finished_jobs_outside_workflows_only():
    done = JobFactory(status="succeeded")
    waiting = JobFactory()
    workflow = Workflow.objects.create(total=1, succeeded=1, status="succeeded")
    in_workflow = JobFactory(status="succeeded", workflow=workflow)
    prerequisite = JobFactory(status="succeeded")
    Dependency.objects.create(job=waiting, prerequisite=prerequisite, position=0)
    client = client_for(user_with("view_job", "purge_job", username="op", is_staff=True))

    said = act(client, "purge_jobs", [done, waiting, in_workflow, prerequisite])

    assert "1 job(s) deleted" in said
    assert not Job.objects.filter(pk=done.pk).exists()
    assert Job.objects.filter(pk__in=[waiting.pk, in_workflow.pk, prerequisite.pk]).count() == 3
    assert AuditRecord.objects.get().action == "purge"


def test_purge_needs_its_permission():
    done = JobFactory(status="succeeded")
    client = client_for(user_with("view_job", "retry_job", username="op", is_staff=True))
    act(client, "purge_jobs", [done])
    assert Job.objects.filter(pk=done.pk).exists()


def test_enqueue_a_copy_enqueues_the_same_call_and_is_audited():
    original = JobFactory(status="succeeded", args=[4, 5], queue="mail", priority=3)
    client = client_for(user_with("view_job", "add_job", username="op", is_staff=True))

    said = act(client, "enqueue_copies", [original])

    copy = Job.objects.exclude(pk=original.pk).get()
    assert (copy.task_name, copy.args, copy.queue, copy.priority, copy.status) == (
        original.task_name, [4, 5], "mail", 3, "ready",
    )  # fmt: skip
    assert "1 job(s) enqueued as copies" in said
    assert AuditRecord.objects.get().action == "enqueue_copy"


def test_enqueue_a_copy_needs_the_permission_to_add_jobs():
    original = JobFactory(status="succeeded")  # retrying is not enqueueing any task anew
    client = client_for(user_with("view_job", "retry_job", username="op", is_staff=True))
    act(client, "enqueue_copies", [original])
    assert Job.objects.count() == 1


def test_select_all_acts_on_the_filtered_list_and_records_the_filter():
    mail = [JobFactory(queue="mail") for _ in range(3)]
    other = JobFactory(queue="default")
    client = client_for(user_with("view_job", "cancel_job", username="op", is_staff=True))
    response = client.post(
        CHANGELIST + "?queue=mail",
        {"action": "cancel_jobs", "_selected_action": [mail[0].pk], "select_across": 1,
         "index": 0},
        follow=True,
    )  # fmt: skip
    assert response.status_code == 200
    assert statuses(mail) == ["cancelled"] * 3
    assert Job.objects.get(pk=other.pk).status == "ready"
    assert AuditRecord.objects.get().target == {"filter": {"queue": ["mail"]}}


def test_the_job_page_buttons_act_on_one_job():
    job = JobFactory(failed=True)
    client = client_for(user_with("view_job", "retry_job", username="op", is_staff=True))
    url = reverse("admin:django_workqueue_job_act", args=[job.pk, "redrive"])

    response = client.post(url, follow=True)

    assert response.status_code == 200
    assert Job.objects.get(pk=job.pk).status == "ready"
    assert "1 job(s) redriven" in " ".join(str(m) for m in response.context["messages"])
    record = AuditRecord.objects.get()
    assert (record.action, record.target) == ("redrive", {"ids": [job.pk]})


@pytest.mark.parametrize(("status", "button", "label"), [
    ("failed", "redrive", "Redrive"), ("scheduled", "retry", "Retry now"),
])  # fmt: skip
def test_the_job_page_offers_the_button_that_does_what_it_says(status, button, label):
    job = JobFactory(failed=True) if status == "failed" else JobFactory(status=status)
    client = client_for(user_with("view_job", "retry_job", username="op", is_staff=True))

    page = client.get(reverse("admin:django_workqueue_job_change", args=[job.pk])).content.decode()

    action = reverse("admin:django_workqueue_job_act", args=[job.pk, button])
    assert f'action="{action}"' in page
    assert f">{label}</button>" in page
    other = "retry" if button == "redrive" else "redrive"
    assert reverse("admin:django_workqueue_job_act", args=[job.pk, other]) not in page


def test_the_job_page_buttons_are_refused_without_the_permission():
    job = JobFactory()
    client = client_for(user_with(*VIEWER, username="viewer", is_staff=True))
    url = reverse("admin:django_workqueue_job_act", args=[job.pk, "cancel"])
    assert client.post(url).status_code == 403
    assert Job.objects.get(pk=job.pk).status == "ready"
    assert not AuditRecord.objects.exists()


def test_actions_and_buttons_need_the_csrf_token():
    job = JobFactory()
    superuser = User.objects.create_superuser("root", "r@example.com", "x")
    client = client_for(superuser, enforce_csrf_checks=True)
    button = reverse("admin:django_workqueue_job_act", args=[job.pk, "cancel"])
    assert client.post(button).status_code == 403
    listed = client.post(
        CHANGELIST, {"action": "cancel_jobs", "_selected_action": [job.pk], "index": 0}
    )
    assert listed.status_code == 403
    assert Job.objects.get(pk=job.pk).status == "ready"
    # With the token the page's form carries, the same POST works.
    page = client.get(reverse("admin:django_workqueue_job_change", args=[job.pk]))
    token = page.cookies["csrftoken"].value
    done = client.post(button, {"csrfmiddlewaretoken": token})
    assert done.status_code == 302
    assert Job.objects.get(pk=job.pk).status == Status.CANCELLED
