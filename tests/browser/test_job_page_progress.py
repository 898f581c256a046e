"""The admin job page in a real browser, with and without a websocket route, for a running job
and a finished one: it opens a websocket only where the ASGI application routes one and the job
is unfinished, polls where there is none, and a finished job's page shows no motion."""

from __future__ import annotations

import pytest

from django_workqueue.models import Job
from testproject.testapp.tasks import always_fails, slow_progress
from tests.browser.test_operator_journey import log_in, status_of, watch_advance
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def open_job_page(page, live_url: str, job_id: int) -> dict[str, list[str]]:
    """Open the job page; return the websockets it opens and the progress polls it sends,
    as they happen."""
    seen: dict[str, list[str]] = {"websockets": [], "polls": []}
    page.on("websocket", lambda socket: seen["websockets"].append(socket.url))
    page.on(
        "request",
        lambda request: seen["polls"].append(request.url) if "/progress/" in request.url else None,
    )
    page.goto(f"{live_url}/admin/django_workqueue/job/{job_id}/change/")
    return seen


def assert_still(page, job: Job) -> None:
    """No ``<progress>`` without a value (the animated 'busy' bar) on a finished job's page."""
    busy = page.locator("progress.wq-progress:not([value])")
    assert busy.count() == 0, f"job {job.pk} ({job.status}) shows a busy bar"


def test_with_a_websocket_route_a_running_job_is_followed_live(page, live_url, start_worker):
    log_in(page, live_url)
    job = slow_progress.enqueue(12, step_seconds=0.4)
    start_worker("--concurrency", "1")
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "running", timeout=30,
               message="the job to start")  # fmt: skip

    seen = open_job_page(page, live_url, job.pk)
    watch_advance(page.locator(f"progress.wq-progress[data-wq-job='{job.pk}']"), count=2)
    wait_until(lambda: status_of(page, job.pk) == "succeeded", timeout=30, message="succeeded")

    assert seen["websockets"] == [f"{live_url.replace('http', 'ws')}/ws/workqueue/jobs/{job.pk}/"]
    assert seen["polls"] == []
    assert_still(page, Job.objects.get(pk=job.pk))


def test_without_a_websocket_route_a_running_job_is_polled(
    page, live_url_without_websockets, start_worker
):
    live_url = live_url_without_websockets
    log_in(page, live_url)
    job = slow_progress.enqueue(12, step_seconds=0.5)
    start_worker("--concurrency", "1")
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "running", timeout=30,
               message="the job to start")  # fmt: skip

    seen = open_job_page(page, live_url, job.pk)
    wait_until(lambda: status_of(page, job.pk) == "succeeded", timeout=30, message="succeeded")

    assert seen["websockets"] == []
    assert len(seen["polls"]) >= 1
    bar = page.locator(f"progress.wq-progress[data-wq-job='{job.pk}']")
    assert (bar.get_attribute("max"), bar.get_attribute("value")) == ("12", "12")


@pytest.mark.parametrize("live", ["live_url", "live_url_without_websockets"])
def test_a_finished_job_shows_no_motion_and_opens_nothing(page, request, live, start_worker):
    live_url = request.getfixturevalue(live)
    log_in(page, live_url)
    job = always_fails.enqueue()
    start_worker("--concurrency", "1")
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "failed", timeout=30,
               message="the job to be dead-lettered")  # fmt: skip

    seen = open_job_page(page, live_url, job.pk)
    page.wait_for_load_state("networkidle")

    assert status_of(page, job.pk) == "failed"
    assert page.locator("progress.wq-progress").count() == 0
    assert seen == {"websockets": [], "polls": []}
