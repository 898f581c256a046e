"""HTTP basic credentials that a browser keeps (the API's 401 says ``WWW-Authenticate: Basic``,
so a browser asks for them once and then sends them with every request to the site) ride along
on a cross-site form's POST. The job actions take no body, so the API's JSON-only parsing does
not stop such a form: a change authenticated by HTTP basic from a foreign Origin is refused."""

from __future__ import annotations

import pytest

from django_workqueue.models import AuditRecord, Job
from django_workqueue.states import Status
from tests.support.api import API, client_as
from tests.support.factories import JobFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]


def test_a_cross_site_form_post_with_basic_credentials_changes_nothing():
    job = JobFactory()

    response = client_as("superuser").post(
        f"{API}jobs/{job.pk}/cancel/", HTTP_ORIGIN="https://evil.example",
        content_type="application/x-www-form-urlencoded",
    )  # fmt: skip

    assert response.status_code == 403
    assert Job.objects.get(pk=job.pk).status == Status.READY
    assert not AuditRecord.objects.exists()


def test_a_same_origin_or_originless_client_with_basic_credentials_may_change():
    first, second = JobFactory(), JobFactory()
    client = client_as("superuser")

    same = client.post(f"{API}jobs/{first.pk}/cancel/", HTTP_ORIGIN="http://testserver")
    script = client.post(f"{API}jobs/{second.pk}/cancel/")  # curl, a service: no Origin

    assert (same.status_code, script.status_code) == (200, 200)


def test_reads_with_basic_credentials_are_served_whatever_the_origin():
    response = client_as("superuser").get(f"{API}jobs/", HTTP_ORIGIN="https://elsewhere.example")

    assert response.status_code == 200
