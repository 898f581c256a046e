"""Who ``manage.py workqueue`` acts for, and what that user may do.

With ``--user NAME`` the command acts for that Django user: each subcommand needs the same
permission as in the admin and the API (``permissions.py``), ``show`` discloses what the user
may see (``disclosure.py``), and the audit trail names the user and the OS user who ran the
command (``alice (cli:root)``). ``--user`` is not a login: no password is asked, since whoever
runs ``manage.py`` holds the project's settings and could reach the database anyway; it
limits a careful operator to a user's permissions and says in the trail who acted for whom.
Without it the command acts with the shell's authority and the audit names the OS user
(``cli:<name>``); ``WORKQUEUE["CLI_REQUIRE_USER"] = True`` makes ``--user`` mandatory.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied

from .. import audit, permissions
from ..conf import workqueue_settings as conf
from ..disclosure import Clearance

SUBCOMMAND_ACTIONS = {
    "status": "view", "workers": "view", "jobs": "view", "show": "view", "explain": "view",
    "cancel": "cancel",
    "retry": "retry", "redrive": "redrive", "hold": "hold", "release": "release",
    "pause": "pause", "resume": "resume", "purge": "purge", "import-django-tasks-db": "enqueue",
    "signal": "signal",
}  # fmt: skip
"""The permission action each subcommand needs (``permissions.ACTIONS``)."""


class NotAllowed(Exception):
    """The command may not run as asked; the message names the problem and the fix."""


class Authority:
    """The user the command acts for (None: the shell's authority)."""

    def __init__(self, username: str | None) -> None:
        self.user = _find(username) if username else None
        if self.user is None and conf.CLI_REQUIRE_USER:
            raise NotAllowed(
                "WORKQUEUE['CLI_REQUIRE_USER'] is on: name the Django user you act for with "
                "--user NAME (manage.py workqueue --user alice status)"
            )

    @property
    def actor(self) -> Any:
        """Who the audit trail names (with ``via``)."""
        return self.user if self.user is not None else audit.cli_actor()

    @property
    def via(self) -> str | None:
        """Who acted for the user: the OS user, when ``--user`` names a Django user."""
        return audit.cli_actor() if self.user is not None else None

    def require(self, subcommand: str, *, tracebacks: bool = False) -> None:
        if self.user is None:
            return
        try:
            permissions.require(self.user, SUBCOMMAND_ACTIONS[subcommand])
            if tracebacks:
                permissions.require(self.user, "view_traceback")
        except PermissionDenied as exc:
            raise NotAllowed(str(exc)) from None

    @property
    def clearance(self) -> Clearance:
        """What the command may show and filter on (``disclosure``): the user's clearance, or
        everything for the shell's authority."""
        return Clearance.everything() if self.user is None else Clearance.of(self.user)


def _find(username: str) -> Any:
    model = get_user_model()
    try:
        user = model._default_manager.get_by_natural_key(username)
    except model.DoesNotExist:
        raise NotAllowed(
            f"there is no user {username!r}: --user names a Django user (its username)"
        ) from None
    if not user.is_active:
        raise NotAllowed(f"the user {username!r} is inactive: it may not act")
    return user
