"""What a process-pool worker and its children send each other: JSON that carries jobs,
outcomes and the steps a job added, unchanged (no database)."""

from __future__ import annotations

import json
import socket
from datetime import UTC, datetime
from multiprocessing.connection import Connection

import pytest

from django_workqueue import group
from django_workqueue.db import ClaimedJob
from django_workqueue.outcomes import Outcome, OutcomeKind
from django_workqueue.worker import wire
from django_workqueue.worker.child import _Parent
from django_workqueue.workflow.store import Spawn
from testproject.testapp.tasks import add, double, total


@pytest.fixture
def pair():
    ours, theirs = socket.socketpair()
    a, b = Connection(ours.detach()), Connection(theirs.detach())
    yield a, b
    a.close()
    b.close()


def test_a_claimed_job_crosses_unchanged():
    deadline = datetime(2026, 11, 26, 12, 30, 5, 123456, tzinfo=UTC)
    job = ClaimedJob(
        7, "shop.tasks.resize", "images", 5, 2, 3, 60, deadline, True,
        '[[1, "a"], {"size": 3}]', 11, "[0, 1]", "tenant-4",
    )  # fmt: skip

    back = wire.job_from_wire(json.loads(json.dumps(wire.job_to_wire(job))))

    assert [getattr(back, name) for name in ClaimedJob.__slots__ if name[0] != "_"] == [
        getattr(job, name) for name in ClaimedJob.__slots__ if name[0] != "_"
    ]
    assert (back.args, back.kwargs) == ([1, "a"], {"size": 3})


def test_an_outcome_crosses_with_its_progress_error_and_row():
    outcome = Outcome(
        job_id=3, attempt=2, kind=OutcomeKind.RETRY, max_attempts=5, delay=1.5,
        error={"type": "builtins.ValueError", "message": "bad", "traceback": "Traceback…"},
        progress=(4, 10, "resizing", {"file": "a.png"}), task_name="t", queue="q",
    )  # fmt: skip
    row = outcome.encoded()

    back = wire.outcome_from_wire(json.loads(json.dumps(wire.outcome_to_wire(outcome))))

    assert back == outcome
    assert (back.task_name, back.queue, back.encoded()) == ("t", "q", row)


def test_the_steps_a_job_added_cross_and_compile_to_the_same_graph():
    spawn = Spawn()
    spawn.add(group(double.s(n) for n in range(2)))
    spawn.continue_with(total.s([1, 2]))
    later = datetime(2030, 1, 1, tzinfo=UTC)
    timed = Spawn()
    timed.add(add.using(run_at=later).s(1, 2))
    for original in (spawn, timed):
        outcome = Outcome(
            job_id=1, attempt=1, kind=OutcomeKind.SUCCEEDED, max_attempts=3,
            result_json="null", spawn=original,
        )  # fmt: skip

        back = wire.outcome_from_wire(json.loads(json.dumps(wire.outcome_to_wire(outcome))))

        assert back.spawn == original
    assert timed.graph.nodes[0].template.run_at == later


def test_a_message_that_is_not_a_list_is_refused(pair):
    ours, theirs = pair
    ours.send_bytes(b'{"run": 1}')
    with pytest.raises(ValueError, match="not a message of the process pool"):
        wire.receive(theirs)


def test_a_child_sends_an_outcome_it_cannot_encode_as_a_failure_that_says_why(pair):
    ours, theirs = pair
    outcome = Outcome(
        job_id=9, attempt=1, kind=OutcomeKind.RETRY, max_attempts=3,
        error={"type": "x", "message": object(), "traceback": None},
    )  # fmt: skip

    _Parent(theirs).send_outcome(9, outcome, True)

    kind, job_id, fields, pending, resident = wire.receive(ours)
    sent = wire.outcome_from_wire(fields)
    assert (kind, job_id, pending, sent.kind) == ("done", 9, True, OutcomeKind.DISCARD)
    assert "could not be stored" in sent.error["message"]
    assert resident > 0
