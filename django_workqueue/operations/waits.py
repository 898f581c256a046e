"""Sending a signal to a job or a workflow: what ``context.wait_for_signal`` waits for."""

from __future__ import annotations

from typing import Any

from ..conf import workqueue_settings as conf
from ..db import locking
from ..models import Job, Workflow
from ..payload import check_size, encode
from ..workflow import inbox
from .jobs import OperationResult


def send_signal(
    job_or_workflow: Job | Workflow | int, name: str, payload: Any = None, *,
    alias: str | None = None,
) -> OperationResult:  # fmt: skip
    """Send the signal ``name`` with ``payload`` (JSON) to a job (a ``Job`` or its id) or to a
    workflow (a ``Workflow``: any of its jobs' waits may take it).

    Written in the caller's transaction: a signal sent in a transaction that rolls back never
    arrives. A job waiting for ``name`` is woken; a signal nobody waits for yet is kept, in
    order, for the next wait of that name. A finished job or workflow refuses it
    (``action == "unchanged"``).

    >>> send_signal(order_job, "approve", {"by": "alice"})
    """
    db = alias or conf.DATABASE
    if isinstance(job_or_workflow, Workflow):
        job_id, workflow_id = None, job_or_workflow.pk
        target = f"workflow {workflow_id}"
    else:
        job_id = job_or_workflow.pk if isinstance(job_or_workflow, Job) else job_or_workflow
        workflow_id = None
        target = f"job {job_id}"
    name = inbox.check_name("send_signal", name)
    owner = f"send_signal({name!r}): the payload"
    encoded = encode(payload, "payload", owner)
    check_size(len(encoded.encode()), conf.MAX_PAYLOAD_BYTES, f"{owner} is",
               "MAX_PAYLOAD_BYTES")  # fmt: skip
    woken = locking.operation(
        db, f"send_signal({target}, {name!r})",
        lambda: inbox.send(db, name, payload, job_id=job_id, workflow_id=workflow_id),
    )  # fmt: skip
    if woken is None:
        return OperationResult(
            action="unchanged", count=0,
            message=f"{target} already finished; the signal {name!r} was not kept",
        )  # fmt: skip
    waiting = f"; it woke {woken} waiting job(s)" if woken else "; kept until a wait takes it"
    return OperationResult(
        action="signalled", count=1, message=f"signal {name!r} sent to {target}{waiting}"
    )
