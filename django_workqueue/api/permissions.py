"""DRF permission classes over the one workqueue permission model (``permissions.allowed``).

A view says which workqueue action each of its routes is (``workqueue_actions``: a viewset's
action name, or an HTTP method in lower case, to a key of ``permissions.ACTIONS``); a route it
does not name is denied, whoever asks. HEAD is its GET's.
"""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from .. import permissions


def required_action(request: Request, view: Any) -> str | None:
    """The workqueue action the request's route needs, or None for a route the view does not
    name (denied)."""
    actions: dict[str, str] = getattr(view, "workqueue_actions", {})
    route = getattr(view, "action", None) or request.method.lower()
    if route == "head":  # a GET without its body
        route = "get"
    return actions.get(route)


class HasWorkqueuePermission(BasePermission):
    """Allows an authenticated user who holds the permission of the route's action."""

    message = "You do not have the workqueue permission this route needs."

    def has_permission(self, request: Request, view: Any) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        method = request.method.lower()
        if method not in view.http_method_names or not hasattr(view, method):
            return True  # no handler: the view answers 405 Method Not Allowed, changing nothing
        action = required_action(request, view)
        if action is None:
            return False
        if permissions.allowed(user, action):
            return True
        self.message = (
            f"{user.get_username()} may not {action.replace('_', ' ')}: it needs the "
            f"permission {permissions.permission(action)}"
        )
        return False
