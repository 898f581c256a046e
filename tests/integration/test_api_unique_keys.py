"""Unique keys of jobs enqueued through the API live in a namespace of their own, and a
duplicate answer shows the holder only as the caller may see it (SQLite and PostgreSQL)."""

from __future__ import annotations

from typing import Any

import pytest

from django_workqueue.models import Job
from testproject.testapp.tasks import api_add
from tests.support.api import API, basic, client_as
from tests.support.tasks import welcome_mail
from tests.support.users import VIEWER, user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

API_ADD = "testproject.testapp.tasks.api_add"
WELCOME = "tests.support.tasks.welcome_mail"


def caller(*codenames: str, username: str) -> Any:
    from rest_framework.test import APIClient

    user_with(*codenames, username=username)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=basic(username))
    return client


def enqueue(client: Any, **body: Any) -> Any:
    return client.post(f"{API}jobs/", body, format="json")


def test_a_duplicate_shows_a_caller_without_view_job_only_its_id() -> None:
    first = enqueue(client_as("superuser"), task=WELCOME, kwargs={"email": "ann@example.com",
                    "plan": "secret-plan"})  # fmt: skip
    adder = caller("add_job", username="adder")

    again = enqueue(adder, task=WELCOME, kwargs={"email": "ann@example.com"})

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json() == {"id": first.json()["id"], "duplicate": True}


def test_a_duplicate_shows_a_viewer_the_job_as_disclosure_allows() -> None:
    enqueue(client_as("superuser"), task=WELCOME, kwargs={"email": "ann@example.com"})
    viewer = caller("add_job", *VIEWER, username="viewer-adder")

    again = enqueue(viewer, task=WELCOME, kwargs={"email": "ann@example.com"})

    shown = again.json()
    assert again.status_code == 200 and shown["duplicate"] is True
    assert (shown["args"], shown["kwargs"], shown["payload_hidden"]) == (None, None, True)
    assert shown["unique_key"] == "@args:(hidden)"


def test_the_applications_enqueue_after_an_api_enqueue_of_the_same_arguments_gets_its_own_job():
    taken = enqueue(client_as("superuser"), task=WELCOME, kwargs={"email": "ann@example.com",
                    "plan": "caller's"})  # fmt: skip

    own = welcome_mail.enqueue(email="ann@example.com", plan="pro")

    assert taken.status_code == 201
    assert own.duplicate is False and own.pk != taken.json()["id"]
    assert Job.objects.get(pk=own.pk).kwargs == {"email": "ann@example.com", "plan": "pro"}


def test_the_applications_enqueue_after_an_api_enqueue_of_the_same_key_gets_its_own_job():
    taken = enqueue(client_as("superuser"), task=API_ADD, args=[666], unique_key="order-42")

    own = api_add.using(unique_key="order-42").enqueue(1)

    assert taken.status_code == 201
    assert own.duplicate is False and Job.objects.get(pk=own.pk).args == [1]


def test_an_api_enqueue_after_the_applications_does_not_reach_its_job() -> None:
    own = welcome_mail.enqueue(email="ann@example.com", plan="pro")

    answer = enqueue(client_as("superuser"), task=WELCOME, kwargs={"email": "ann@example.com"})

    assert answer.status_code == 201 and answer.json()["id"] != own.pk
    assert answer.json()["kwargs"] == {"email": "ann@example.com"}


def test_api_callers_share_their_namespace_and_its_keys_read_as_api_keys() -> None:
    client = client_as("superuser")
    first = enqueue(client, task=API_ADD, args=[1], unique_key="order-42")
    again = enqueue(client, task=API_ADD, args=[2], unique_key="order-42")

    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert first.json()["unique_key"] == "@args:api:order-42"
    assert Job.objects.get(pk=first.json()["id"]).args == [1]


def test_an_api_key_made_too_long_by_its_prefix_is_kept_apart_as_a_digest() -> None:
    email = "a" * 223 + "@example.com"  # the application's key fits in 255, the API's not
    taken = enqueue(client_as("superuser"), task=WELCOME, kwargs={"email": email})

    own = welcome_mail.enqueue(email=email)

    stored = Job.objects.get(pk=taken.json()["id"]).unique_key
    assert own.unique_key.startswith("@args:{") and stored.startswith("@args#")
    assert own.duplicate is False
