"""DRF permission classes over the one workqueue permission model (``permissions.allowed``).

A view says which workqueue action each of its routes is (``workqueue_actions``: a viewset's
action name, or an HTTP method in lower case, to a key of ``permissions.ACTIONS``); a route it
does not name is denied, whoever asks. HEAD is its GET's.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.authentication import BasicAuthentication
from rest_framework.permissions import SAFE_METHODS, BasePermission
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
        if foreign_basic_change(request):
            self.message = (
                "a change authenticated by HTTP basic came from another site (Origin "
                f"{request.headers.get('Origin')!r}); send it from this site, or without an "
                "Origin header (scripts), or add the origin to CSRF_TRUSTED_ORIGINS"
            )
            return False
        if permissions.allowed(user, action):
            return True
        self.message = (
            f"{user.get_username()} may not {action.replace('_', ' ')}: it needs the "
            f"permission {permissions.permission(action)}"
        )
        return False


def foreign_basic_change(request: Request) -> bool:
    """A change authenticated by HTTP basic that a browser sent from another site.

    Session changes are CSRF-checked; basic ones are not (DRF), yet a browser that was once
    asked for them (the 401's ``WWW-Authenticate: Basic``) sends the credentials with a
    cross-site form's POST, and the job actions take no body for JSON-only parsing to refuse.
    Browsers name the page's origin in ``Origin`` on every cross-origin POST; scripts send none.
    """
    if request.method in SAFE_METHODS:
        return False
    if not isinstance(getattr(request, "successful_authenticator", None), BasicAuthentication):
        return False
    origin = request.headers.get("Origin")
    if origin is None:
        return request.headers.get("Sec-Fetch-Site") in ("cross-site", "same-site")
    own = f"{request.scheme}://{request.get_host()}"
    return origin != own and origin not in getattr(settings, "CSRF_TRUSTED_ORIGINS", [])
