"""The live progress demo page and the script it shares with the admin's job page: the markup
``live-progress.js`` looks for, and the route the script opens (SQLite and PostgreSQL)."""

from __future__ import annotations

import re

import pytest
from django.contrib.staticfiles import finders
from django.test import Client

from django_workqueue.models import Job
from testproject.demo.tasks import crunch_numbers
from tests.support.users import VIEWER, user_with

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def client() -> Client:
    client = Client()
    client.force_login(user_with(*VIEWER))
    return client


def test_the_button_enqueues_a_long_job_and_opens_its_live_page(client: Client) -> None:
    page = client.get("/demo/progress/")
    assert page.status_code == 200 and b'<form method="post"' in page.content
    response = client.post("/demo/progress/")
    job = Job.objects.get()
    assert (job.task_name, job.status, job.kwargs) == (
        crunch_numbers.name, "ready", {"seconds": 10.0, "steps": 20},
    )  # fmt: skip
    assert response.status_code == 302 and response["Location"] == f"/demo/progress/{job.pk}/"


def test_the_live_page_carries_the_markup_the_script_follows(client: Client) -> None:
    job = crunch_numbers.enqueue(seconds=1, steps=2)
    html = client.get(f"/demo/progress/{job.pk}/").content.decode()
    assert re.search(rf'<progress class="wq-progress" data-wq-job="{job.pk}"', html)
    assert f'class="wq-progress-message" data-wq-job="{job.pk}"' in html
    assert 'src="/static/django_workqueue/live-progress.js"' in html


def test_the_pages_need_a_login() -> None:
    response = Client().get("/demo/progress/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_the_script_ships_with_the_package_and_opens_the_job_route() -> None:
    path = finders.find("django_workqueue/live-progress.js")
    assert path is not None
    with open(path, encoding="utf-8") as script:
        source = script.read()
    assert '"/ws/workqueue/"' in source and '"jobs/"' in source
    assert "progress.wq-progress" in source and ".wq-progress-message" in source
