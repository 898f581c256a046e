"""The attempt budgets (``budgets.py``) as every surface shows them: a redriven job reads
"attempt 1 of 5 (3 before the redrive)" on the admin job page, in the API, in ``manage.py
workqueue jobs`` / ``show`` and in ``explain`` — never the "attempt 4 of 8" that raising
``max_attempts`` showed."""

from __future__ import annotations

import json

import pytest
from django.test import Client

from django_workqueue import operations
from django_workqueue.budgets import describe_job
from django_workqueue.models import Job
from django_workqueue.states import Status
from tests.support.api import API, client_as
from tests.support.commands import run_workqueue
from tests.support.factories import JobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

SHOWN = "attempt 1 of 5 (3 before the redrive)"


@pytest.fixture
def redriven() -> Job:
    """A job of 5 attempts that failed three times (it was given 3, then redriven with 5)."""
    job = JobFactory(failed=True, attempt=3, max_attempts=3, attempts_charged=3)
    assert operations.redrive([job], attempts=5).count == 1
    job.refresh_from_db()
    assert (job.status, job.attempt, job.max_attempts) == (Status.READY, 3, 5)
    return job


def test_a_redriven_job_reads_its_fresh_budget_and_what_came_before(redriven: Job) -> None:
    assert describe_job(redriven) == SHOWN
    assert describe_job(redriven, short=True) == "1/5 (+3)"


def test_the_admin_job_page_shows_the_attempt_of_its_budget(
    redriven: Job, admin_client: Client
) -> None:
    page = admin_client.get(f"/admin/django_workqueue/job/{redriven.pk}/change/")
    assert page.status_code == 200
    assert SHOWN in page.content.decode()
    listing = admin_client.get("/admin/django_workqueue/job/")
    assert "1/5 (+3)" in listing.content.decode()


def test_the_api_shows_the_attempt_and_both_budgets(redriven: Job) -> None:
    client = client_as("viewer")
    one = client.get(f"{API}jobs/{redriven.pk}/").json()
    assert one["attempt_summary"] == SHOWN
    assert (one["attempt"], one["max_attempts"], one["attempts_charged"]) == (3, 5, 0)
    assert (one["crashes_charged"], one["redriven_attempts"]) == (0, 3)
    (listed,) = client.get(f"{API}jobs/").json()["results"]
    assert listed["attempt_summary"] == SHOWN


def test_the_cli_shows_the_attempt_of_its_budget(redriven: Job) -> None:
    code, out, _ = run_workqueue("show", str(redriven.pk))
    assert code == 0 and SHOWN in out
    row = json.loads(run_workqueue("show", str(redriven.pk), "--json")[1])
    assert (row["attempt_summary"], row["attempts_charged"], row["redriven_attempts"]) == (
        SHOWN, 0, 3,
    )  # fmt: skip
    code, out, _ = run_workqueue("jobs", "--wide")
    assert code == 0 and "1/5 (+3)" in out


def test_explain_says_which_attempt_of_its_budget_ended_the_job(redriven: Job) -> None:
    Job.objects.filter(pk=redriven.pk).update(status=Status.FAILED, attempt=8, attempts_charged=5)
    redriven.refresh_from_db()
    summary = operations.explain(redriven).summary
    assert "after attempt 5 of 5 (3 before the redrive)" in summary
