"""Review findings: places where a user without ``view_job_payload`` / ``view_job_traceback``
could still read, or probe, what disclosure hides."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from django_workqueue.models import Schedule
from tests.support.commands import run_workqueue
from tests.support.factories import JobFactory
from tests.support.users import VIEWER, user_with

pytestmark = pytest.mark.django_db

SECRET_ERROR = {
    "attempt": 1, "at": "", "type": "builtins.ValueError", "message": "bad password=hunter2",
    "traceback": "Traceback (most recent call last):\nValueError: bad password=hunter2\n",
}  # fmt: skip


run = run_workqueue


def viewer_client() -> Client:
    client = Client()
    client.force_login(user_with(*VIEWER, username="viewer", is_staff=True))
    return client


def listed_ids(client: Client, query: dict[str, str]) -> set[int]:
    response = client.get(reverse("admin:django_workqueue_job_changelist"), query)
    assert response.status_code in (200, 302, 400), response.status_code
    if response.status_code != 200:
        return set()
    return {job.pk for job in response.context["cl"].result_list}


# --- the CLI -----------------------------------------------------------------------------------


def test_cli_jobs_as_a_viewer_redacts_the_last_error_message():
    JobFactory(failed=True, errors=[SECRET_ERROR])
    user_with(*VIEWER)

    code, out, _ = run("--user", "ops", "jobs", "--json")

    assert code == 0
    assert "hunter2" not in out
    assert json.loads(out)[0]["last_error"]["type"] == "builtins.ValueError"


def test_cli_jobs_table_as_a_viewer_redacts_the_last_error_message(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # wide enough that the error column is not cut
    JobFactory(failed=True, errors=[SECRET_ERROR])
    user_with(*VIEWER)

    code, out, _ = run("--user", "ops", "jobs")

    assert code == 0
    assert "hunter2" not in out


# --- the admin's job list ------------------------------------------------------------------------


def test_a_viewer_cannot_probe_arguments_through_the_job_list_query_string():
    secret = JobFactory(kwargs={"token": "t-secret"})
    JobFactory(kwargs={"token": "other"})
    client = viewer_client()

    # A lookup on a JSON field is a yes/no oracle over the arguments: refused, or ignored.
    hits = listed_ids(client, {"kwargs__token": "t-secret"})
    assert hits != {secret.pk}
    hits = listed_ids(client, {"kwargs__token__startswith": "t-s"})
    assert hits != {secret.pk}


def test_a_viewer_cannot_probe_results_and_tracebacks_through_the_job_list_query_string():
    secret = JobFactory(failed=True, errors=[SECRET_ERROR], result={"pin": "1234"})
    JobFactory(failed=True)
    client = viewer_client()

    assert listed_ids(client, {"result__pin": "1234"}) != {secret.pk}
    assert listed_ids(client, {"errors__icontains": "hunter2"}) != {secret.pk}


def test_the_error_type_filter_matches_error_types_not_message_text():
    secret = JobFactory(failed=True, errors=[SECRET_ERROR])
    client = viewer_client()

    # ?error_type= is meant to choose a type; matching any text of the errors (messages,
    # tracebacks) lets a viewer confirm a guessed password one request at a time.
    assert listed_ids(client, {"error_type": "hunter2"}) == set()
    assert listed_ids(client, {"error_type": "builtins.ValueError"}) == {secret.pk}


# --- the admin's schedules -----------------------------------------------------------------------


def test_the_schedule_page_hides_arguments_from_a_viewer():
    schedule = Schedule.objects.create(
        name="nightly", task_name="testproject.testapp.tasks.add", cron="0 3 * * *",
        args=["s3cr3t-arg"], kwargs={"api_key": "k-s3cr3t"},
    )  # fmt: skip
    client = viewer_client()

    page = client.get(reverse("admin:django_workqueue_schedule_change", args=[schedule.pk]))

    assert page.status_code == 200
    html = page.content.decode()
    assert "s3cr3t-arg" not in html
    assert "k-s3cr3t" not in html


def test_the_schedule_list_cannot_be_probed_by_arguments():
    Schedule.objects.create(
        name="nightly", task_name="testproject.testapp.tasks.add", cron="0 3 * * *",
        kwargs={"api_key": "k-s3cr3t"},
    )  # fmt: skip
    client = viewer_client()

    response = client.get(
        reverse("admin:django_workqueue_schedule_changelist"), {"kwargs__api_key": "k-s3cr3t"}
    )
    hits = [s.pk for s in response.context["cl"].result_list] if response.status_code == 200 else []
    assert hits == [] or response.status_code != 200


# --- the admin's "enqueue a copy" --------------------------------------------------------------


def test_enqueue_a_copy_that_fails_midway_still_audits_the_copies_it_made():
    from django_workqueue.models import AuditRecord, Job

    good = JobFactory(args=[1, 2])
    bad = JobFactory(args=[1, 2, 3])  # no longer fits add(a, b): its copy is refused
    client = Client()
    client.force_login(user_with(*VIEWER, "add_job", username="op", is_staff=True))

    client.post(
        reverse("admin:django_workqueue_job_changelist"),
        {"action": "enqueue_copies", "_selected_action": [good.pk, bad.pk], "index": 0},
    )

    copies = Job.objects.exclude(pk__in=[good.pk, bad.pk]).count()
    changed = sum(AuditRecord.objects.values_list("changed", flat=True))
    assert changed == copies  # every job the action enqueued is in the audit trail


# --- the admin's schedules: every change is audited -----------------------------------------


@pytest.mark.parametrize("how", ["page", "action"])
def test_deleting_a_schedule_in_the_admin_is_audited(how):
    from django_workqueue.models import AuditRecord

    schedule = Schedule.objects.create(
        name="nightly", task_name="testproject.testapp.tasks.add", cron="0 3 * * *"
    )
    client = Client()
    client.force_login(user_with(*VIEWER, "manage_schedule", username="op", is_staff=True))

    if how == "page":
        url = reverse("admin:django_workqueue_schedule_delete", args=[schedule.pk])
        client.post(url, {"post": "yes"})
    else:
        client.post(
            reverse("admin:django_workqueue_schedule_changelist"),
            {"action": "delete_selected", "_selected_action": [schedule.pk], "post": "yes"},
        )

    assert not Schedule.objects.exists()
    record = AuditRecord.objects.get()
    assert (record.action, record.changed, record.source) == ("delete_schedule", 1, "admin")
    assert "nightly" in str(record.target)


# --- testing.drain ---------------------------------------------------------------------------


def test_drain_with_exactly_max_jobs_ready_returns_their_count():
    from django_workqueue.testing import drain
    from testproject.testapp.tasks import add

    add.enqueue(1, 2), add.enqueue(3, 4)

    # Both ran and nothing is left: that is not "jobs are still ready".
    assert drain(max_jobs=2) == 2


def test_drain_past_max_jobs_with_jobs_still_ready_says_so():
    from django_workqueue.exceptions import WorkqueueError
    from django_workqueue.testing import drain
    from testproject.testapp.tasks import add

    add.enqueue(1, 2), add.enqueue(3, 4), add.enqueue(5, 6)

    with pytest.raises(WorkqueueError, match="jobs are still ready"):
        drain(max_jobs=2)
