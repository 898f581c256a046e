"""The websockets read the jobs database (``WORKQUEUE["DATABASE"]``), which need not be
``default``: each read is looked for on the ``jobs`` connection, none on ``default``."""

from __future__ import annotations

import pytest
from django.db import connections
from django.test.utils import CaptureQueriesContext

from django_workqueue import chain
from django_workqueue.realtime import events
from django_workqueue.realtime.consumers import JobConsumer, WorkflowConsumer
from testproject.testapp.tasks import add, double

pytestmark = pytest.mark.django_db(transaction=True)


def test_snapshots_and_published_states_read_the_jobs_database(jobs_alias):
    job = add.enqueue(1, 2)
    workflow = chain(add.s(1, 2), double.s()).enqueue()

    with (
        CaptureQueriesContext(connections[jobs_alias]) as on_jobs,
        CaptureQueriesContext(connections["default"]) as on_default,
    ):
        assert JobConsumer().snapshot(job.pk)
        assert WorkflowConsumer().snapshot(workflow.pk)
        events_sent = events.resolve([("succeeded", {"job_id": job.pk})])

    assert events_sent
    assert len(on_jobs) >= 3
    assert len(on_default) == 0
