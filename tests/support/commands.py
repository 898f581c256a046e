"""Management commands run as a test sees them: exit status, stdout and stderr."""

from __future__ import annotations

import io

from django.core.management import call_command
from django.core.management.base import CommandError


def run_workqueue(*args: str) -> tuple[int, str, str]:
    """``manage.py workqueue <args>``'s exit status, stdout and stderr (the error's message
    when it exited through ``CommandError``)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("workqueue", *args, stdout=out, stderr=err)
    except CommandError as exc:
        return exc.returncode, out.getvalue(), str(exc)
    return 0, out.getvalue(), err.getvalue()
