"""What the websockets say, without a database: coalescing in the outbox, group names
Channels accepts, and what a user without the payload permission sees of a job."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("channels")

from django_workqueue.disclosure import Clearance
from django_workqueue.realtime import messages
from django_workqueue.realtime.outbox import Outbox

STATE = {
    "id": 7, "task_name": "t", "queue": "default", "status": "running", "attempt": 1,
    "workflow_id": None,
    "progress": {"current": 1, "total": 2, "message": "token=abc123 half", "details": {"a": 1}},
}  # fmt: skip


def test_a_newer_message_replaces_the_waiting_one_and_moves_to_the_back() -> None:
    box = Outbox()
    box.put("a", {"n": 1})
    box.put("b", {"n": 2})
    box.put("a", {"n": 3})
    assert box.take() == [("b", {"n": 2}), ("a", {"n": 3})]
    assert box.take() == []


def test_beyond_its_limit_the_outbox_drops_the_oldest_and_says_how_many() -> None:
    box = Outbox(limit=2)
    for n in range(5):
        box.put(n, {"n": n})
    assert box.take() == [
        (None, {"type": "overflow", "event": "dropped", "dropped": 3}), (3, {"n": 3}),
        (4, {"n": 4}),
    ]  # fmt: skip
    box.put(9, {"n": 9})
    assert box.take() == [(9, {"n": 9})]


@pytest.mark.parametrize("name", ["default", "mail.eu-1", "reports ü", "x" * 100, "a/b"])
def test_every_queue_name_makes_a_group_name_channels_accepts(name: str) -> None:
    group = messages.queue_group(name)
    assert re.fullmatch(r"[A-Za-z0-9_.-]{1,99}", group)


def test_without_the_payload_permission_the_message_is_redacted_and_details_withheld() -> None:
    shown = messages.job_message("progress", STATE, Clearance(payload=False, tracebacks=False))
    progress = shown["job"]["progress"]
    assert "abc123" not in progress["message"] and progress["message"].endswith(" half")
    assert progress["details"] is None and shown["job"]["details_hidden"] is True
    full = messages.job_message("progress", STATE, Clearance(payload=True, tracebacks=False))
    assert full["job"]["progress"] == STATE["progress"] and full["job"]["details_hidden"] is False


def test_a_progress_report_marks_the_job_running_in_the_reports_attempt() -> None:
    done = {**STATE, "status": "ready", "attempt": 1}
    report = {"attempt": 2, "current": 5, "total": 9, "message": None, "details": None}
    state = messages.with_progress(done, report)
    assert (state["status"], state["attempt"], state["progress"]["message"]) == ("running", 2, "")


def test_the_same_state_posted_again_keeps_its_first_event_name() -> None:
    """The follower's first round may repeat the snapshot before it is sent: the client still
    gets one message, named snapshot."""
    from django_workqueue.realtime.consumers import WorkflowConsumer

    consumer = WorkflowConsumer()
    state = {"id": 1, "name": "w", "status": "running", "total": 1, "open": 1, "succeeded": 0,
             "failed": 0, "cancelled": 0}  # fmt: skip
    consumer.post(("workflow", 1), messages.workflow_message("snapshot", state))
    consumer.followed("changed", state)
    assert [m["event"] for _, m in consumer.outbox.take()] == ["snapshot"]
    consumer.post(("workflow", 1), messages.workflow_message("snapshot", state))
    consumer.followed("changed", {**state, "open": 0, "succeeded": 1})
    assert [m["event"] for _, m in consumer.outbox.take()] == ["changed"]
