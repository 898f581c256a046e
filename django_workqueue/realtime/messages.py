"""What the websockets say: group names, and the state of a job, a workflow or a queue's job as
a JSON-able dict, redacted for one user.

Every message a client receives has a ``type`` and an ``event``::

    {"type": "job", "event": "progress", "job": {"id": 7, "status": "running", ...,
     "progress": {"current": 3, "total": 10, "message": "page 3", "details": null},
     "details_hidden": true}}
    {"type": "workflow", "event": "changed", "workflow": {"id": 2, "status": "running", ...}}

Raw states (``job_state``, ``workflow_state``) travel between processes unredacted; each
connection applies its user's ``Clearance`` last (``job_message``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from ..disclosure import Clearance
from ..models import Job

GROUP_PREFIX = "workqueue"
JOB_FIELDS = (
    "id", "task_name", "queue", "status", "attempt", "workflow_id", "progress_current",
    "progress_total", "progress_message", "progress_details",
)  # fmt: skip
WORKFLOW_FIELDS = ("id", "name", "status", "total", "open", "succeeded", "failed", "cancelled")
# Channels allows group names of ASCII letters, digits, "-", "_" and "." shorter than 100.
_GROUP_SAFE = re.compile(r"[A-Za-z0-9_.-]{1,60}")


def job_group(job_id: int) -> str:
    return f"{GROUP_PREFIX}.job.{int(job_id)}"


def workflow_group(workflow_id: int) -> str:
    return f"{GROUP_PREFIX}.workflow.{int(workflow_id)}"


def queue_group(name: str) -> str:
    """A queue's group; a queue name Channels would refuse is replaced by its digest."""
    if _GROUP_SAFE.fullmatch(name):
        return f"{GROUP_PREFIX}.queue.{name}"
    return f"{GROUP_PREFIX}.queue.h{hashlib.sha256(name.encode()).hexdigest()[:32]}"


def job_state(row: Mapping[str, Any]) -> dict[str, Any]:
    """A job's state from a ``values(*JOB_FIELDS)`` row (unredacted)."""
    return {
        "id": row["id"], "task_name": row["task_name"], "queue": row["queue"],
        "status": row["status"], "attempt": row["attempt"], "workflow_id": row["workflow_id"],
        "progress": {
            "current": row["progress_current"], "total": row["progress_total"],
            "message": row["progress_message"], "details": row["progress_details"],
        },
    }  # fmt: skip


def with_progress(state: dict[str, Any], progress: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` with a newer progress report (from ``job_progress``: running, that attempt)."""
    report = {key: progress.get(key) for key in ("current", "total", "message", "details")}
    report["message"] = report["message"] or ""
    return {**state, "status": "running", "attempt": progress.get("attempt", state["attempt"]),
            "progress": report}  # fmt: skip


def workflow_state(row: Mapping[str, Any]) -> dict[str, Any]:
    return {name: row[name] for name in WORKFLOW_FIELDS}


def job_message(event: str, state: Mapping[str, Any], clearance: Clearance) -> dict[str, Any]:
    """A job's state as ``clearance`` may see it: the progress message redacted and the
    details withheld without the payload permission."""
    progress = dict(state["progress"])
    progress["message"] = clearance.shown(Job, "progress_message", progress.get("message") or "")
    progress["details"] = clearance.shown(Job, "progress_details", progress.get("details"))
    hidden = not clearance.may_see(Job, "progress_details")
    job = {**state, "progress": progress, "details_hidden": hidden}
    return {"type": "job", "event": event, "job": job}


def workflow_message(event: str, state: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "workflow", "event": event, "workflow": dict(state)}
