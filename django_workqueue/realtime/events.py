"""Signals → Channels groups: the ``"channel_layer"`` delivery (``WORKQUEUE["REALTIME"]``).

``connect()`` (called from the app's ``ready()`` in that mode) hooks receivers to the job and
workflow signals. A receiver only hands the event to the ``Publisher`` and returns: the worker
never waits for Redis. The publisher's thread takes the events in batches, keeps the latest
progress report per job, reads the rows the status events name (one query per batch: the
status, attempt and progress *as stored*, and each job's workflow), and ``group_send``s to the
job's, the workflow's and the queue's groups.

A signal sent inside an ASGI server's thread (``sync_to_async``: a view that cancels a job) is
published right there on the server's event loop instead.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Iterable
from typing import Any

from asgiref.sync import SyncToAsync, async_to_sync
from channels.layers import get_channel_layer
from django.db import close_old_connections
from django.db.models import QuerySet

from .. import signals
from ..conf import workqueue_settings as conf
from ..models import Job, Workflow
from . import messages

logger = logging.getLogger("django_workqueue.realtime")

EVENT_TYPE = "workqueue.event"
"""The ``type`` of every group message; consumers handle it in ``workqueue_event``."""

STATUS_SIGNALS = {
    signals.job_enqueued: "enqueued", signals.job_started: "started",
    signals.job_succeeded: "succeeded", signals.job_retrying: "retrying",
    signals.job_failed: "failed", signals.job_cancelled: "cancelled",
    signals.job_snoozed: "snoozed", signals.job_reaped: "reaped", signals.job_woken: "woken",
}  # fmt: skip
DISPATCH_UID = "django_workqueue.realtime.events"
PROGRESS_FIELDS = ("attempt", "current", "total", "message", "details")


class Publisher:
    """A daemon thread with its own event loop that publishes events in batches."""

    max_pending = 10_000
    """Events waiting beyond this are dropped (and logged): a stalled Redis must not grow the
    worker's memory. The rows stay right, and a reconnecting page reads them."""
    batch_size = 500

    def __init__(self) -> None:
        self.events: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue(self.max_pending)
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()
        self.dropped = 0

    def publish(self, event: str, fields: dict[str, Any]) -> None:
        if getattr(SyncToAsync.threadlocal, "main_event_loop", None) is not None:
            # Inside sync_to_async: async_to_sync runs on the server's own loop.
            async_to_sync(send_all)(resolve([(event, fields)]))
            return
        self._ensure_thread()
        try:
            self.events.put_nowait((event, fields))
        except queue.Full:
            self.dropped += 1
            if self.dropped in (1, 100) or self.dropped % 10_000 == 0:
                logger.warning("realtime publisher is behind: %d events dropped", self.dropped)

    def _ensure_thread(self) -> None:
        if self.thread is None or not self.thread.is_alive():
            with self.lock:
                if self.thread is None or not self.thread.is_alive():
                    self.thread = threading.Thread(
                        target=self._run, name="workqueue-realtime", daemon=True
                    )
                    self.thread.start()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        while True:
            batch = [self.events.get()]
            while len(batch) < self.batch_size:
                try:
                    batch.append(self.events.get_nowait())
                except queue.Empty:
                    break
            try:
                close_old_connections()
                loop.run_until_complete(send_all(resolve(batch)))
            except Exception:
                logger.exception("realtime publisher could not publish %d events", len(batch))
            finally:
                close_old_connections()
                for _ in batch:
                    self.events.task_done()

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every event handed over so far to be published
        (a stopping worker's last outcomes); whether they were."""
        deadline = time.monotonic() + timeout
        while self.events.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.events.unfinished_tasks


publisher = Publisher()


def resolve(batch: Iterable[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """The group messages for a batch of events: progress reports coalesced per job (the
    latest wins), status events completed from the rows as stored."""
    ordered: dict[tuple[str, Any], tuple[str, dict[str, Any]]] = {}
    for event, fields in batch:
        if event == "progress":
            key: tuple[str, Any] = ("progress", fields["job_id"])
        elif event == "workflow_finished":
            key = ("workflow", fields["workflow_id"])
        else:
            key = ("status", fields["job_id"])
        ordered.pop(key, None)
        ordered[key] = (event, fields)
    job_ids = [f["job_id"] for (kind, _), (_, f) in ordered.items() if kind == "status"]
    rows = {}
    if job_ids:
        jobs = _jobs().filter(id__in=job_ids).values(*messages.JOB_FIELDS)
        rows = {row["id"]: messages.job_state(row) for row in jobs}
    workflow_ids = {state["workflow_id"] for state in rows.values() if state["workflow_id"]}
    workflow_ids |= {
        f["workflow_id"] for (kind, _), (_, f) in ordered.items() if kind == "workflow"
    }
    workflows = {}
    if workflow_ids:
        found = (
            Workflow.objects.using(conf.DATABASE)
            .filter(id__in=workflow_ids)
            .values(*messages.WORKFLOW_FIELDS)
        )
        workflows = {row["id"]: messages.workflow_state(row) for row in found}
    out: list[tuple[str, dict[str, Any]]] = []
    for (kind, _), (event, fields) in ordered.items():
        if kind == "progress":
            report = {name: fields.get(name) for name in PROGRESS_FIELDS}
            message = {"type": EVENT_TYPE, "event": "progress", "job_id": fields["job_id"],
                       "progress": report}  # fmt: skip
            out.append((messages.job_group(fields["job_id"]), message))
            continue
        if kind == "workflow":
            workflow_id, name = fields["workflow_id"], "finished"
        else:
            state = rows.get(fields["job_id"])
            if state is None:  # deleted meanwhile (retention, purge)
                continue
            message = {"type": EVENT_TYPE, "event": event, "job": state}
            out.append((messages.job_group(state["id"]), message))
            out.append((messages.queue_group(state["queue"]), message))
            workflow_id, name = state["workflow_id"], "changed"
        if workflow_id in workflows:
            message = {"type": EVENT_TYPE, "event": name, "workflow": workflows[workflow_id]}
            out.append((messages.workflow_group(workflow_id), message))
    return out


async def send_all(sends: list[tuple[str, dict[str, Any]]]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    for group, message in sends:
        await layer.group_send(group, message)


# --- receivers ----------------------------------------------------------------------------------


def _status_receiver(signal: Any) -> Any:
    event = STATUS_SIGNALS[signal]

    def receive(sender: Any, job_id: int, **kwargs: Any) -> None:
        publisher.publish(event, {"job_id": job_id})

    receive.__name__ = f"publish_{event}"
    return receive


_RECEIVERS = {signal: _status_receiver(signal) for signal in STATUS_SIGNALS}


def _progress(sender: Any, job_id: int, **kwargs: Any) -> None:
    publisher.publish("progress", {"job_id": job_id, **kwargs})


def _workflow_finished(sender: Any, workflow_id: int, status: str, **kwargs: Any) -> None:
    publisher.publish("workflow_finished", {"workflow_id": workflow_id, "status": status})


def _worker_stopped(sender: Any, **kwargs: Any) -> None:
    if not publisher.drain(DRAIN_SECONDS):
        logger.warning("realtime publisher: events still unpublished at worker stop")


DRAIN_SECONDS = 5.0
"""How long a stopping worker waits for its last events to reach the channel layer."""


def connect() -> None:
    """Publish every job and workflow signal of this process to the channel layer (idempotent)."""
    for signal, receiver in _RECEIVERS.items():
        signal.connect(receiver, dispatch_uid=DISPATCH_UID)
    signals.job_progress.connect(_progress, dispatch_uid=DISPATCH_UID)
    signals.workflow_finished.connect(_workflow_finished, dispatch_uid=DISPATCH_UID)
    signals.worker_stopped.connect(_worker_stopped, dispatch_uid=DISPATCH_UID)


def disconnect() -> None:
    for signal in [*_RECEIVERS, signals.job_progress, signals.workflow_finished,
                   signals.worker_stopped]:  # fmt: skip
        signal.disconnect(dispatch_uid=DISPATCH_UID)


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(conf.DATABASE)  # the jobs database, which may not be default
