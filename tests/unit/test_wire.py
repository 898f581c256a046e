"""What a process-pool worker and its children send each other: JSON that carries jobs,
outcomes and the steps a job added, unchanged (no database)."""

from __future__ import annotations

import json
import socket
import threading
from datetime import UTC, datetime
from types import SimpleNamespace

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
    a, b = wire.Channel(ours), wire.Channel(theirs)
    yield a, b
    a.close()
    b.close()


def test_a_claimed_job_crosses_unchanged():
    deadline = datetime(2026, 11, 26, 12, 30, 5, 123456, tzinfo=UTC)
    job = ClaimedJob(
        7, "shop.tasks.resize", "images", 5, 2, 3, 1, 60, deadline, True,
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
    ours.sock.sendall(len(b'{"run": 1}').to_bytes(4, "big") + b'{"run": 1}')
    with pytest.raises(ValueError, match="not a message of the process pool"):
        theirs.receive()


def test_messages_that_arrive_together_or_in_pieces_are_read_one_by_one(pair):
    ours, theirs = pair
    big = ["done", 1, {"result_json": "x" * 200_000}, True, None]  # more than one read
    ours.send(["progress", 1, [1, 2, "a", None]])
    ours.send(big)
    ours.send(["ready", 5])

    assert theirs.poll(5)
    assert theirs.receive() == ["progress", 1, [1, 2, "a", None]]
    assert theirs.receive() == big
    assert theirs.poll(0)  # already read with the message before it
    assert theirs.receive() == ["ready", 5]
    assert not theirs.poll(0)


def test_a_frame_cut_anywhere_is_waited_for_whole(pair):
    ours, theirs = pair
    body = json.dumps(["run", {"id": 3}, "owner", 0, False]).encode()
    frame = len(body).to_bytes(4, "big") + body
    received = []
    reader = threading.Thread(target=lambda: received.append(theirs.receive()))
    reader.start()
    for cut in (2, 9):  # inside the length, then inside the body
        ours.sock.sendall(frame[:cut])
        frame = frame[cut:]
        reader.join(0.05)
        assert reader.is_alive() and not received
    ours.sock.sendall(frame)
    reader.join(5)

    assert received == [["run", {"id": 3}, "owner", 0, False]]


def test_the_end_of_the_stream_is_eof_and_polls_as_readable(pair):
    ours, theirs = pair
    ours.close()

    assert theirs.poll(5)
    with pytest.raises(EOFError, match="closed"):
        theirs.receive()


def test_a_message_json_cannot_carry_is_refused_before_anything_is_sent(pair):
    ours, theirs = pair
    with pytest.raises(TypeError):
        ours.send(["done", 1, {"error": object()}])
    ours.send(["ready", 1])

    assert theirs.receive() == ["ready", 1]


def test_a_child_sends_an_outcome_it_cannot_encode_as_a_failure_that_says_why(pair):
    ours, theirs = pair
    outcome = Outcome(
        job_id=9, attempt=1, kind=OutcomeKind.RETRY, max_attempts=3,
        error={"type": "x", "message": object(), "traceback": None},
    )  # fmt: skip

    _Parent(theirs, theirs).send_outcome(9, outcome, True)

    kind, job_id, fields, pending, resident = ours.receive()
    sent = wire.outcome_from_wire(fields)
    assert (kind, job_id, pending, sent.kind) == ("done", 9, True, OutcomeKind.DISCARD)
    assert "could not be stored" in sent.error["message"]
    assert resident > 0


def test_a_child_measures_its_memory_only_when_asked(pair):
    ours, theirs = pair

    _Parent(theirs, theirs).send_outcome(9, None, False, measure=False)

    assert ours.receive() == ["done", 9, None, False, None]


class _Context:
    def __init__(self, job_id, attempt=1):
        self.job = SimpleNamespace(id=job_id, attempt=attempt)
        self.reasons = []

    def abort(self, reason):
        self.reasons.append(reason)


def test_an_abort_that_overtakes_its_job_applies_when_the_job_begins(pair):
    _, theirs = pair
    parent = _Parent(theirs, theirs)
    parent._abort(4, 1, "cancel_requested")  # the worker sent the job, then at once its abort
    parent._abort(3, 1, "timeout")  # for a job that is over

    overtaken, later = _Context(4), _Context(5)
    parent.begin(overtaken)
    parent.end()
    parent.begin(later)

    assert [reason.value for reason in overtaken.reasons] == ["cancel_requested"]
    assert later.reasons == []  # what was left over is dropped when a job begins


def test_an_abort_reaches_the_running_job_at_once(pair):
    _, theirs = pair
    parent = _Parent(theirs, theirs)
    running = _Context(8)
    parent.begin(running)

    parent._abort(8, 1, "cancel_requested")
    parent._abort(7, 1, "cancel_requested")  # not this job's

    assert [reason.value for reason in running.reasons] == ["cancel_requested"]


def test_an_abort_that_arrives_after_its_attempt_ended_spares_the_next_attempt(pair):
    _, theirs = pair
    parent = _Parent(theirs, theirs)
    first = _Context(6, attempt=1)
    parent.begin(first)
    parent.end()
    parent._abort(6, 1, "timeout")  # sent while attempt 1 ran, read after it ended

    retry = _Context(6, attempt=2)  # the same job, retried in this child
    parent.begin(retry)

    assert first.reasons == [] and retry.reasons == []
