"""What a user may see of the job queue: the one rule the admin, the API, the websockets and the
``workqueue`` command apply.

``HIDDEN`` is the catalogue: each row names a stored field, the permissions needed to see it as
stored, and what a user without them sees instead. A field of the catalogue that a user may not
see is neither shown, filtered, searched nor ordered on by that user, on any surface: a filter
on it would answer yes/no questions about the value one request at a time. ``QUERYABLE`` is the
allow-list of what a query string (the admin's change lists) may filter on at all, field by
field with its lookups; the fields of the catalogue among them only with the clearance.

=====================  ==================  ============================================
field                  needs               without it
=====================  ==================  ============================================
Job args, kwargs,      view_job_payload    withheld (None, ``payload_hidden``)
result, progress
details
Job progress message   view_job_payload    redacted (``redaction.py``)
Job errors             view_job_payload,   types shown; messages redacted; tracebacks
                       view_job_traceback  with view_job_traceback only (redacted)
Job unique_key         view_job_payload    the part derived from the arguments hidden
Job flow_key           view_job_payload    the part derived from the arguments hidden
Workflow result        view_job_payload    withheld (None, ``result_hidden``)
Schedule args, kwargs  view_job_payload    withheld (None, ``payload_hidden``)
FlowLimit key          view_job_payload    the part derived from the arguments hidden
Checkpoint result      view_job_payload    withheld (None, ``payload_hidden``)
Signal payload         view_job_payload    withheld (None, ``payload_hidden``)
=====================  ==================  ============================================

A step's stored result (``context.step``) and a signal's payload are a job's data as much as
its arguments: ``journal`` is how every surface reads them.

>>> clearance = Clearance.of(request.user)
>>> clearance.shown(Workflow, "result", workflow.result)   # None without view_job_payload
>>> clearance.lookup_allowed(Job, "unique_key__startswith")
False
>>> disclose(job, request.user)["payload_hidden"]
True
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import Model, Q

from . import permissions
from .models import Checkpoint, FlowLimit, Job, Queue, Schedule, Signal, WorkerProcess, Workflow
from .redaction import redact, redact_text
from .registry import registered_tasks

PAYLOAD = ("view_payload",)
ERRORS = ("view_payload", "view_traceback")
"""Reading all of an error (its message unredacted and its traceback) needs both."""

DERIVED_KEY_PREFIXES = ("@args:", "@fn:")
"""How the unique keys that ``unique_on`` derives from a call's arguments begin (enqueue.py)."""
HIDDEN_PART = "(hidden)"


@dataclass(frozen=True, slots=True, kw_only=True)
class Hidden:
    """A row of the catalogue: ``model.field`` is shown as stored with every permission action
    of ``needs`` (``permissions.ACTIONS``); a user without them sees ``without(clearance,
    value, row)`` instead (``row``, the model instance or its values, when there is one)."""

    model: type[Model]
    field: str
    needs: tuple[str, ...]
    without: Callable[[Clearance, Any, Any], Any]


def _withheld(clearance: Clearance, value: Any, row: Any) -> None:
    return None


def _redacted(clearance: Clearance, value: Any, row: Any) -> Any:
    return redact_text(value) if isinstance(value, str) else redact(value)


def _errors(clearance: Clearance, value: Any, row: Any) -> list[dict[str, Any]]:
    return clearance.errors(value if isinstance(value, list) else [])


def _unique_key(clearance: Clearance, key: Any, row: Any) -> str | None:
    """A key derived from the arguments (``@args:…``, ``@fn:…``) quotes them; a key given by
    hand, a digest (``@args#…``) or ``@task`` is shown."""
    if not isinstance(key, str):
        return None
    for prefix in DERIVED_KEY_PREFIXES:
        if key.startswith(prefix):
            return prefix + HIDDEN_PART
    return key


def _flow_key(clearance: Clearance, key: Any, row: Any) -> str | None:
    """``limit:<task>`` and ``batch:<task>`` name a task; ``limit:<task>:<key>`` and
    ``fair:<key>`` quote what the task's ``limit_key`` / ``fair_key`` made of the arguments.
    Only the forms made of a task's name are shown (the job's task, or a registered one)."""
    if not isinstance(key, str):
        return None
    task = getattr(row, "task_name", None)
    tasks = [task] if task else sorted(registered_tasks(), key=len, reverse=True)
    for name in tasks:
        if key in (f"limit:{name}", f"batch:{name}"):
            return key
        if key.startswith(f"limit:{name}:"):
            return f"limit:{name}:{HIDDEN_PART}"
    if key.startswith("fair:"):
        return "fair:" + HIDDEN_PART
    return HIDDEN_PART


HIDDEN: tuple[Hidden, ...] = (
    Hidden(model=Job, field="args", needs=PAYLOAD, without=_withheld),
    Hidden(model=Job, field="kwargs", needs=PAYLOAD, without=_withheld),
    Hidden(model=Job, field="result", needs=PAYLOAD, without=_withheld),
    Hidden(model=Job, field="progress_details", needs=PAYLOAD, without=_withheld),
    Hidden(model=Job, field="progress_message", needs=PAYLOAD, without=_redacted),
    Hidden(model=Job, field="errors", needs=ERRORS, without=_errors),
    Hidden(model=Job, field="unique_key", needs=PAYLOAD, without=_unique_key),
    Hidden(model=Job, field="flow_key", needs=PAYLOAD, without=_flow_key),
    Hidden(model=Workflow, field="result", needs=PAYLOAD, without=_withheld),
    Hidden(model=Schedule, field="args", needs=PAYLOAD, without=_withheld),
    Hidden(model=Schedule, field="kwargs", needs=PAYLOAD, without=_withheld),
    Hidden(model=FlowLimit, field="key", needs=PAYLOAD, without=_flow_key),
    Hidden(model=Checkpoint, field="result", needs=PAYLOAD, without=_withheld),
    Hidden(model=Signal, field="payload", needs=PAYLOAD, without=_withheld),
)
"""The catalogue of what not every viewer may see; later features add their rows here."""

_CATALOGUE = {(row.model, row.field): row for row in HIDDEN}


def _entry(model: type[Model], field: str) -> Hidden | None:
    """The catalogue's row of ``model.field`` (``pk`` names the primary key), if any."""
    if field == "pk":
        field = model._meta.pk.name
    return _CATALOGUE.get((model, field))


# The lookups a query string may chain after a field, by the field's kind.
EXACT = frozenset({"exact", "iexact", "in", "isnull"})
ORDERED = EXACT | {"gt", "gte", "lt", "lte", "range"}
TEXT = ORDERED | {
    "contains", "icontains", "startswith", "istartswith", "endswith", "iendswith", "regex",
    "iregex",
}  # fmt: skip
TIME = ORDERED | {"date", "year", "month", "day", "hour", "minute", "week_day"}
RELATION = ORDERED | {"id", "pk"}

QUERYABLE: dict[type[Model], dict[str, frozenset[str]]] = {
    Job: {
        "id": ORDERED, "task_name": TEXT, "queue": TEXT, "status": TEXT, "priority": ORDERED,
        "attempt": ORDERED, "max_attempts": ORDERED, "run_after": TIME, "deadline": TIME,
        "enqueued_at": TIME, "started_at": TIME, "finished_at": TIME, "workflow": RELATION,
        "run_condition": TEXT, "waiting_on": ORDERED, "lease_owner": TEXT,
        "unique_key": TEXT, "flow_key": TEXT,
    },
    Workflow: {
        "id": ORDERED, "name": TEXT, "status": TEXT, "total": ORDERED, "open": ORDERED,
        "succeeded": ORDERED, "failed": ORDERED, "cancelled": ORDERED, "created_at": TIME,
        "finished_at": TIME,
    },
    Schedule: {
        "id": ORDERED, "name": TEXT, "task_name": TEXT, "cron": TEXT, "timezone": TEXT,
        "queue": TEXT, "enabled": EXACT, "catch_up": TEXT, "source": TEXT,
        "next_run_at": TIME, "last_run_at": TIME,
    },
    FlowLimit: {"key": TEXT, "updated_at": TIME},
    Queue: {"name": TEXT, "paused_at": TIME},
    WorkerProcess: {
        "id": TEXT, "host": TEXT, "pid": ORDERED, "concurrency": ORDERED, "running": ORDERED,
        "started_at": TIME, "last_seen_at": TIME,
    },
}  # fmt: skip
"""What a query string may filter on, field by field with the lookups it may chain; anything
else (every JSON field among them) is refused. Fields of ``HIDDEN`` need the clearance too."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Clearance:
    """What one user may see, read once per request (``has_perm`` caches, but a list page
    asks for many jobs)."""

    payload: bool
    tracebacks: bool

    @classmethod
    def of(cls, user: Any) -> Clearance:
        return cls(
            payload=permissions.allowed(user, "view_payload"),
            tracebacks=permissions.allowed(user, "view_traceback"),
        )

    @classmethod
    def everything(cls) -> Clearance:
        """The clearance of the shell's authority (``workqueue`` without ``--user``)."""
        return cls(payload=True, tracebacks=True)

    def holds(self, actions: Iterable[str]) -> bool:
        held = {"view_payload": self.payload, "view_traceback": self.tracebacks}
        return all(held[action] for action in actions)

    def may_see(self, model: type[Model], field: str) -> bool:
        """Whether this user sees ``model.field`` as stored, and so may filter, search and
        order on it."""
        row = _entry(model, field)
        return row is None or self.holds(row.needs)

    def shown(self, model: type[Model], field: str, value: Any, row: Any = None) -> Any:
        """``value`` of ``model.field`` as this user may see it."""
        entry = _entry(model, field)
        if entry is None or self.holds(entry.needs):
            return value
        return entry.without(self, value, row)

    def lookup_allowed(self, model: type[Model], lookup: str) -> bool:
        """Whether a query string may filter ``model`` on ``lookup``
        (``field__lookup__lookup``): the field and every lookup after it in ``QUERYABLE``, and
        the field one this user may see."""
        field, *chained = lookup.split("__")
        if field == "pk":
            field = model._meta.pk.name
        allowed = QUERYABLE.get(model, {}).get(field)
        if allowed is None or not self.may_see(model, field):
            return False
        return all(part in allowed for part in chained)

    def searchable(self, model: type[Model], field: str, term: str) -> bool:
        """Whether an exact search for ``term`` in ``model.field`` may run: on a field this
        user sees, or on the part of it that is shown (a hand-given unique key, not a derived
        one). A search for a hidden value would confirm a guess of it."""
        return self.may_see(model, field) or self.shown(model, field, term) == term

    def text(self, value: str) -> str:
        """A message as this user may read it."""
        return value if self.payload else redact_text(value)

    def errors(self, errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A job's recorded errors: type and message always (the message redacted without the
        payload permission), the traceback with the traceback permission only."""
        shown = []
        for error in errors:
            item = {key: value for key, value in error.items() if key != "traceback"}
            if isinstance(item.get("message"), str):
                item["message"] = self.text(item["message"])
            trace = error.get("traceback")
            if self.tracebacks and isinstance(trace, str):
                item["traceback"] = self.text(trace)
            shown.append(item)
        return shown

    def unique_key(self, key: str | None) -> str | None:
        """A job's unique key as this user may read it."""
        return self.shown(Job, "unique_key", key)

    def flow_key(self, job: Job) -> str | None:
        """A job's flow key as this user may read it."""
        return self.shown(Job, "flow_key", job.flow_key, job)

    def payload_of(self, job: Job) -> dict[str, Any]:
        """``args``, ``kwargs``, ``result`` and progress ``details``: as stored, or None each
        (with ``payload_hidden``) for users without the payload permission."""
        shown = {
            field: self.shown(Job, field, getattr(job, field))
            for field in ("args", "kwargs", "result", "progress_details")
        }
        return {**shown, "payload_hidden": not self.may_see(Job, "args")}

    def error_text_filter(self, text: str) -> Q:
        """Jobs with a recorded error whose text (type, message or traceback) contains
        ``text``, any case; raises ``ErrorTextHidden`` for a user who may not read all of an
        error: a match would confirm a guess of what is hidden from them."""
        if not self.holds(ERRORS):
            raise ErrorTextHidden(
                "filtering on the text of errors needs the permissions "
                f"{permissions.permission('view_payload')} and "
                f"{permissions.permission('view_traceback')} (messages and tracebacks quote "
                "arguments); filter on the error's type instead"
            )
        return Q(errors__icontains=text)


class ErrorTextHidden(PermissionError):
    """A filter on the text of errors by a user who may not read it; the message names the
    permissions and the fix."""


def error_type_filter(*error_types: str) -> Q:
    """Jobs with a recorded error of one of ``error_types`` (full names, e.g.
    ``builtins.ValueError``), for every user: the match is on the type as it is stored,
    ``"type": "<name>"`` in the errors' JSON text. A quote inside a message or a traceback is
    stored escaped, so no text of theirs can imitate it."""
    matches = Q()
    for error_type in error_types:
        matches |= Q(errors__icontains='"type": ' + json.dumps(error_type))
    return matches


def disclose(job: Job, user: Any) -> dict[str, Any]:
    """The parts of ``job`` that depend on ``user``'s permissions: payload, errors, the
    progress message, the unique key and the flow key."""
    clearance = Clearance.of(user)
    return {
        **clearance.payload_of(job),
        "unique_key": clearance.unique_key(job.unique_key),
        "flow_key": clearance.flow_key(job),
        "progress_message": clearance.shown(Job, "progress_message", job.progress_message),
        "errors": clearance.errors(job.errors if isinstance(job.errors, list) else []),
    }


JOURNAL_ROWS = 50
"""How many of a job's steps and of its signals a surface shows (the first ones)."""


def journal(job: Job, clearance: Clearance) -> dict[str, Any]:
    """What a job's body stored on its way (``context.step``, ``sleep``, ``wait_for_signal``)
    and the signals sent to it or its workflow, as ``clearance`` may see them: step results and
    signal payloads are withheld without ``view_job_payload`` (``payload_hidden``)."""
    alias = job._state.db
    checkpoints = (
        Checkpoint.objects.using(alias).filter(job_id=job.pk).order_by("id")
        .values("kind", "name", "result", "wakes_at", "signal", "created_at", "task_version")
        [:JOURNAL_ROWS]
    )  # fmt: skip
    target = Q(job_id=job.pk)
    if job.workflow_id is not None:
        target |= Q(workflow_id=job.workflow_id)
    signals = (
        Signal.objects.using(alias).filter(target).order_by("id")
        .values("name", "payload", "sent_at", "delivered_at", "delivered_to")[:JOURNAL_ROWS]
    )  # fmt: skip
    return {
        "steps": [
            {**row, "result": clearance.shown(Checkpoint, "result", row["result"])}
            for row in checkpoints
        ],
        "signals": [
            {**row, "payload": clearance.shown(Signal, "payload", row["payload"])}
            for row in signals
        ],
        "payload_hidden": not clearance.may_see(Checkpoint, "result"),
    }
