"""No filter answers questions about what a user may not see: the admin's query-string
lookups, searches and orderings, the API's and the CLI's filters on errors. A field of
``disclosure.HIDDEN`` is filtered on only with its permission; errors by type for everyone, by
text only for a user who may read all of them."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from django_workqueue.disclosure import Clearance
from django_workqueue.models import FlowLimit
from tests.support.commands import run_workqueue
from tests.support.disclosure import (
    ERROR_TYPE,
    TASK,
    admin_client,
    api_client,
    build_scene,
    write_world,
)
from tests.support.factories import JobFactory
from tests.support.users import user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

SECRET = "Zq9sXw"
VIEWER = ("view_job",)
READER = ("view_job", "view_job_payload", "view_job_traceback")


@pytest.fixture
def scene():
    scene = build_scene()
    write_world(scene, SECRET)
    return scene


def listed(codenames, name, query):
    """(status, rows listed) of an admin change list as a user holding ``codenames``: each
    row by its primary key as the user may see it."""
    username = "-".join(codenames)
    user = User.objects.filter(username=username).first()
    user = user or user_with(*codenames, username=username, is_staff=True)
    response = admin_client(user).get(reverse(name), query)
    if response.status_code != 200:
        return response.status_code, None
    cl = response.context["cl"]
    clearance = Clearance.of(user)
    return 200, [str(clearance.shown(cl.model, "pk", row.pk, row)) for row in cl.result_list]


JOBS = "admin:django_workqueue_job_changelist"
ORACLES = [
    (JOBS, {"unique_key__startswith": '@args:{"email": "Zq'}),
    (JOBS, {"unique_key__regex": f"^@args:.*{SECRET}"}),
    (JOBS, {"unique_key__gt": "@args:{"}),
    (JOBS, {"unique_key": '@args:{"email": "' + SECRET + '-unique"}'}),
    (JOBS, {"flow_key__startswith": "fair:Zq"}),
    (JOBS, {"flow_key__icontains": SECRET}),
    (JOBS, {"progress_message__icontains": SECRET}),
    (JOBS, {"errors__icontains": SECRET}),
    (JOBS, {"kwargs__to__startswith": "Zq"}),
    (JOBS, {"workflow__result__icontains": SECRET}),
    ("admin:django_workqueue_workflow_changelist", {"result__icontains": SECRET}),
    ("admin:django_workqueue_workflow_changelist", {"jobs__args__icontains": SECRET}),
    ("admin:django_workqueue_schedule_changelist", {"args__icontains": SECRET}),
    ("admin:django_workqueue_flowlimit_changelist", {"key__startswith": f"limit:{TASK}:Zq"}),
    ("admin:django_workqueue_flowlimit_changelist", {"key__regex": SECRET}),
]


@pytest.mark.parametrize(("name", "query"), ORACLES, ids=lambda v: str(v))
def test_a_viewer_cannot_filter_on_a_hidden_field(scene, name, query):
    # Django answers a lookup the admin refuses with 400 (DisallowedModelAdminLookup).
    assert listed(VIEWER, name, query) == (400, None)


@pytest.mark.parametrize(
    ("name", "query"),
    [(name, query) for name, query in ORACLES if "key" in str(query) and "__gt" not in str(query)],
    ids=lambda v: str(v),
)
def test_the_payload_permission_filters_on_keys(scene, name, query):
    status, rows = listed(READER, name, query)

    assert status == 200
    assert len(rows) == 1  # the secret's row, not its reversal's


def test_a_viewer_cannot_search_a_derived_unique_key(scene):
    key = '@args:{"email": "' + SECRET + '-unique"}'

    assert listed(VIEWER, JOBS, {"q": key}) == (200, [])
    assert listed(READER, JOBS, {"q": key}) == (200, [str(scene.job.pk)])


def test_a_viewer_cannot_search_order_or_open_flow_limits_by_their_hidden_key(scene):
    limits = "admin:django_workqueue_flowlimit_changelist"
    key = f"limit:{TASK}:{SECRET}-limit"

    assert listed(VIEWER, limits, {"q": key}) == listed(VIEWER, limits, {})
    assert listed(VIEWER, limits, {"o": "0"}) == listed(VIEWER, limits, {"o": "-0"})
    client = admin_client(User.objects.get(username="view_job"))
    for guess in (key, f"limit:{TASK}:no-such-key"):
        page = reverse("admin:django_workqueue_flowlimit_change", args=[guess])
        assert client.get(page).status_code == 403  # whether or not the row exists
    assert listed(READER, limits, {"q": key}) == (200, [key])


def test_the_error_type_filter_reads_types_not_text(scene):
    assert listed(VIEWER, JOBS, {"error_type": SECRET}) == (200, [])
    status, rows = listed(VIEWER, JOBS, {"error_type": ERROR_TYPE})
    assert status == 200 and len(rows) == 2


# --- the command's --error and --error-type ---------------------------------------------------


def test_cli_error_text_is_refused_to_a_viewer_and_the_type_is_not(scene):
    user_with(*VIEWER, "retry_job", "view_job_traceback", username="viewer")

    code, _, err = run_workqueue("--user", "viewer", "jobs", "--error", f"{SECRET}-message")
    assert code == 2
    assert "view_job_payload" in err and "--error-type" in err
    code, _, err = run_workqueue("--user", "viewer", "redrive", "--error", "Zq", "--dry-run")
    assert code == 2 and "--error-type" in err
    code, out, _ = run_workqueue(
        "--user", "viewer", "redrive", "--error-type", ERROR_TYPE, "--dry-run", "--json"
    )
    assert code == 0 and json.loads(out)["matched"] == 2

    code, out, _ = run_workqueue("--user", "viewer", "jobs", "--error-type", ERROR_TYPE, "--json")
    assert code == 0 and len(json.loads(out)) == 2
    code, out, _ = run_workqueue("--user", "viewer", "jobs", "--error-type", SECRET, "--json")
    assert code == 0 and json.loads(out) == []


def test_cli_error_text_searches_for_a_user_who_may_read_errors_and_for_the_shell(scene):
    user_with(*READER, username="reader")

    for user in (("--user", "reader"), ()):
        code, out, _ = run_workqueue(*user, "jobs", "--error", f"{SECRET}-traceback", "--json")
        assert code == 0
        assert [row["id"] for row in json.loads(out)] == [scene.job.pk]


# --- the API's error_type and ids filters -----------------------------------------------------


def test_api_job_list_filters_by_error_type_never_by_text(scene):
    client = api_client(user_with(*VIEWER, username="viewer"))

    by_type = client.get("/api/workqueue/jobs/", {"error_type": ERROR_TYPE}).json()
    by_text = client.get("/api/workqueue/jobs/", {"error_type": f"{SECRET}-message"}).json()

    assert len(by_type["results"]) == 2
    assert by_text["results"] == []


def test_api_redrive_takes_ids_and_error_types(scene):
    client = api_client(user_with("view_job", "retry_job", username="operator"))
    url = "/api/workqueue/jobs/redrive/"

    by_ids = client.post(url, {"ids": [scene.job.pk], "dry_run": True}, format="json")
    by_type = client.post(url, {"error_type": [ERROR_TYPE], "dry_run": True}, format="json")
    by_text = client.post(url, {"error_type": [SECRET], "dry_run": True}, format="json")
    outside = JobFactory(failed=True)
    redriven = client.post(url, {"ids": [outside.pk]}, format="json")

    assert by_ids.json()["ids"] == [scene.job.pk]
    assert sorted(by_type.json()["ids"]) == sorted([scene.job.pk, scene.other.pk])
    assert by_text.json()["matched"] == 0
    assert redriven.json()["count"] == 1, redriven.json()


def test_api_redrive_refuses_bad_ids_by_name(scene):
    client = api_client(user_with("view_job", "retry_job", username="operator"))

    response = client.post("/api/workqueue/jobs/redrive/", {"ids": ["x"]}, format="json")

    assert response.status_code == 400
    assert "ids" in response.json()


def test_flow_limits_are_unordered_by_key_for_a_viewer(scene):
    # Tied last uses: Django would break the tie by the key.
    assert FlowLimit.objects.count() == 3
    first = listed(VIEWER, "admin:django_workqueue_flowlimit_changelist", {})
    write_world(scene, SECRET[::-1])  # the two derived keys swap their order by key
    assert listed(VIEWER, "admin:django_workqueue_flowlimit_changelist", {}) == first
