"""What a process-pool worker and its children say to each other, as JSON.

Jobs go to a child and outcomes come back over a socket pair private to the worker and the
children it started (``processes.py``, ``child.py``). Like everything else the package reads,
the messages are JSON, never pickle: a message is one JSON document in a length-prefixed frame
(``Connection.send_bytes`` / ``recv_bytes``). Job arguments and results stay the JSON text the
database holds; only the fields around them are converted here.

worker -> child: ``["run", job, owner, connection generation]``, ``["abort", job_id, reason]``,
``["exit"]``
child -> worker: ``["ready", pid]``, ``["progress", job_id, report]``,
``["done", job_id, outcome or null, pending, resident bytes]``
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from multiprocessing.connection import Connection
from typing import Any

from ..db import ClaimedJob, NewJob
from ..enqueue import Call
from ..outcomes import Outcome, OutcomeKind
from ..workflow.canvas import Graph, Node
from ..workflow.store import Spawn

_NEW_JOB_TIMES = ("run_at", "deadline_at")


def send(conn: Connection, message: list[Any]) -> None:
    conn.send_bytes(json.dumps(message, separators=(",", ":")).encode())


def receive(conn: Connection) -> list[Any]:
    message = json.loads(conn.recv_bytes())
    if not isinstance(message, list) or not message:
        raise ValueError(f"not a message of the process pool: {message!r:.200}")
    return message


# --- jobs ----------------------------------------------------------------------------------


def job_to_wire(job: ClaimedJob) -> dict[str, Any]:
    return {
        "id": job.id, "task_name": job.task_name, "queue": job.queue,
        "priority": job.priority, "attempt": job.attempt, "max_attempts": job.max_attempts,
        "lease_seconds": job.lease_seconds,
        "deadline": job.deadline.isoformat() if job.deadline is not None else None,
        "deadline_passed": job.deadline_passed, "payload": job._payload,
        "workflow_id": job.workflow_id, "input_shape": job.input_shape, "flow_key": job.flow_key,
    }  # fmt: skip


def job_from_wire(fields: dict[str, Any]) -> ClaimedJob:
    deadline = fields["deadline"]
    return ClaimedJob(
        fields["id"], fields["task_name"], fields["queue"], fields["priority"],
        fields["attempt"], fields["max_attempts"], fields["lease_seconds"],
        datetime.fromisoformat(deadline) if deadline is not None else None,
        fields["deadline_passed"], fields["payload"], fields["workflow_id"],
        fields["input_shape"], fields["flow_key"],
    )  # fmt: skip


# --- outcomes ------------------------------------------------------------------------------


def outcome_to_wire(outcome: Outcome) -> dict[str, Any]:
    return {
        "job_id": outcome.job_id, "attempt": outcome.attempt, "kind": outcome.kind.value,
        "max_attempts": outcome.max_attempts, "result_json": outcome.result_json,
        "error": outcome.error, "delay": outcome.delay, "progress": outcome.progress,
        "task_name": outcome.task_name, "queue": outcome.queue,
        "spawn": spawn_to_wire(outcome.spawn) if outcome.spawn is not None else None,
        "encoded": outcome._encoded,  # the row, made by the child: the worker only joins them
    }  # fmt: skip


def outcome_from_wire(fields: dict[str, Any]) -> Outcome:
    progress = fields["progress"]
    return Outcome(
        job_id=fields["job_id"], attempt=fields["attempt"], kind=OutcomeKind(fields["kind"]),
        max_attempts=fields["max_attempts"], result_json=fields["result_json"],
        error=fields["error"], delay=fields["delay"],
        progress=tuple(progress) if progress is not None else None,
        task_name=fields["task_name"], queue=fields["queue"],
        spawn=spawn_from_wire(fields["spawn"]) if fields["spawn"] is not None else None,
        _encoded=fields["encoded"],
    )  # fmt: skip


# --- steps added at run time ---------------------------------------------------------------


def spawn_to_wire(spawn: Spawn) -> dict[str, Any]:
    return {
        "nodes": [_node_to_wire(node) for node in spawn.graph.nodes],
        "children": spawn.children,
        "continuation": spawn.continuation,
    }


def spawn_from_wire(fields: dict[str, Any]) -> Spawn:
    graph = Graph(nodes=[_node_from_wire(node) for node in fields["nodes"]])
    return Spawn(graph=graph, children=fields["children"], continuation=fields["continuation"])


def _node_to_wire(node: Node) -> dict[str, Any]:
    template = {
        field.name: getattr(node.template, field.name) for field in dataclasses.fields(NewJob)
    }
    for name in _NEW_JOB_TIMES:
        if template[name] is not None:
            template[name] = template[name].isoformat()
    return {
        "template": template,
        "args_json": node.call.args_json,
        "kwargs_json": node.call.kwargs_json,
        "prerequisites": node.prerequisites,
        "external": node.external,
        "input_shape": node.input_shape,
    }


def _node_from_wire(fields: dict[str, Any]) -> Node:
    template = dict(fields["template"])
    for name in _NEW_JOB_TIMES:
        if template[name] is not None:
            template[name] = datetime.fromisoformat(template[name])
    args_json, kwargs_json = fields["args_json"], fields["kwargs_json"]
    return Node(
        template=NewJob(**template),
        call=Call(json.loads(args_json), json.loads(kwargs_json), args_json, kwargs_json),
        prerequisites=fields["prerequisites"],
        external=fields["external"],
        input_shape=fields["input_shape"],
    )
