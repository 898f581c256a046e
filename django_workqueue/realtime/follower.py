"""The ``"database"`` delivery: the web process follows the rows (no Redis needed).

One ``Follower`` per event loop (per ASGI server process) serves every connection: each
interval (``WORKQUEUE["REALTIME_POLL_INTERVAL"]``) it reads all the jobs and workflows that
anyone follows in one query each, plus per followed queue its running jobs, the jobs enqueued
since the last round and the unfinished ones it tracks, and calls the subscribers of each
thing that changed. It starts with the first subscription and stops with the last. Progress
writes send no NOTIFY, so it polls on PostgreSQL too; the interval bounds the lag, and a report
reaches the database at most every ``PROGRESS_INTERVAL`` anyway.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from channels.db import database_sync_to_async
from django.db.models import QuerySet

from ..conf import workqueue_settings as conf
from ..models import Job, Workflow
from ..states import ACTIVE
from . import messages

logger = logging.getLogger("django_workqueue.realtime")

Key = tuple[str, Any]
"""("job", id), ("workflow", id) or ("queue", name)."""
Callback = Callable[[str, dict[str, Any]], None]
"""Called with (event, raw state): a job's or a workflow's state ("workflow" events carry
``{"workflow": state}``)."""

QUEUE_TRACKED = 1000
"""Unfinished jobs a queue's stream keeps following (enqueued since it began, or seen
running); beyond, the oldest are let go."""
QUEUE_NEW_PER_ROUND = 500
_ACTIVE = [str(status.value) for status in ACTIVE]
_PAST_ENQUEUED = ("running", "succeeded", "failed", "cancelled")


@dataclass
class _QueueWatch:
    """A followed queue: the last job id seen, and the unfinished jobs it follows."""

    after_id: int | None = None
    tracked: dict[int, dict[str, Any]] = field(default_factory=dict)


class Follower:
    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.subscribers: dict[Key, dict[Hashable, Callback]] = {}
        self.known: dict[Key, dict[str, Any]] = {}
        self.queues: dict[str, _QueueWatch] = {}
        self.task: asyncio.Task[None] | None = None

    def subscribe(self, key: Key, token: Hashable, callback: Callback) -> None:
        self.subscribers.setdefault(key, {})[token] = callback
        if key[0] == "queue":
            self.queues.setdefault(key[1], _QueueWatch())
        if self.task is None or self.task.done():
            self.task = asyncio.get_running_loop().create_task(self._run())

    def unsubscribe(self, key: Key, token: Hashable) -> None:
        callbacks = self.subscribers.get(key, {})
        callbacks.pop(token, None)
        if not callbacks:
            self.subscribers.pop(key, None)
            self.known.pop(key, None)
            if key[0] == "queue":
                self.queues.pop(key[1], None)
        if not self.subscribers and self.task is not None:
            self.task.cancel()
            self.task = None

    def forget(self, key: Key) -> None:
        """Report ``key``'s state at the next round even if it did not change."""
        self.known.pop(key, None)

    async def _run(self) -> None:
        while self.subscribers:
            try:
                changes = await database_sync_to_async(self.read)()
            except Exception:  # a database hiccup: keep following, say so
                logger.exception("realtime follower could not read the database")
                changes = []
            for key, event, state in changes:
                for callback in list(self.subscribers.get(key, {}).values()):
                    callback(event, state)
            await asyncio.sleep(self.interval)

    def read(self) -> list[tuple[Key, str, dict[str, Any]]]:
        """One round: what changed since the last, as (key, event, raw state)."""
        keys = list(self.subscribers)
        changes: list[tuple[Key, str, dict[str, Any]]] = []
        job_ids = [value for kind, value in keys if kind == "job"]
        if job_ids:
            for row in _jobs().filter(id__in=job_ids).values(*messages.JOB_FIELDS):
                state = messages.job_state(row)
                changes += self._changed(("job", row["id"]), "changed", state)
        workflow_ids = [value for kind, value in keys if kind == "workflow"]
        if workflow_ids:
            rows = (
                Workflow.objects.using(conf.DATABASE)
                .filter(id__in=workflow_ids)
                .values(*messages.WORKFLOW_FIELDS)
            )
            for row in rows:
                state = messages.workflow_state(row)
                changes += self._changed(("workflow", row["id"]), "changed", state)
        for name, watch in list(self.queues.items()):
            changes += [
                (("queue", name), event, state) for event, state in _queue_round(name, watch)
            ]
        return changes

    def _changed(
        self, key: Key, event: str, state: dict[str, Any]
    ) -> list[tuple[Key, str, dict[str, Any]]]:
        if self.known.get(key) == state:
            return []
        self.known[key] = state
        return [(key, event, state)]


def _queue_round(name: str, watch: _QueueWatch) -> list[tuple[str, dict[str, Any]]]:
    """A queue's jobs that were enqueued, started or changed status since the last round.

    Each round reads the jobs it tracks by id, the queue's running jobs (few: at most the
    fleet's slots, through the partial index of running leases), and the jobs written since
    the last id it saw. So a job enqueued before anyone subscribed shows up when it starts;
    the first round only takes its bearings and reports nothing.
    """
    jobs = _jobs().filter(queue=name)
    fields = ("id", "task_name", "queue", "status", "attempt", "workflow_id")
    running = jobs.filter(status="running").order_by("id").values(*fields)[:QUEUE_TRACKED]
    if watch.after_id is None:
        latest = _jobs().order_by("-id").values_list("id", flat=True).first()
        watch.after_id = latest or 0
        watch.tracked = {row["id"]: row for row in running}
        return []
    events: list[tuple[str, dict[str, Any]]] = []
    if watch.tracked:
        current = {
            row["id"]: row for row in jobs.filter(id__in=list(watch.tracked)).values(*fields)
        }
        for job_id, before in list(watch.tracked.items()):
            now = current.get(job_id)
            if now is None or now["status"] not in _ACTIVE:
                del watch.tracked[job_id]
            if now is not None and (now["status"], now["attempt"]) != (
                before["status"], before["attempt"],
            ):  # fmt: skip
                events.append((_event(now), now))
                if job_id in watch.tracked:
                    watch.tracked[job_id] = now
    for row in running:
        if row["id"] not in watch.tracked and row["id"] <= watch.after_id:
            events.append(("started", row))
            watch.tracked[row["id"]] = row
    new = list(
        jobs.filter(id__gt=watch.after_id).order_by("id").values(*fields)[:QUEUE_NEW_PER_ROUND]
    )
    for row in new:
        watch.after_id = row["id"]
        # A job that moved on before this round saw it is reported as it is now.
        events.append(("enqueued" if row["status"] not in _PAST_ENQUEUED else _event(row), row))
        if row["status"] in _ACTIVE:
            watch.tracked[row["id"]] = row
    while len(watch.tracked) > QUEUE_TRACKED:
        del watch.tracked[next(iter(watch.tracked))]
    return events


def _event(now: dict[str, Any]) -> str:
    """The event a status change stands for, as the signals name them."""
    status = now["status"]
    if status == "running":
        return "started"
    if status in ("succeeded", "failed", "cancelled"):
        return status
    return "changed"  # retried, snoozed, reaped, held …: the rows do not say which


_followers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Follower] = (
    weakref.WeakKeyDictionary()
)


def follower() -> Follower:
    """The follower of the running event loop (made on first use)."""
    loop = asyncio.get_running_loop()
    found = _followers.get(loop)
    if found is None:
        found = _followers[loop] = Follower(conf.REALTIME_POLL_INTERVAL)
    found.interval = conf.REALTIME_POLL_INTERVAL
    return found


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(conf.DATABASE)  # the jobs database, which may not be default
