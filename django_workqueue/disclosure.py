"""What of a job a user may see: the one rule the admin, the API and the websockets apply.

- ``view_job``: the job's fields, its progress and its errors' types; error and progress
  messages are redacted (``redaction.py``) for users without ``view_job_payload``, since
  messages often quote arguments.
- ``view_job_payload``: arguments, result and progress details, as stored; so are the unique
  keys that ``@task(unique_on=...)`` derives from the arguments (``@args:{"email": …}``), shown
  as ``@args:(hidden)`` without it.
- ``view_job_traceback``: the tracebacks of its errors (redacted too without the payload
  permission).

>>> disclose(job, request.user)["args"]        # None unless the user may see the payload
>>> disclose(job, request.user)["payload_hidden"]
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import permissions
from .models import Job
from .redaction import redact, redact_text

DERIVED_KEY_PREFIXES = ("@args:", "@fn:")
"""How the unique keys that ``unique_on`` derives from a call's arguments begin (enqueue.py)."""


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
        """A job's unique key as this user may read it: a key derived from the arguments
        (``@args:…``, ``@fn:…``) quotes them, so it is hidden without the payload permission;
        a key given by hand, a digest (``@args#…``) or ``@task`` is shown."""
        if self.payload or key is None:
            return key
        for prefix in DERIVED_KEY_PREFIXES:
            if key.startswith(prefix):
                return f"{prefix}(hidden)"
        return key

    def payload_of(self, job: Job) -> dict[str, Any]:
        """``args``, ``kwargs``, ``result`` and progress ``details``: as stored, or None each
        (with ``payload_hidden``) for users without the payload permission."""
        if self.payload:
            return {
                "args": job.args, "kwargs": job.kwargs, "result": job.result,
                "progress_details": job.progress_details, "payload_hidden": False,
            }  # fmt: skip
        return {
            "args": None, "kwargs": None, "result": None, "progress_details": None,
            "payload_hidden": True,
        }  # fmt: skip

    def redacted(self, value: Any) -> Any:
        """Any JSON value (a workflow's result, a schedule's arguments) as this user may see
        it: as stored with the payload permission, redacted without."""
        return value if self.payload else redact(value)


def disclose(job: Job, user: Any) -> dict[str, Any]:
    """The parts of ``job`` that depend on ``user``'s permissions: payload, errors, the
    progress message and the unique key."""
    clearance = Clearance.of(user)
    return {
        **clearance.payload_of(job),
        "unique_key": clearance.unique_key(job.unique_key),
        "progress_message": clearance.text(job.progress_message),
        "errors": clearance.errors(job.errors),
    }
