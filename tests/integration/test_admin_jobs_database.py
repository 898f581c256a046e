"""The admin reads and writes the workqueue's tables on the jobs database
(``WORKQUEUE["DATABASE"]``), which need not be ``default``: no query for them goes to
``default`` (users and sessions stay there)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import connections
from django.test import Client, RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_workqueue import audit
from django_workqueue.models import Schedule

pytestmark = pytest.mark.django_db(transaction=True)


def ours(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if "django_workqueue_" in q["sql"]]


def test_the_schedule_and_audit_pages_read_the_jobs_database(jobs_alias):
    root = User.objects.create_superuser("root", "root@example.com", "x")
    client = Client()
    client.force_login(root)
    audit.record("cli:ops", "pause", {"queues": ["mail"]}, 1, "cli")
    Schedule.objects.using(jobs_alias).create(
        name="nightly", task_name="testproject.testapp.tasks.scheduled_tick", cron="0 3 * * *"
    )

    with (
        CaptureQueriesContext(connections[jobs_alias]) as on_jobs,
        CaptureQueriesContext(connections["default"]) as on_default,
    ):
        listed = client.get(reverse("admin:django_workqueue_schedule_changelist"))
        trail = client.get(reverse("admin:django_workqueue_auditrecord_changelist"))

    assert "nightly" in listed.content.decode()
    assert "pause" in trail.content.decode()
    assert ours(on_jobs)
    assert ours(on_default) == []


def test_a_schedule_saved_in_the_admin_is_written_to_the_jobs_database(jobs_alias):
    # save_model directly: the admin's own view wraps it in a transaction on default, which on
    # SQLite locks the one file both aliases reach here (separate databases do not share it).
    root = User.objects.create_superuser("root", "root@example.com", "x")
    request = RequestFactory().post("/")
    request.user = root
    schedule = Schedule(
        name="hourly", task_name="testproject.testapp.tasks.scheduled_tick", cron="0 * * * *"
    )

    with CaptureQueriesContext(connections["default"]) as on_default:
        admin.site._registry[Schedule].save_model(
            request, schedule, SimpleNamespace(changed_data=["cron"]), change=False
        )

    assert Schedule.objects.using(jobs_alias).filter(name="hourly", source="runtime").exists()
    assert ours(on_default) == []
