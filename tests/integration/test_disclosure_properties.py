"""As a property: no answer a viewer gets from a list depends on a hidden value.

Hypothesis draws query strings for every admin change list (lookups on every field, chained
lookups, searches, orderings, the admin's own filters), for the API's lists and for the
command's ``jobs`` filters, with values made of pieces of the hidden values. Each is asked of
two worlds that differ only in what a viewer may not see (``tests.support.disclosure``); the
viewer must get the same answer from both.
"""

from __future__ import annotations

import json
import os

import pytest
from django.urls import reverse
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from django_workqueue.disclosure import HIDDEN, Clearance
from django_workqueue.models import FlowLimit, Job, Schedule, Workflow
from tests.support.commands import run_workqueue
from tests.support.disclosure import (
    ERROR_TYPE,
    TASK,
    admin_client,
    api_client,
    build_scene,
    write_world,
)
from tests.support.users import user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

WORLDS = ("Zq9sXw", "aB3kLm")
EXAMPLES = 400 if os.environ.get("WORKQUEUE_CHAOS", "").lower() == "full" else 20
FAST = settings(
    max_examples=EXAMPLES, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)  # fmt: skip

CHANGELISTS = {
    Job: "admin:django_workqueue_job_changelist",
    Workflow: "admin:django_workqueue_workflow_changelist",
    Schedule: "admin:django_workqueue_schedule_changelist",
    FlowLimit: "admin:django_workqueue_flowlimit_changelist",
}
LOOKUPS = [
    "", "exact", "iexact", "startswith", "istartswith", "contains", "icontains", "endswith",
    "regex", "iregex", "gt", "lt", "gte", "in", "isnull", "email", "to", "0", "type", "message",
    "traceback", "key", "result", "args",
]  # fmt: skip
PIECES = [
    *WORLDS, *(world[:2] for world in WORLDS), "Z", "a", "@args:", '@args:{"email": "Zq',
    '@args:{"email": "aB', "fair:Zq", "fair:aB", f"limit:{TASK}:Zq", f"limit:{TASK}:aB", ".*Zq",
    "^.*aB", "password=Zq", "True", "False", "1", ERROR_TYPE, "-traceback", "-message",
]  # fmt: skip
values = st.one_of(st.sampled_from(PIECES), st.text(max_size=8))


def _fields(model):
    names = [field.name for field in model._meta.get_fields()]
    return [*names, "pk", "jobs", "workflow"]


def _hidden_fields(model):
    return [row.field for row in HIDDEN if row.model is model]


@st.composite
def admin_queries(draw):
    model = draw(st.sampled_from(list(CHANGELISTS)))
    query = {}
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["lookup", "lookup", "lookup", "q", "o", "own"]))
        if kind == "lookup":
            # Half of them on the fields the catalogue hides, where an oracle would be.
            fields = st.sampled_from(_hidden_fields(model)) | st.sampled_from(_fields(model))
            path = [draw(fields)]
            path += draw(st.lists(st.sampled_from(LOOKUPS), max_size=2))
            query["__".join(part for part in path if part)] = draw(values)
        elif kind == "q":
            query["q"] = draw(values)
        elif kind == "o":
            query["o"] = ".".join(draw(st.lists(st.sampled_from(["0", "-0", "1", "-1", "2", "3"]),
                                               min_size=1, max_size=3)))  # fmt: skip
        else:
            query[draw(st.sampled_from(["error_type", "task", "queue", "workflow"]))] = draw(values)
    return CHANGELISTS[model], query


@pytest.fixture
def scene():
    return build_scene()


@pytest.fixture
def viewer():
    return user_with("view_job", username="viewer", is_staff=True)


def same_for_every_world(scene, ask):
    answers = []
    for world in WORLDS:
        write_world(scene, world)
        answers.append(ask())
    assert answers[0] == answers[1]


@FAST
@given(asked=admin_queries())
@example(asked=(CHANGELISTS[Job], {"unique_key__startswith": '@args:{"email": "Zq'}))
@example(asked=(CHANGELISTS[Job], {"flow_key__regex": "^fair:Zq"}))
@example(asked=(CHANGELISTS[FlowLimit], {"o": "0"}))
def test_an_admin_list_answers_a_viewer_the_same_whatever_is_hidden(scene, viewer, asked):
    name, query = asked
    client = admin_client(viewer)
    clearance = Clearance.of(viewer)

    def ask():
        response = client.get(reverse(name), query)
        if response.status_code != 200:
            return response.status_code, response.get("Location")
        cl = response.context["cl"]
        rows = [clearance.shown(cl.model, "pk", row.pk, row) for row in cl.result_list]
        return 200, rows

    same_for_every_world(scene, ask)


API_PARAMETERS = ["status", "queue", "task", "error_type", "ids", "workflow", "created_after",
                  "limit", "unique_key", "flow_key", "args"]  # fmt: skip


@FAST
@given(
    path=st.sampled_from(["jobs/", "workflows/", "schedules/"]),
    query=st.dictionaries(st.sampled_from(API_PARAMETERS), values, max_size=3),
)
def test_an_api_list_answers_a_viewer_the_same_whatever_is_hidden(scene, viewer, path, query):
    client = api_client(viewer)

    def ask():
        response = client.get("/api/workqueue/" + path, query)
        return response.status_code, json.loads(response.content)

    same_for_every_world(scene, ask)


@FAST
@given(
    options=st.lists(
        st.tuples(st.sampled_from(["--error", "--error-type", "--task", "--status"]), values),
        min_size=1,
        max_size=2,
    )
)
def test_the_commands_job_list_answers_a_viewer_the_same_whatever_is_hidden(scene, viewer, options):
    argv = [part for option in options for part in option]

    def ask():
        return run_workqueue("--user", "viewer", "jobs", "--json", *argv)

    same_for_every_world(scene, ask)
