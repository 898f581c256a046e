"""Ids and texts no query can take — an id beyond 64 bits, a NUL, a lone surrogate — are a
bad request on every surface, never a server error, on SQLite and PostgreSQL: the admin's
lists treat them as Django treats an invalid lookup, the API answers 400 naming the parameter,
the command exits 2."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

from django_workqueue.models import Job
from tests.support.api import API, client_as
from tests.support.commands import run_workqueue
from tests.support.factories import JobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

HUGE = str(10**30)
ADMIN = "/admin/django_workqueue/"


@pytest.fixture
def admin_client(client):
    JobFactory(failed=True)
    client.force_login(User.objects.create_superuser("root", password="x"))
    return client


@pytest.mark.parametrize(
    "query",
    [
        "job/?queue=%00", "job/?task=%00", "job/?status=%00", "job/?status__exact=%00",
        "job/?error_type=%00", "job/?q=%00", "job/?queue=mail%ED%A0%80%00",
        "job/?workflow=" + HUGE, "job/?id=" + HUGE, "job/?workflow__id__exact=" + HUGE,
        "job/?q=" + HUGE, "workflow/?name=%00", "workflow/?status__exact=%00",
        "workflow/?q=%00", "schedule/?q=%00", "auditrecord/?q=%00", "workerprocess/?q=%00",
    ],
)  # fmt: skip
def test_an_admin_list_treats_a_value_no_query_can_take_as_an_invalid_lookup(admin_client, query):
    answer = admin_client.get(ADMIN + query)

    # Django's answer to an invalid lookup: the list again, without filters.
    assert answer.status_code == 302
    assert answer["Location"] == ADMIN + query.split("?")[0] + "?e=1"


def test_an_admin_list_still_filters_on_good_values(admin_client):
    answer = admin_client.get(ADMIN + "job/?status__exact=failed&queue=default")

    assert answer.status_code == 200
    assert list(answer.context["cl"].result_list) == list(Job.objects.filter(status="failed"))


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("queue=%00", "queue"), ("task=%00", "task"), ("status=%00", "status"),
        ("workflow=" + HUGE, "workflow"), ("workflow=-1", "workflow"),
    ],
)  # fmt: skip
def test_the_api_list_answers_400_naming_the_filter(query, parameter):
    answer = client_as("viewer").get(f"{API}jobs/?{query}")

    assert answer.status_code == 400
    assert parameter in answer.json()


@pytest.mark.parametrize(
    ("body", "parameter"),
    [
        (f'{{"workflow": {HUGE}}}', "workflow"),
        ('{"queue": ["\\u0000"]}', "queue"),
        ('{"task": ["mail\\ud800"]}', "task"),
    ],
)
def test_a_redrive_body_with_a_value_no_query_can_take_is_a_400(body, parameter):
    answer = client_as("operator").post(
        f"{API}jobs/redrive/", body, content_type="application/json"
    )

    assert answer.status_code == 400, answer.content
    assert parameter in answer.json()
    assert Job.objects.filter(status="failed").count() == Job.objects.count()


def test_a_redrive_with_a_good_workflow_id_still_selects_by_it():
    JobFactory(failed=True)

    answer = client_as("operator").post(
        f"{API}jobs/redrive/", {"workflow": 2**63 - 1, "dry_run": True}, format="json"
    )

    assert answer.status_code == 200 and answer.json()["matched"] == 0


@pytest.mark.parametrize(
    "arguments",
    [["cancel", HUGE], ["show", HUGE], ["cancel", "--queue", "", "--yes"]],
)
def test_the_command_refuses_an_id_or_name_no_query_can_take(arguments):
    waiting = JobFactory()

    _, _, error = run_workqueue(*arguments)

    # argparse's refusal: exit status 2 from the command line, CommandError in call_command
    assert error.startswith("Error: argument")
    assert "is not a job id: give a whole number" in error or "is not a name" in error
    assert Job.objects.get(pk=waiting.pk).status == waiting.status
