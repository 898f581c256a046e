"""Sending a signal from the admin job page in a real browser: the operator sees what a waiting
job waits for, sends ``approve`` with a JSON payload, and watches the job finish live (the
websocket pushes waiting -> ready -> running -> succeeded). The screenshot goes in the
long-running guide (``make screenshots``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_workqueue.models import Job
from tests.browser.conftest import _daphne, screenshot
from tests.browser.test_operator_journey import log_in, status_of
from tests.support.durable_tasks import waits_for_approval
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

TASKS = {"WORKQUEUE_TASK_MODULES": "tests.support.durable_tasks"}


@pytest.fixture
def live_url_with_tasks(server_env, tmp_path: Path):
    """The live server, importing the durable tasks as the workers do (TASK_MODULES)."""
    yield from _daphne(
        lambda **extra: server_env(**extra, **TASKS), tmp_path, "testproject.asgi.application"
    )


def test_a_signal_sent_from_the_job_page_finishes_the_job_live(
    page, live_url_with_tasks, start_worker, tmp_path: Path
):
    live_url = live_url_with_tasks
    log_in(page, live_url)
    job = waits_for_approval.enqueue()
    start_worker("--concurrency", "1", env=TASKS)
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "waiting", timeout=30,
               message="the job to wait for its signal")  # fmt: skip

    page.goto(f"{live_url}/admin/django_workqueue/job/{job.pk}/change/")
    assert status_of(page, job.pk) == "waiting"
    assert page.input_value("#wq-signal-name") == "approve"  # what it waits for
    explained = page.inner_text("#wq-explain")
    assert "waiting for signal 'approve'" in explained
    assert "not be registered" not in explained  # the server knows the task, as the workers do
    page.fill("#wq-signal-payload", '{"by": "alice"}')
    screenshot(page, "job-page-send-signal.png", tmp_path, full_page=True)
    page.click("button.wq-button-signal")

    wait_until(lambda: status_of(page, job.pk) == "succeeded", timeout=30,
               message="the page to show the job succeeded")  # fmt: skip
    job.refresh_from_db()
    assert job.status == "succeeded"
    assert job.result[1] == {"by": "alice"}
    assert "signal 'approve' sent to job" in page.inner_text(".messagelist").lower()
