"""What a process-pool worker and its children say to each other, as JSON.

Jobs go to a child and outcomes come back over two socket pairs private to the worker and
each child it started (``processes.py``, ``child.py``): the job channel, which the child's main
thread reads between jobs and writes outcomes on, and the control channel, which a thread of
the child reads while a job runs, for the requests to abort it. Like everything else the
package reads, the messages are JSON, never pickle: a message is one JSON document in a frame
prefixed by its length (``Channel``). Job arguments and results stay the JSON text the database
holds; only the fields around them are converted here.

worker -> child, job channel: ``["run", job, owner, connection generation, measure memory]``,
``["exit"]``; control channel: ``["abort", job_id, attempt, reason]``
child -> worker, job channel: ``["ready", pid]``, ``["began", job_id]`` (the acknowledgement of a
``run``, just before the body begins), ``["progress", job_id, report]``,
``["done", job_id, outcome or null, pending, resident bytes or null]``
"""

from __future__ import annotations

import dataclasses
import json
import select
import socket
import struct
from datetime import datetime
from typing import Any

from ..db import ClaimedJob, NewJob
from ..enqueue import Call
from ..outcomes import Outcome, OutcomeKind
from ..workflow.graph import Graph, Node
from ..workflow.store import Spawn

_NEW_JOB_TIMES = ("run_at", "deadline_at")


_LENGTH = struct.Struct("!I")
_READ_SIZE = 65536


class Channel:
    """One end of a socket pair that carries JSON messages, each in a frame prefixed by its
    length. A read takes whatever has arrived, so a message usually costs one system call to
    send and one to receive. One thread sends and one receives at a time (callers lock)."""

    def __init__(self, sock: socket.socket) -> None:
        sock.setblocking(True)
        self.sock = sock
        self._buffer = bytearray()
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLIN)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(self, message: list[Any]) -> None:
        """Send ``message`` whole; ``TypeError``/``ValueError`` if JSON cannot carry it (then
        nothing was sent), ``OSError`` if the other end is gone."""
        body = json.dumps(message, separators=(",", ":")).encode()
        self.sock.sendall(_LENGTH.pack(len(body)) + body)

    def poll(self, timeout: float) -> bool:
        """Whether a message (or the end of the stream) can be read within ``timeout`` s."""
        if self._complete():
            return True
        return bool(self._poller.poll(max(0, round(timeout * 1000))))

    def receive(self) -> list[Any]:
        """The next message, waiting for it; ``EOFError`` once the other end has closed."""
        while not self._complete():
            chunk = self.sock.recv(_READ_SIZE)
            if not chunk:
                raise EOFError("the other end of the process pool's channel closed")
            self._buffer += chunk
        (length,) = _LENGTH.unpack_from(self._buffer)
        end = _LENGTH.size + length
        body = bytes(self._buffer[_LENGTH.size : end])
        del self._buffer[:end]
        message = json.loads(body)
        if not isinstance(message, list) or not message:
            raise ValueError(f"not a message of the process pool: {message!r:.200}")
        return message

    def _complete(self) -> bool:
        if len(self._buffer) < _LENGTH.size:
            return False
        return len(self._buffer) >= _LENGTH.size + _LENGTH.unpack_from(self._buffer)[0]

    def close(self) -> None:
        self.sock.close()


def channel_pair() -> tuple[Channel, socket.socket]:
    """A channel for this process and the socket to hand to the other."""
    ours, theirs = socket.socketpair()
    return Channel(ours), theirs


# --- jobs ----------------------------------------------------------------------------------


def job_to_wire(job: ClaimedJob) -> dict[str, Any]:
    return {
        "id": job.id, "task_name": job.task_name, "queue": job.queue,
        "priority": job.priority, "attempt": job.attempt, "max_attempts": job.max_attempts,
        "attempts_charged": job.attempts_charged, "lease_seconds": job.lease_seconds,
        "deadline": job.deadline.isoformat() if job.deadline is not None else None,
        "deadline_passed": job.deadline_passed, "payload": job._payload,
        "workflow_id": job.workflow_id, "input_shape": job.input_shape, "flow_key": job.flow_key,
    }  # fmt: skip


def job_from_wire(fields: dict[str, Any]) -> ClaimedJob:
    deadline = fields["deadline"]
    return ClaimedJob(
        fields["id"], fields["task_name"], fields["queue"], fields["priority"],
        fields["attempt"], fields["max_attempts"], fields["attempts_charged"],
        fields["lease_seconds"],
        datetime.fromisoformat(deadline) if deadline is not None else None,
        fields["deadline_passed"], fields["payload"], fields["workflow_id"],
        fields["input_shape"], fields["flow_key"],
    )  # fmt: skip


# --- outcomes ------------------------------------------------------------------------------


def outcome_to_wire(outcome: Outcome) -> dict[str, Any]:
    return {
        "job_id": outcome.job_id, "attempt": outcome.attempt, "kind": outcome.kind.value,
        "max_attempts": outcome.max_attempts, "attempts_charged": outcome.attempts_charged,
        "result_json": outcome.result_json,
        "error": outcome.error, "delay": outcome.delay, "progress": outcome.progress,
        "task_name": outcome.task_name, "queue": outcome.queue,
        "spawn": spawn_to_wire(outcome.spawn) if outcome.spawn is not None else None,
        "encoded": outcome._encoded,  # the row, made by the child: the worker only joins them
    }  # fmt: skip


def outcome_from_wire(fields: dict[str, Any]) -> Outcome:
    progress = fields["progress"]
    return Outcome(
        job_id=fields["job_id"], attempt=fields["attempt"], kind=OutcomeKind(fields["kind"]),
        max_attempts=fields["max_attempts"], attempts_charged=fields["attempts_charged"],
        result_json=fields["result_json"],
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
