"""The websocket consumers: one job, one workflow, one queue's event stream.

Every connection is accepted and then, if refused, closed with a code that says why (a close
before accepting would reach the browser as a bare handshake failure):

======  ======================================================================
4401    not logged in (or, later, logged out)
4403    no ``django_workqueue.view_job`` permission (or, later, no longer)
4404    no such job, workflow or queue
4413    a client message over ``max_message_bytes`` (4 KiB)
4429    more than ``max_messages_per_second`` client messages in a second
4503    live progress is off (``WORKQUEUE["REALTIME"] = None``)
1011    the check of an open socket's access failed (the database is away): reconnect
======  ======================================================================

Who may follow is checked when the socket opens and again every ``access_check_seconds``: a user
who logs out or loses ``view_job`` stops receiving within that bound.

Clients need not send anything; ``{"type": "ping"}`` is answered ``{"type": "pong"}``.
Outgoing messages go through an ``Outbox``: while the client is slow to take them, newer
states replace older ones, so it gets the latest progress rather than a backlog.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import time
from collections.abc import Hashable
from typing import Any, ClassVar

from channels.auth import get_user
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth.models import AnonymousUser
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet

from .. import permissions
from ..conf import workqueue_settings as conf
from ..disclosure import Clearance
from ..models import Job, Workflow
from . import messages
from .follower import follower
from .outbox import Outbox

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_NOT_FOUND = 4404
CLOSE_TOO_LARGE = 4413
CLOSE_FLOODING = 4429
CLOSE_DISABLED = 4503
CLOSE_INTERNAL_ERROR = 1011

logger = logging.getLogger(__name__)

QUEUE_JOB_FIELDS = ("id", "task_name", "queue", "status", "attempt", "workflow_id")


class Subscription(AsyncWebsocketConsumer):
    """One subscription per connection: authenticate, authorise, subscribe, then send the
    current state and every change. Subclasses say what is followed."""

    kind: ClassVar[str]
    max_message_bytes: ClassVar[int] = 4096
    max_messages_per_second: ClassVar[int] = 5
    outbox_limit: ClassVar[int] = 1000
    access_check_seconds: ClassVar[float] = 30.0
    """How often an open socket checks again that its user may follow (still logged in,
    active, with ``view_job``): how long one who lost that may still receive."""
    clock = staticmethod(time.monotonic)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.outbox = Outbox(self.outbox_limit)
        self.ready = asyncio.Event()
        self.sent: collections.OrderedDict[Hashable, str] = collections.OrderedDict()
        self.received: collections.deque[float] = collections.deque()
        self.clearance = Clearance(payload=False, tracebacks=False)
        self.subscribed: tuple[str | None, str, Any] | None = None
        """(delivery mode, kind, target) once subscribed: undone the way it was done."""
        self.sender: asyncio.Task[None] | None = None
        self.watcher: asyncio.Task[None] | None = None
        self.closing = False

    # --- connection ---------------------------------------------------------------------------

    async def connect(self) -> None:
        await self.accept()
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            return await self.refuse(CLOSE_UNAUTHENTICATED)
        if conf.REALTIME is None:
            return await self.refuse(CLOSE_DISABLED)
        clearance = await database_sync_to_async(_clearance)(user)
        if clearance is None:
            return await self.refuse(CLOSE_FORBIDDEN)
        self.clearance = clearance
        target = self.target()
        if target is None:
            return await self.refuse(CLOSE_NOT_FOUND)
        # Subscribe first, then read: an event that lands in between is delivered after the
        # snapshot (a consumer handles one message at a time), never lost.
        mode = conf.REALTIME
        if mode == "channel_layer":
            if self.channel_layer is None:
                return await self.refuse(CLOSE_DISABLED)
            await self.channel_layer.group_add(self.group(target), self.channel_name)
        else:
            follower().subscribe((self.kind, target), self, self.followed)
        self.subscribed = (mode, self.kind, target)
        snapshot = await database_sync_to_async(self.snapshot)(target)
        if snapshot is None:
            return await self.refuse(CLOSE_NOT_FOUND)
        loop = asyncio.get_running_loop()
        self.sender = loop.create_task(self._send_loop())
        self.watcher = loop.create_task(self._watch_access())
        for key, message in snapshot:
            self.post(key, message)
        if mode != "channel_layer":
            # The follower may have read a newer state than the snapshot meanwhile: its next
            # round reports the state again (the same one is not sent twice).
            follower().forget((self.kind, target))

    async def refuse(self, code: int) -> None:
        self.closing = True
        await self._unsubscribe()
        await self.close(code=code)

    async def disconnect(self, code: int) -> None:
        self.closing = True
        for task in (self.sender, self.watcher):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
        await self._unsubscribe()

    async def _watch_access(self) -> None:
        """Every ``access_check_seconds``, read the user again (from the session, which a
        logout deletes) and close the socket if it may no longer follow."""
        while not self.closing:
            await asyncio.sleep(self.access_check_seconds)
            try:
                user = await _current_user(self.scope)
                clearance = None
                if user.is_authenticated:
                    clearance = await database_sync_to_async(_clearance)(user)
            except Exception:  # e.g. the database is away: close, the client checks in anew
                logger.exception("could not check a websocket's access again; closing it")
                return await self.refuse(CLOSE_INTERNAL_ERROR)
            if not user.is_authenticated:
                return await self.refuse(CLOSE_UNAUTHENTICATED)
            if clearance is None:
                return await self.refuse(CLOSE_FORBIDDEN)
            self.clearance = clearance

    async def _unsubscribe(self) -> None:
        if self.subscribed is None:
            return
        mode, kind, target = self.subscribed
        self.subscribed = None
        if mode == "channel_layer" and self.channel_layer is not None:
            await self.channel_layer.group_discard(self.group(target), self.channel_name)
        else:
            follower().unsubscribe((kind, target), self)

    # --- what the client sends ---------------------------------------------------------------

    async def websocket_receive(self, message: dict[str, Any]) -> None:
        if self.closing:
            return
        text = message.get("text")
        size = len(text.encode()) if text is not None else len(message.get("bytes") or b"")
        if size > self.max_message_bytes:
            return await self.refuse(CLOSE_TOO_LARGE)
        now = self.clock()
        self.received.append(now)
        while self.received and self.received[0] <= now - 1.0:
            self.received.popleft()
        if len(self.received) > self.max_messages_per_second:
            return await self.refuse(CLOSE_FLOODING)
        try:
            request = json.loads(text) if text is not None else None
        except ValueError:
            request = None
        if isinstance(request, dict) and request.get("type") == "ping":
            await self.send(text_data=json.dumps({"type": "pong"}))
        else:
            error = 'unknown message: send {"type": "ping"}, or nothing'
            await self.send(text_data=json.dumps({"type": "error", "error": error}))

    # --- what the client gets -------------------------------------------------------------------

    def post(self, key: Hashable, message: dict[str, Any]) -> None:
        waiting = self.outbox.pending.get(key)
        if waiting is not None and {**waiting, "event": None} == {**message, "event": None}:
            return  # the same state again (the follower's first round): a snapshot stays one
        self.outbox.put(key, message)
        self.ready.set()

    async def _send_loop(self) -> None:
        while True:
            await self.ready.wait()
            self.ready.clear()
            for key, message in self.outbox.take():
                if key is not None:
                    # The same state under another event name is no news (the follower's
                    # first round repeats the snapshot).
                    same = json.dumps({**message, "event": None}, cls=DjangoJSONEncoder)
                    if self.sent.get(key) == same:
                        continue
                    self.sent.pop(key, None)
                    self.sent[key] = same
                    if len(self.sent) > self.outbox_limit:
                        self.sent.popitem(last=False)
                await self.send(text_data=json.dumps(message, cls=DjangoJSONEncoder))

    # --- subclasses ------------------------------------------------------------------------------

    def target(self) -> Any:
        """What the route names (None: refuse with 4404 before reading anything)."""
        raise NotImplementedError

    def group(self, target: Any) -> str:
        raise NotImplementedError

    def snapshot(self, target: Any) -> list[tuple[Hashable, dict[str, Any]]] | None:
        """The current state to send first (sync, on a database thread); None: not found."""
        raise NotImplementedError

    def followed(self, event: str, state: dict[str, Any]) -> None:
        """A change the database follower saw."""
        raise NotImplementedError

    async def workqueue_event(self, event: dict[str, Any]) -> None:
        """A change published to the channel layer (``events.py``)."""
        raise NotImplementedError


def _clearance(user: Any) -> Clearance | None:
    if not permissions.allowed(user, "view"):
        return None
    return Clearance.of(user)


async def _current_user(scope: dict[str, Any]) -> Any:
    """The socket's user as the database has it now: from a fresh read of its session when
    the socket has one (a logout deletes it; a password change voids it), else its row read
    again. An inactive or vanished user is anonymous."""
    session = scope.get("session")
    if session is not None:
        key = session.session_key
        if not key:
            return AnonymousUser()
        # A store of the session's own class (``__class__`` sees through Channels' lazy
        # wrapper), which reads the session again instead of what it cached at connect.
        store = session.__class__(session_key=key)
        return await get_user({**scope, "session": store})
    user = scope.get("user")
    if user is None or not user.is_authenticated:
        return AnonymousUser()
    found = await type(user)._default_manager.filter(pk=user.pk).afirst()
    if found is None or not getattr(found, "is_active", True):
        return AnonymousUser()
    return found


class JobConsumer(Subscription):
    """``ws/workqueue/jobs/<id>/``: the job's state, then each change and progress report."""

    kind = "job"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.state: dict[str, Any] | None = None

    def target(self) -> int:
        return int(self.scope["url_route"]["kwargs"]["job_id"])

    def group(self, target: int) -> str:
        return messages.job_group(target)

    def snapshot(self, target: int) -> list[tuple[Hashable, dict[str, Any]]] | None:
        row = _jobs().filter(id=target).values(*messages.JOB_FIELDS).first()
        if row is None:
            return None
        self.state = messages.job_state(row)
        return [(("job", target), messages.job_message("snapshot", self.state, self.clearance))]

    def show(self, event: str, state: dict[str, Any]) -> None:
        self.state = state
        self.post(("job", state["id"]), messages.job_message(event, state, self.clearance))

    def followed(self, event: str, state: dict[str, Any]) -> None:
        if state == self.state:
            return
        self.show("progress" if _only_progress(self.state, state) else event, state)

    async def workqueue_event(self, event: dict[str, Any]) -> None:
        if event["event"] != "progress":
            self.show(event["event"], event["job"])
            return
        report = event["progress"]
        state = self.state
        if state is None or (report.get("attempt") or 0) < state["attempt"]:
            return  # a late report of an earlier attempt
        if state["status"] != "running" and report.get("attempt") == state["attempt"]:
            return  # the attempt's outcome is in: its last progress is in the row
        self.show("progress", messages.with_progress(state, report))


def _only_progress(before: dict[str, Any] | None, now: dict[str, Any]) -> bool:
    if before is None:
        return False
    return {**before, "progress": None} == {**now, "progress": None}


class WorkflowConsumer(Subscription):
    """``ws/workqueue/workflows/<id>/``: the workflow's status and counters on every change."""

    kind = "workflow"

    def target(self) -> int:
        return int(self.scope["url_route"]["kwargs"]["workflow_id"])

    def group(self, target: int) -> str:
        return messages.workflow_group(target)

    def snapshot(self, target: int) -> list[tuple[Hashable, dict[str, Any]]] | None:
        row = (
            Workflow.objects.using(conf.DATABASE)
            .filter(id=target)
            .values(*messages.WORKFLOW_FIELDS)
            .first()
        )
        if row is None:
            return None
        state = messages.workflow_state(row)
        return [(("workflow", target), messages.workflow_message("snapshot", state))]

    def followed(self, event: str, state: dict[str, Any]) -> None:
        self.post(("workflow", state["id"]), messages.workflow_message(event, state))

    async def workqueue_event(self, event: dict[str, Any]) -> None:
        self.followed(event["event"], event["workflow"])


class QueueConsumer(Subscription):
    """``ws/workqueue/queues/<name>/``: a message per job of the queue that is enqueued or
    changes status (no progress: follow the job for that)."""

    kind = "queue"

    def target(self) -> str | None:
        name = self.scope["url_route"]["kwargs"]["queue"]
        return name if name in conf.QUEUES else None

    def group(self, target: str) -> str:
        return messages.queue_group(target)

    def snapshot(self, target: str) -> list[tuple[Hashable, dict[str, Any]]] | None:
        return [(None, {"type": "queue", "event": "snapshot", "queue": {"name": target}})]

    def followed(self, event: str, state: dict[str, Any]) -> None:
        job = {name: state.get(name) for name in QUEUE_JOB_FIELDS}
        self.post(("job", job["id"]), {"type": "job", "event": event, "job": job})

    async def workqueue_event(self, event: dict[str, Any]) -> None:
        self.followed(event["event"], event["job"])


def _jobs() -> QuerySet[Job]:
    return Job.objects.using(conf.DATABASE)  # the jobs database, which may not be default
