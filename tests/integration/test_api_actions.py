"""The operator's actions through the API: each calls ``django_workqueue.operations``, answers
with what it did, and is audited with source "api" — redrive by filter with a dry run."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_workqueue.models import AuditRecord, Job
from django_workqueue.states import Status
from tests.support.api import API, client_as
from tests.support.factories import JobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


def post(path: str, body=None):
    return client_as("operator").post(f"{API}{path}", body, format="json")


def status_of(job: Job) -> str:
    job.refresh_from_db()
    return job.status


def test_cancel_ends_a_waiting_job_and_asks_a_running_one_to_stop():
    waiting, running = JobFactory(), JobFactory(running=True)

    first = post(f"jobs/{waiting.pk}/cancel/")
    second = post(f"jobs/{running.pk}/cancel/")

    assert first.json() == {
        "action": "cancelled",
        "count": 1,
        "message": f"job {waiting.pk} cancelled",
    }
    assert second.json()["action"] == "cancel_requested"
    assert status_of(waiting) == Status.CANCELLED
    running.refresh_from_db()
    assert running.cancel_requested_at is not None
    records = AuditRecord.objects.order_by("id").values_list("action", "target", "changed", "actor")
    assert list(records) == [
        ("cancel", {"ids": [waiting.pk]}, 1, "operator"),
        ("cancel", {"ids": [running.pk]}, 1, "operator"),
    ]


def test_an_action_that_changes_nothing_says_so_and_is_audited_as_such():
    finished = JobFactory(status=Status.SUCCEEDED, finished_at=timezone.now())

    response = post(f"jobs/{finished.pk}/cancel/")

    assert response.status_code == 200
    assert response.json()["action"] == "unchanged"
    assert "already finished" in response.json()["message"]
    assert AuditRecord.objects.get().changed == 0


def test_retry_redrives_a_failed_job():
    job = JobFactory(failed=True)

    response = post(f"jobs/{job.pk}/retry/")

    assert response.json()["action"] == "retried"
    assert status_of(job) == Status.READY
    assert len(Job.objects.get(pk=job.pk).errors) == 3  # the history is kept


def test_hold_and_release():
    job = JobFactory()

    assert post(f"jobs/{job.pk}/hold/").json()["action"] == "held"
    assert status_of(job) == Status.HELD
    assert post(f"jobs/{job.pk}/release/").json()["action"] == "released"
    assert status_of(job) == Status.READY
    actions = list(AuditRecord.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["hold", "release"]


def failed_jobs():
    old = JobFactory(failed=True, queue="mail", task_name="testproject.testapp.tasks.send_mail")
    Job.objects.filter(pk=old.pk).update(enqueued_at=timezone.now() - dt.timedelta(days=3))
    mail = JobFactory(failed=True, queue="mail", task_name="testproject.testapp.tasks.send_mail")
    default = JobFactory(failed=True)
    ready = JobFactory(queue="mail")
    return old, mail, default, ready


def test_a_dry_run_counts_what_a_redrive_would_move_and_changes_nothing():
    old, mail, _, _ = failed_jobs()

    response = post("jobs/redrive/", {"queue": ["mail"], "dry_run": True})

    assert response.json() == {"dry_run": True, "matched": 2, "ids": [old.pk, mail.pk]}
    assert Job.objects.filter(status=Status.FAILED).count() == 3
    assert not AuditRecord.objects.exists()


def test_redrive_moves_the_failed_jobs_of_its_filter_only():
    old, mail, default, ready = failed_jobs()
    two_days_ago = (timezone.now() - dt.timedelta(days=2)).isoformat()

    response = post("jobs/redrive/", {"queue": ["mail"], "created_after": two_days_ago})

    assert response.json()["action"] == "redriven"
    assert response.json()["count"] == 1
    assert [status_of(job) for job in (old, mail, default, ready)] == [
        Status.FAILED, Status.READY, Status.FAILED, Status.READY,
    ]  # fmt: skip
    record = AuditRecord.objects.get()
    assert record.target == {"filter": {"queue": ["mail"], "created_after": two_days_ago}}
    assert (record.action, record.changed, record.source) == ("redrive", 1, "api")


def test_redrive_of_everything_needs_all_true_and_takes_an_attempt_budget():
    _, _, default, _ = failed_jobs()

    refused = post("jobs/redrive/", {})
    done = post("jobs/redrive/", {"all": True, "attempts": 5})

    assert refused.status_code == 400
    assert "all: true" in refused.json()["all"]
    assert done.json()["count"] == 3
    redriven = Job.objects.get(pk=default.pk)
    assert (redriven.max_attempts, redriven.attempts_charged) == (5, 0)  # the budget asked for
    assert AuditRecord.objects.get().target == {"filter": {}, "all": True}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"queue": "mail"}, "queue"),
        ({"workflow": 0}, "workflow"),
        ({"created_after": "soon"}, "created_after"),
        ({"attempts": 0}, "attempts"),
        ({"status": ["failed"]}, "status"),
        ({"dry_run": "maybe"}, "dry_run"),
    ],
)
def test_a_bad_redrive_body_is_a_400_naming_the_field(body, field):
    JobFactory(failed=True)

    response = post("jobs/redrive/", body)

    assert response.status_code == 400
    assert field in response.json()
    assert Job.objects.get().status == Status.FAILED
