"""Who ``manage.py workqueue`` acts for, and what that user may do.

With ``--user NAME`` the command acts for that Django user: each subcommand needs the same
permission as in the admin and the API (``permissions.py``), ``show`` discloses what the user
may see (``disclosure.py``), and the audit trail names the user. Without it the command acts
with the authority of whoever can run ``manage.py`` (a shell on a host with the project's
settings can reach the database anyway) and the audit names the OS user (``cli:<name>``);
``WORKQUEUE["CLI_REQUIRE_USER"] = True`` makes ``--user`` mandatory.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied

from .. import audit, permissions
from ..conf import workqueue_settings as conf
from ..disclosure import Clearance

SUBCOMMAND_ACTIONS = {
    "status": "view", "workers": "view", "jobs": "view", "show": "view", "cancel": "cancel",
    "retry": "retry", "redrive": "redrive", "hold": "hold", "release": "release",
    "pause": "pause", "resume": "resume", "purge": "purge",
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
        """Who the audit trail names."""
        return self.user if self.user is not None else audit.cli_actor()

    def require(self, subcommand: str, *, tracebacks: bool = False) -> None:
        if self.user is None:
            return
        try:
            permissions.require(self.user, SUBCOMMAND_ACTIONS[subcommand])
            if tracebacks:
                permissions.require(self.user, "view_traceback")
        except PermissionDenied as exc:
            raise NotAllowed(str(exc)) from None

    def listed(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``workqueue jobs``' rows as this user may see them: each last error's message
        redacted without the payload permission, as ``show`` and the API do."""
        if self.user is None:
            return rows
        clearance = Clearance.of(self.user)
        if clearance.payload:
            return rows
        shown = []
        for row in rows:
            last = row.get("last_error")
            if last:
                row = {
                    **row,
                    "last_error": {**last, "message": clearance.text(last["message"] or "")},
                }
            shown.append(row)
        return shown

    def disclosed(
        self, detail: dict[str, Any], errors: list[dict[str, Any]], *, tracebacks: bool
    ) -> dict[str, Any]:
        """``workqueue show``'s detail as this user may see it (everything for the shell);
        ``errors`` are the job's recorded errors, tracebacks included."""
        if self.user is None:
            return detail
        clearance = Clearance.of(self.user)
        shown = {**detail, "errors": clearance.errors(errors)}
        if not tracebacks:
            for error in shown["errors"]:
                error.pop("traceback", None)
        if not clearance.payload:
            if detail.get("last_error"):
                last = detail["last_error"]
                shown["last_error"] = {**last, "message": clearance.text(last["message"] or "")}
            shown.update(args=None, kwargs=None, result=None, payload_hidden=True)
            shown["unique_key"] = clearance.unique_key(detail.get("unique_key"))
            shown["progress"] = {
                **detail["progress"], "details": None,
                "message": clearance.text(detail["progress"]["message"]),
            }  # fmt: skip
        return shown


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
