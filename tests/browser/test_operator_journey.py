"""An operator's session in a real browser against a real server and a real worker: log in,
read the dashboard, cancel a job, redrive a failed one, look at a workflow's graph, and watch
progress bars advance, live, while the worker runs the job. The README's pictures come from
here (``make screenshots``)."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User

from django_workqueue import chain, group
from django_workqueue.models import AuditRecord, Job
from django_workqueue.states import TERMINAL
from testproject.testapp.tasks import add, always_fails, double, echo, slow_progress, total
from tests.browser.conftest import PASSWORD, screenshot
from tests.support.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def log_in(page, live_url: str) -> None:
    User.objects.create_superuser(username="operator", password=PASSWORD)
    page.goto(f"{live_url}/admin/login/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit], button[type=submit]")
    page.wait_for_url(re.compile(r"/admin/$"))


def run_action(page, live_url: str, action: str, job: Job) -> str:
    """Select ``job`` in the job list, run the admin action ``action``; return the message."""
    page.goto(f"{live_url}/admin/django_workqueue/job/?q={job.pk}")
    page.check(f"input[name=_selected_action][value='{job.pk}']")
    page.select_option("select[name=action]", action)
    page.click("button[name=index]")
    return page.inner_text("ul.messagelist")


def watch_advance(bar, count: int = 3) -> list[float]:
    """Wait until the progress bar has shown ``count`` different values; return them."""
    seen: list[float] = []

    def advanced() -> bool:
        value = float(bar.get_attribute("value") or 0)
        if not seen or value != seen[-1]:
            seen.append(value)
        return len(seen) >= count and seen[-1] > seen[0]

    wait_until(advanced, timeout=30, interval=0.05, message="the progress bar to advance")
    return seen


def all_finished() -> bool:
    return not Job.objects.exclude(status__in=TERMINAL).exists()


def test_an_operator_cancels_redrives_and_watches_progress(page, live_url, start_worker, tmp_path):
    worker = start_worker("--concurrency", "4", "--queues", "default")
    add.enqueue_many([((n, n), {}) for n in range(40)])
    for _ in range(3):
        always_fails.enqueue()
    workflow = chain(add.s(1, 2), group(double.s(), double.s(), echo.s()), total.s()).enqueue()
    worker.wait_started()
    wait_until(all_finished, timeout=60, message="the first jobs to finish")
    failed = add.enqueue(20, 22)
    Job.objects.filter(pk=failed.pk).update(  # as if dead-lettered by a flaky upstream
        status="failed", attempt=3,
        errors=[{"attempt": 3, "at": "", "type": "builtins.ConnectionError",
                 "message": "upstream unavailable", "traceback": None}],
    )  # fmt: skip
    waiting = add.using(delay=3600).enqueue(1, 2)
    log_in(page, live_url)

    page.goto(f"{live_url}/admin/django_workqueue/dashboard/")
    assert page.locator("svg").count() >= 1
    assert "always_fails" in page.inner_text("body") or "ValueError" in page.inner_text("body")
    screenshot(page, "dashboard.png", tmp_path, full_page=True)

    assert "1" in run_action(page, live_url, "cancel_jobs", waiting)
    assert Job.objects.get(pk=waiting.pk).status == "cancelled"
    assert "1" in run_action(page, live_url, "redrive_jobs", failed)
    wait_until(lambda: Job.objects.get(pk=failed.pk).status == "succeeded", timeout=30)
    assert set(AuditRecord.objects.values_list("action", "source")) >= {
        ("cancel", "admin"), ("redrive", "admin"),
    }  # fmt: skip

    page.goto(f"{live_url}/admin/django_workqueue/workflow/{workflow.pk}/change/")
    graph = page.locator("svg.wq-graph")
    assert graph.locator("a").count() == 5  # one linked node per job
    screenshot(graph, "workflow-graph.png", tmp_path)

    job = slow_progress.enqueue(16, step_seconds=0.5)
    page.goto(f"{live_url}/admin/django_workqueue/job/{job.pk}/change/")
    seen = watch_advance(page.locator(f"progress.wq-progress[data-wq-job='{job.pk}']"))
    assert seen == sorted(seen)
    status = page.locator(f".wq-progress-status[data-wq-job='{job.pk}']")
    wait_until(lambda: status.inner_text() == "running", timeout=10, message="status running")
    assert re.fullmatch(r"\d+ / 16", page.inner_text(f".wq-progress-count[data-wq-job='{job.pk}']"))

    page.goto(f"{live_url}/demo/progress/{job.pk}/")
    watch_advance(page.locator(f"progress.wq-progress[data-wq-job='{job.pk}']"), count=2)
    screenshot(
        page, "live-progress.png", tmp_path, clip={"x": 0, "y": 0, "width": 1280, "height": 320}
    )
    wait_until(lambda: status_of(page, job.pk) == "succeeded", timeout=30, message="succeeded")
    assert Job.objects.get(pk=job.pk).status == "succeeded"


def status_of(page, job_id: int) -> str:
    return page.inner_text(f".wq-progress-status[data-wq-job='{job_id}']")
