"""Confirming a destructive change of ``manage.py workqueue`` (``--all``, ``purge``): ``--yes``
(or ``--noinput``, as ``flush`` takes it) says so up front; otherwise the operator types
``yes`` at a terminal, and without a terminal (a script, cron, CI) the command refuses, so
that nothing unattended cancels or deletes everything by accident."""

from __future__ import annotations

import sys

from django.core.management.base import CommandError


def confirm(change: str, *, command: str, returncode: int, declined_returncode: int) -> None:
    """Return once the operator confirms ``change`` (e.g. "cancel 42 job(s)"); raise
    ``CommandError`` otherwise: with ``returncode`` when nobody can be asked (stdin is not a
    terminal), with ``declined_returncode`` when the answer is not ``yes``."""
    if not sys.stdin.isatty():
        raise CommandError(
            f"{command} would {change} and needs a confirmation, but stdin is not a terminal: "
            f"add --yes (or --noinput) to go ahead, or --dry-run to see what would change",
            returncode=returncode,
        )
    answer = input(f"{command} will {change}.\nType 'yes' to continue, or 'no' to stop: ")
    if answer.strip().lower() != "yes":
        raise CommandError(
            f"{command}: not confirmed; nothing changed", returncode=declined_returncode
        )
