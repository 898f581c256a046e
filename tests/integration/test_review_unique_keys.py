"""A key that ``@task(unique_on=...)`` derives is made of the call's arguments
(``@args:{"customer_id":"cust-SECRET"}``): a user without ``view_job_payload`` must not read
them there either, on any surface."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.support.api import API, basic
from tests.support.tasks import sync_customer
from tests.support.users import OPERATOR, VIEWER, user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

SECRET = "cust-SECRET-42"


def job():
    enqueued = sync_customer.enqueue(SECRET)
    assert SECRET in enqueued.unique_key  # what the rest of these tests hide
    return enqueued


def api_detail(codenames, job_id):
    from rest_framework.test import APIClient

    user_with(*codenames, username="u")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic("u"))
    response = client.get(f"{API}jobs/{job_id}/")
    assert response.status_code == 200, response.content
    return response.json()


def test_the_api_hides_a_derived_unique_key_from_a_viewer():
    shown = api_detail(VIEWER, job().pk)

    assert SECRET not in json.dumps(shown)
    assert shown["unique_key"] is not None  # that there is one is no secret


def test_the_api_shows_the_derived_unique_key_with_the_payload_permission():
    made = job()

    assert api_detail(OPERATOR, made.pk)["unique_key"] == made.unique_key


def test_the_admin_job_page_hides_a_derived_unique_key_from_a_viewer():
    made = job()
    client = Client()
    client.force_login(user_with(*VIEWER, username="v", is_staff=True))

    page = client.get(reverse("admin:django_workqueue_job_change", args=[made.pk]))

    assert page.status_code == 200
    assert SECRET not in page.content.decode()


def test_workqueue_show_hides_a_derived_unique_key_from_a_viewer():
    made = job()
    user_with(*VIEWER, username="v")
    out = io.StringIO()

    call_command("workqueue", "--user", "v", "show", str(made.pk), "--json", stdout=out)

    assert SECRET not in out.getvalue()
