"""Sending a signal from the surfaces: the API (``POST jobs/{id}/signal/``,
``POST workflows/{id}/signal/``) and ``manage.py workqueue signal ID NAME --payload JSON``.
Each calls ``operations.send_signal``, needs the permission ``signal_job`` and is audited (with
the signal's name; its payload, which may be private, stays out of the trail)."""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from django_workqueue import group
from django_workqueue.models import AuditRecord, Job, Signal
from django_workqueue.states import Status
from tests.support import durable_tasks
from tests.support.api import API, basic
from tests.support.commands import run_workqueue
from tests.support.database import fresh
from tests.support.users import OPERATOR, user_with

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("fast_passwords")]


def client(*codenames: str) -> APIClient:
    user = user_with(*codenames, username="signaller")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=basic(user.get_username()))
    return api


def waiting_job(drain) -> Job:
    job = durable_tasks.waits_for_approval.enqueue()
    drain()
    assert fresh(job).status == Status.WAITING
    return job


def test_the_api_sends_a_signal_to_a_job_and_audits_it(drain):
    job = waiting_job(drain)

    response = client("view_job", "signal_job").post(
        f"{API}jobs/{job.pk}/signal/", {"name": "approve", "payload": {"by": "alice"}},
        format="json",
    )  # fmt: skip

    assert response.status_code == 200, response.content
    assert response.json()["action"] == "signalled"
    assert fresh(job).status == Status.READY
    assert Signal.objects.get().payload == {"by": "alice"}
    record = AuditRecord.objects.get()
    assert (record.action, record.target, record.changed, record.source) == (
        "signal", {"ids": [job.pk], "signal": "approve"}, 1, "api",
    )  # fmt: skip
    drain()
    assert fresh(job).result[1] == {"by": "alice"}


def test_the_api_refuses_a_signal_without_the_permission(drain):
    job = waiting_job(drain)

    response = client(*OPERATOR).post(f"{API}jobs/{job.pk}/signal/", {"name": "approve"})

    assert response.status_code == 403
    assert "django_workqueue.signal_job" in response.json()["detail"]
    assert not Signal.objects.exists() and not AuditRecord.objects.exists()


def test_the_api_answers_400_for_a_bad_signal_and_404_for_a_missing_job(drain):
    job = waiting_job(drain)
    api = client("signal_job")

    assert api.post(f"{API}jobs/{job.pk}/signal/", {"name": ""}, format="json").status_code == 400
    assert api.post(f"{API}jobs/999999/signal/", {"name": "go"}, format="json").status_code == 404
    assert not Signal.objects.exists()


def test_the_api_sends_a_signal_to_a_workflow(drain):
    workflow = group(durable_tasks.waits_for_approval.s()).enqueue()
    drain()

    response = client("signal_job").post(
        f"{API}workflows/{workflow.pk}/signal/", {"name": "approve", "payload": 1}, format="json"
    )

    assert response.status_code == 200, response.content
    assert "woke 1 waiting job" in response.json()["message"]
    assert AuditRecord.objects.get().target == {"workflow": workflow.pk, "signal": "approve"}


def test_the_command_sends_a_signal_and_audits_it(drain):
    job = waiting_job(drain)

    code, out, _ = run_workqueue("signal", str(job.pk), "approve", "--payload", '{"by": "bob"}')

    assert code == 0
    assert "woke 1 waiting job" in out
    assert Signal.objects.get().payload == {"by": "bob"}
    record = AuditRecord.objects.get()
    assert (record.action, record.target, record.source) == (
        "signal", {"ids": [job.pk], "signal": "approve"}, "cli",
    )  # fmt: skip


def test_the_command_says_when_a_finished_job_refuses_the_signal(drain):
    job = durable_tasks.runs_a_step.enqueue("a", 1)
    drain()

    code, out, message = run_workqueue("signal", str(job.pk), "approve", "--json")

    assert code == 1  # nothing changed
    assert json.loads(out)["action"] == "unchanged"
    assert "nothing to change" in message


def test_the_command_refuses_a_payload_that_is_not_json(drain):
    job = waiting_job(drain)

    code, _, message = run_workqueue("signal", str(job.pk), "approve", "--payload", "{not json")

    assert code != 0 and "is not JSON" in message
    assert not Signal.objects.exists()


# --- the admin's job page ------------------------------------------------------------------------


def admin_client(*codenames: str) -> Client:
    client = Client()
    username = "admin-" + "-".join(codenames)
    client.force_login(user_with(*codenames, username=username, is_staff=True))
    return client


def test_the_job_page_offers_send_signal_named_after_what_the_job_waits_for(drain):
    job = waiting_job(drain)
    page = reverse("admin:django_workqueue_job_change", args=[job.pk])

    allowed = admin_client("view_job", "signal_job").get(page).content.decode()
    refused = admin_client("view_job").get(page).content.decode()

    assert 'name="name" required maxlength="200" value="approve"' in allowed
    assert "waiting for signal &#x27;approve&#x27; since" in allowed
    assert "Send signal" not in refused


def test_the_job_page_sends_the_signal_and_audits_it(drain):
    job = waiting_job(drain)
    url = reverse("admin:django_workqueue_job_signal", args=[job.pk])

    response = admin_client("view_job", "signal_job").post(
        url, {"name": "approve", "payload": '{"by": "carol"}'}, follow=True
    )

    assert response.status_code == 200
    assert "woke 1 waiting job" in response.content.decode()
    assert fresh(job).status == Status.READY
    assert Signal.objects.get().payload == {"by": "carol"}
    record = AuditRecord.objects.get()
    assert (record.action, record.target, record.source) == (
        "signal", {"ids": [job.pk], "signal": "approve"}, "admin",
    )  # fmt: skip
    drain()
    assert fresh(job).result[1] == {"by": "carol"}


def test_the_job_page_refuses_a_signal_without_the_permission_or_with_bad_json(drain):
    job = waiting_job(drain)
    url = reverse("admin:django_workqueue_job_signal", args=[job.pk])

    refused = admin_client("view_job").post(url, {"name": "approve"})
    bad = admin_client("view_job", "signal_job").post(
        url, {"name": "approve", "payload": "{oops"}, follow=True
    )

    assert refused.status_code == 403
    assert "the payload is not JSON" in bad.content.decode()
    assert not Signal.objects.exists() and not AuditRecord.objects.exists()
    assert fresh(job).status == Status.WAITING
