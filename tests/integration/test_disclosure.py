"""What of a job a user may see: payload only with ``view_job_payload``, tracebacks only with
``view_job_traceback``, messages redacted without the payload permission."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser, User

from django_workqueue.disclosure import Clearance, disclose
from django_workqueue.models import Schedule, Workflow
from tests.support.factories import JobFactory
from tests.support.users import user_with

pytestmark = pytest.mark.django_db

SECRET_ERROR = {
    "attempt": 1, "type": "builtins.ValueError", "message": "login failed: password=hunter2",
    "traceback": "Traceback ...\nValueError: login failed: password=hunter2\n",
}  # fmt: skip


def job():
    return JobFactory(
        args=["ada"], kwargs={"api_key": "k-1"}, result={"ok": True},
        errors=[SECRET_ERROR], progress_message="calling with token=abc",
        progress_details={"rows": 3},
    )  # fmt: skip


def test_a_viewer_sees_no_payload_no_traceback_and_redacted_messages():
    shown = disclose(job(), user_with("view_job"))

    assert shown["payload_hidden"] is True
    assert (shown["args"], shown["kwargs"], shown["result"], shown["progress_details"]) == (
        None, None, None, None,
    )  # fmt: skip
    assert "hunter2" not in shown["errors"][0]["message"]
    assert shown["errors"][0]["type"] == "builtins.ValueError"
    assert "traceback" not in shown["errors"][0]
    assert "abc" not in shown["progress_message"]


def test_the_payload_permission_shows_everything_as_stored_but_tracebacks():
    shown = disclose(job(), user_with("view_job", "view_job_payload"))

    assert shown["payload_hidden"] is False
    assert shown["kwargs"] == {"api_key": "k-1"}
    assert shown["result"] == {"ok": True}
    assert shown["progress_details"] == {"rows": 3}
    assert shown["errors"][0]["message"] == SECRET_ERROR["message"]
    assert shown["progress_message"] == "calling with token=abc"
    assert "traceback" not in shown["errors"][0]


def test_a_traceback_without_the_payload_permission_is_redacted():
    shown = disclose(job(), user_with("view_job", "view_job_traceback"))

    assert shown["errors"][0]["traceback"].startswith("Traceback")
    assert "hunter2" not in shown["errors"][0]["traceback"]


def test_a_superuser_sees_everything_and_anonymous_nothing_secret():
    root = User.objects.create_superuser(username="root", password="x")

    assert disclose(job(), root)["errors"][0] == SECRET_ERROR
    assert disclose(job(), AnonymousUser())["payload_hidden"] is True


def test_a_workflow_result_and_schedule_arguments_are_withheld_not_merely_redacted():
    viewer = Clearance.of(user_with("view_job"))
    value = {"user": "ada", "password": "pw"}

    # Redaction only masks secret-looking keys: "ada" would still show.
    assert viewer.shown(Workflow, "result", value) is None
    assert viewer.shown(Schedule, "kwargs", value) is None
    assert Clearance.everything().shown(Workflow, "result", value) == value
