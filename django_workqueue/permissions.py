"""Who may do what: the one permission model that the admin, the API, the websockets and the
``workqueue`` command check.

Every operator action maps to one permission on ``Job`` (declared in ``Job.Meta.permissions``;
``view`` is Django's default ``view_job``). Active superusers have them all, as Django's
``ModelBackend`` grants.

>>> require(request.user, "redrive")   # raises PermissionDenied naming django_workqueue.retry_job
>>> allowed(request.user, "view_payload")
False
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied

APP_LABEL = "django_workqueue"

VIEW_JOB = "view_job"
ADD_JOB = "add_job"
"""Django's default ``add`` permission of ``Job``: enqueueing a job from outside the code (the
HTTP API, for tasks registered with ``api=True``)."""
VIEW_JOB_PAYLOAD = "view_job_payload"
VIEW_JOB_TRACEBACK = "view_job_traceback"
CANCEL_JOB = "cancel_job"
RETRY_JOB = "retry_job"
HOLD_JOB = "hold_job"
SIGNAL_JOB = "signal_job"
PURGE_JOB = "purge_job"
MANAGE_QUEUE = "manage_queue"
MANAGE_SCHEDULE = "manage_schedule"

ACTIONS: dict[str, str] = {
    "view": VIEW_JOB,
    "view_payload": VIEW_JOB_PAYLOAD,
    "view_traceback": VIEW_JOB_TRACEBACK,
    "enqueue": ADD_JOB,
    "cancel": CANCEL_JOB,
    "retry": RETRY_JOB,
    "redrive": RETRY_JOB,
    "hold": HOLD_JOB,
    "release": HOLD_JOB,
    "signal": SIGNAL_JOB,
    "purge": PURGE_JOB,
    "pause": MANAGE_QUEUE,
    "resume": MANAGE_QUEUE,
    "manage_schedule": MANAGE_SCHEDULE,
    "run_schedule": MANAGE_SCHEDULE,
}
"""Action → the codename of the permission it needs."""


def permission(action: str) -> str:
    """The full permission name (``app_label.codename``) that ``action`` needs."""
    try:
        codename = ACTIONS[action]
    except KeyError:
        known = ", ".join(sorted(ACTIONS))
        raise ValueError(f"unknown workqueue action {action!r}; the actions are: {known}") from None
    return f"{APP_LABEL}.{codename}"


def allowed(user: Any, action: str) -> bool:
    """Whether ``user`` (any object with ``has_perm``, e.g. ``AnonymousUser``) may do ``action``."""
    return bool(user is not None and user.has_perm(permission(action)))


def require(user: Any, action: str) -> None:
    """Raise ``PermissionDenied`` unless ``user`` may do ``action``; the message names the
    missing permission, so an administrator knows what to grant."""
    if not allowed(user, action):
        name = getattr(user, "get_username", lambda: "anonymous")() or "anonymous"
        raise PermissionDenied(
            f"{name} may not {action.replace('_', ' ')}: it needs the permission "
            f"{permission(action)}"
        )
