"""``jobs/``: the list (filters, cursor pages), one job as its viewer may see it, unknown ids,
and enqueue through the API (tasks registered with ``api=True`` only)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_workqueue import chain
from django_workqueue.models import AuditRecord, Job, Workflow
from django_workqueue.states import Status
from testproject.testapp.tasks import api_add
from tests.support.api import API, basic, client_as
from tests.support.factories import JobFactory
from tests.support.users import VIEWER, user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

API_ADD = "testproject.testapp.tasks.api_add"
API_REPORT = "testproject.testapp.tasks.api_report"


def as_user(*codenames: str, username: str = "someone"):
    from rest_framework.test import APIClient

    user_with(*codenames, username=username)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic(username))
    return client


def ids(response) -> list[int]:
    assert response.status_code == 200, response.content
    return [row["id"] for row in response.json()["results"]]


def test_the_list_is_newest_first_and_pages_by_cursor():
    jobs = JobFactory.create_batch(5)
    client = client_as("viewer")

    first = client.get(f"{API}jobs/?limit=2")
    second = client.get(first.json()["next"])
    third = client.get(second.json()["next"])

    newest_first = [job.pk for job in reversed(jobs)]
    assert ids(first) + ids(second) + ids(third) == newest_first
    assert third.json()["next"] is None
    assert ids(client.get(second.json()["previous"])) == newest_first[:2]


def test_a_page_does_not_shift_when_new_jobs_arrive():
    JobFactory.create_batch(3)
    client = client_as("viewer")
    first = client.get(f"{API}jobs/?limit=2")

    JobFactory.create_batch(2)
    second = client.get(first.json()["next"])

    assert len(ids(second)) == 1
    assert ids(second)[0] < min(ids(first))


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=failed", {"failed"}),
        ("status=failed,held", {"failed", "held"}),
        ("status=failed&status=held", {"failed", "held"}),
        ("queue=mail", {"mail"}),
        ("task=testproject.testapp.tasks.send_mail", {"mail"}),
        ("workflow={workflow}", {"in-workflow"}),
    ],
)
def test_the_list_filters(query: str, expected: set[str]):
    workflow = Workflow.objects.create(name="wf")
    JobFactory(failed=True, unique_key="failed")
    JobFactory(status=Status.HELD, unique_key="held")
    JobFactory(queue="mail", task_name="testproject.testapp.tasks.send_mail", unique_key="mail")
    JobFactory(workflow=workflow, unique_key="in-workflow")
    JobFactory(unique_key="other")

    response = client_as("viewer").get(f"{API}jobs/?{query.format(workflow=workflow.pk)}")

    found = set(Job.objects.filter(pk__in=ids(response)).values_list("unique_key", flat=True))
    assert found == expected


def test_the_list_filters_by_creation_time():
    old = JobFactory()
    Job.objects.filter(pk=old.pk).update(enqueued_at=timezone.now() - dt.timedelta(days=2))
    new = JobFactory()
    day_ago = (timezone.now() - dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%S")
    client = client_as("viewer")

    assert ids(client.get(f"{API}jobs/?created_after={day_ago}")) == [new.pk]
    assert ids(client.get(f"{API}jobs/?created_before={day_ago}Z")) == [old.pk]


@pytest.mark.parametrize(
    ("query", "parameter", "says"),
    [
        ("status=dead", "status", "is not a job status"),
        ("workflow=x", "workflow", "workflow id"),
        ("workflow=-3", "workflow", "workflow id"),
        ("created_after=yesterday", "created_after", "ISO 8601"),
        ("created_before=2026-02-30T00:00:00", "created_before", "ISO 8601"),
        ("stauts=failed", "stauts", "unknown parameter"),
        ("cursor=cD1hYmM%3D", "cursor", "not made by this API"),
        ("cursor=bz14", "cursor", "not made by this API"),
    ],
)
def test_a_bad_filter_is_a_400_naming_it(query: str, parameter: str, says: str):
    response = client_as("viewer").get(f"{API}jobs/?{query}")

    assert response.status_code == 400
    assert says in str(response.json()[parameter])


def test_the_list_shows_no_payload_even_to_those_who_may_see_it():
    JobFactory(args=["secret"], kwargs={"token": "t"})

    row = client_as("superuser").get(f"{API}jobs/").json()["results"][0]

    assert not {"args", "kwargs", "result", "errors"} & set(row)


SECRET_ERROR = {
    "attempt": 1, "at": "2026-01-01T00:00:00Z", "type": "builtins.ValueError",
    "message": "login failed: password=hunter2",
    "traceback": "Traceback ...\nValueError: login failed: password=hunter2\n",
}  # fmt: skip


def secret_job() -> Job:
    return JobFactory(
        failed=True, args=["ada"], kwargs={"api_key": "k-1"}, errors=[SECRET_ERROR],
        progress_message="calling with token=abc",
    )  # fmt: skip


def test_a_viewer_sees_a_job_without_payload_tracebacks_or_secrets():
    job = secret_job()

    shown = client_as("viewer").get(f"{API}jobs/{job.pk}/").json()

    assert shown["payload_hidden"] is True
    assert (shown["args"], shown["kwargs"], shown["result"]) == (None, None, None)
    assert shown["errors"][0]["type"] == "builtins.ValueError"
    assert "hunter2" not in str(shown)
    assert shown["errors"][0]["traceback"] is None
    assert "abc" not in shown["progress"]["message"]


def test_an_operator_sees_the_payload_and_the_tracebacks():
    job = secret_job()

    shown = client_as("operator").get(f"{API}jobs/{job.pk}/").json()

    assert (shown["args"], shown["kwargs"]) == (["ada"], {"api_key": "k-1"})
    assert shown["errors"][0]["traceback"] == SECRET_ERROR["traceback"]
    assert shown["progress"]["message"] == "calling with token=abc"


def test_a_traceback_without_the_payload_permission_is_redacted():
    job = secret_job()

    shown = as_user(*VIEWER, "view_job_traceback").get(f"{API}jobs/{job.pk}/").json()

    assert shown["errors"][0]["traceback"].startswith("Traceback")
    assert "hunter2" not in shown["errors"][0]["traceback"]


@pytest.mark.parametrize("job_id", ["999999", "0", "abc", "9" * 30, "1.5"])
def test_an_unknown_job_is_a_404(job_id: str):
    client = client_as("superuser")

    assert client.get(f"{API}jobs/{job_id}/").status_code == 404
    for action in ("cancel", "retry", "hold", "release"):
        response = client.post(f"{API}jobs/{job_id}/{action}/")
        assert response.status_code == 404, (action, response.content)
    assert not AuditRecord.objects.exists()


def test_an_unknown_workflow_is_a_404():
    assert client_as("superuser").get(f"{API}workflows/424242/").status_code == 404


def enqueue(client, **body):
    return client.post(f"{API}jobs/", body, format="json")


def test_a_task_registered_with_api_true_is_enqueued_with_its_options():
    client = as_user("view_job", "add_job")

    response = enqueue(
        client, task=API_ADD, args=[1], kwargs={"b": 2}, queue="low", priority=7, delay=60,
        max_attempts=2,
    )  # fmt: skip

    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.task_name, job.args, job.kwargs, job.queue) == (API_ADD, [1], {"b": 2}, "low")
    assert (job.priority, job.max_attempts, job.status) == (7, 2, Status.SCHEDULED)
    record = AuditRecord.objects.get()
    assert (record.action, record.source, record.changed, record.actor) == (
        "enqueue", "api", 1, "someone",
    )  # fmt: skip
    assert record.target == {"ids": [job.pk], "task": API_ADD}


def test_a_task_taking_the_context_is_enqueued_with_the_arguments_after_it():
    response = enqueue(client_as("superuser"), task=API_REPORT, args=[7], kwargs={"period": "day"})

    assert response.status_code == 201, response.content
    assert response.json()["queue"] == "reports"


def test_a_held_unique_key_gives_its_holder_back():
    client = client_as("superuser")
    first = enqueue(client, task=API_ADD, args=[1], unique_key="k")

    again = enqueue(client, task=API_ADD, args=[2], unique_key="k")

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["duplicate"] is True


def test_a_task_without_api_true_is_refused_with_the_fix():
    response = enqueue(client_as("superuser"), task="testproject.testapp.tasks.add", args=[1, 2])

    assert response.status_code == 400
    assert "register the task with @task(api=True)" in response.json()["task"]
    assert not Job.objects.exists()


def test_an_unregistered_task_is_refused():
    response = enqueue(client_as("superuser"), task="nowhere.task")

    assert response.status_code == 400
    says = response.json()["task"]
    assert "no task the API may enqueue is registered as 'nowhere.task'" in says


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"args": [1, 2, 3]}, "too many positional arguments"),
        ({"args": []}, "missing a required argument: 'a'"),
        ({"args": [1], "kwargs": {"c": 3}}, "unexpected keyword argument 'c'"),
        ({"args": [1], "queue": "nowhere"}, "is not one of WORKQUEUE['QUEUES']"),
        ({"args": [1], "unique_key": "@mine"}, "starts with '@'"),
    ],
)
def test_arguments_or_options_that_do_not_fit_are_a_400_with_the_reason(body, says):
    response = enqueue(client_as("superuser"), task=API_ADD, **body)

    assert response.status_code == 400, response.content
    assert says in response.json()["detail"]
    assert not Job.objects.exists()
    assert not AuditRecord.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"args": "1"}, "args"),
        ({"kwargs": [1]}, "kwargs"),
        ({"priority": 101}, "priority"),
        ({"delay": -1}, "delay"),
        ({"max_attempts": 0}, "max_attempts"),
    ],
)
def test_malformed_enqueue_fields_are_a_400_naming_the_field(body, field):
    response = enqueue(client_as("superuser"), task=API_ADD, **body)

    assert response.status_code == 400
    assert field in response.json()


def test_arguments_over_the_payload_limit_are_refused(settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "MAX_PAYLOAD_BYTES": 1024}

    response = enqueue(client_as("superuser"), task=API_ADD, args=["x" * 2000])

    assert response.status_code == 400
    assert "MAX_PAYLOAD_BYTES" in response.json()["detail"]


def test_a_body_far_over_the_payload_limit_is_refused_before_it_is_parsed(settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "MAX_PAYLOAD_BYTES": 1024}

    response = enqueue(client_as("superuser"), task=API_ADD, args=["x" * 200_000])

    assert response.status_code == 413
    assert "MAX_PAYLOAD_BYTES" in response.json()["detail"]


def test_a_time_filter_with_any_offset_iso_8601_allows_works_on_every_database():
    job = JobFactory()

    far_west = client_as("viewer").get(f"{API}jobs/?created_before=2999-06-07T05:10:48-17:59")
    overflow = client_as("viewer").get(f"{API}jobs/?created_after=0001-01-01T00:00:00%2B05:00")

    assert ids(far_west) == [job.pk]
    assert overflow.status_code == 400


@pytest.mark.parametrize("path", ["jobs/", "workflows/"])
def test_a_list_page_costs_the_same_queries_however_many_rows_it_holds(path: str):
    client = client_as("viewer")
    client.get(f"{API}{path}")  # the user's permissions are read once per request

    def queries_for(rows: int) -> int:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        for _ in range(rows):  # jobs in workflows: reading a job's workflow must cost nothing
            workflow = chain(api_add.s(1)).enqueue()
            JobFactory(workflow=workflow)
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"{API}{path}").status_code == 200
        return len(captured)

    assert queries_for(2) == queries_for(40)
