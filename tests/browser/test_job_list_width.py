"""The job list fits a 1400-pixel window beside the admin's sidebar and the filters: no column
is pushed off-screen, however long the task names."""

from __future__ import annotations

import pytest

from testproject.testapp.tasks import always_fails, send_mail
from tests.browser.test_operator_journey import log_in
from tests.support.factories import JobFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_job_list_fits_1400_pixels(chromium, live_url, tmp_path):
    page = chromium.new_page(viewport={"width": 1400, "height": 900})
    log_in(page, live_url)
    for name in (always_fails.name, send_mail.name, "billing.reconciliation.tasks.rebuild_ledger"):
        JobFactory(task_name=name, failed=True)
    JobFactory(task_name=send_mail.name, running=True)

    page.goto(f"{live_url}/admin/django_workqueue/job/")

    overflow = page.evaluate(
        """() => {
            const results = document.querySelector('#changelist .results');
            const table = document.querySelector('#result_list');
            return {scroll: results.scrollWidth - results.clientWidth,
                    right: table.getBoundingClientRect().right - window.innerWidth};
        }"""
    )
    widths = page.evaluate(
        "() => [...document.querySelectorAll('#result_list thead th')]"
        ".map(th => th.className + ':' + Math.round(th.getBoundingClientRect().width))"
    )
    page.screenshot(path=str(tmp_path / "job-list-1400.png"), full_page=True)
    assert overflow["scroll"] <= 0 and overflow["right"] <= 0, (overflow, " ".join(widths))
